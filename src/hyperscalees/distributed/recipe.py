"""What every backend is handed: a *recipe* that builds, from scratch, what a worker needs.

A recipe is a picklable zero-argument callable returning ``(es, fitness)``:

- ``es``: the module-level strategy (``hs.EGGROLL(model, ...)``) with its model;
- ``fitness``: a callable ``fitness(model, lo, hi, step) -> (hi - lo,) or (hi - lo, G)`` that
  scores members [lo, hi) of step ``step``; it runs inside ``es.perturbed((lo, hi))`` and must
  feed the model member-major inputs derived from ``step`` (never from call order), so any
  worker scoring any chunk gives the same numbers.

Calling a recipe twice must give the same model and strategy (same seeds, same init): every
worker calls it once and from then on only replays the coordinator's updates.

**Fitness that keeps state.** Some fitness functions accumulate state while they score
(RL's running observation statistics). In one process that just happens; across workers
the coordinator, which scores nothing, must end each step with the state an in-process run
would have. Such a fitness object adds four methods:

- ``chunk_state()``: what the last call added (sent back with the chunk's result);
- ``merge(model, step, states)``: on the coordinator, add the chunks' states, in member
  order, so the same operations run in the same order as in one process;
- ``state_dict()`` / ``load_state_dict(state)``: the whole state, sent to workers after each
  step and saved in checkpoints.

A fitness with a non-empty ``state_dict()`` but no ``merge`` is refused by distributed
backends: its state could not be kept consistent.
"""
from __future__ import annotations

from typing import Callable, Protocol

from torch import Tensor, nn


class Fitness(Protocol):
    def __call__(self, model: nn.Module, lo: int, hi: int, step: int) -> Tensor: ...


Recipe = Callable[[], tuple[object, Fitness]]
STATEFUL = ("chunk_state", "merge", "state_dict", "load_state_dict")


def cook(recipe: Recipe):
    """``(es, fitness)`` from ``recipe``, checked, with a message that says what was wrong."""
    if not callable(recipe):
        raise TypeError(f"a backend needs a recipe: a zero-argument callable returning (es, fitness), "
                        f"got {type(recipe).__name__}")
    built = recipe()
    if not (isinstance(built, tuple) and len(built) == 2):
        raise TypeError(f"the recipe must return (es, fitness), got {type(built).__name__}")
    es, fitness = built
    if not (hasattr(es, "perturbed") and hasattr(es, "update") and hasattr(es, "model")):
        raise TypeError(f"the recipe's first value must be an ES facade (hs.EGGROLL / hs.OpenES), "
                        f"got {type(es).__name__}")
    if not callable(fitness):
        raise TypeError(f"the recipe's fitness must be callable (model, lo, hi, step), got {type(fitness).__name__}")
    return es, fitness


def fitness_state(fitness) -> dict:
    """The fitness object's accumulated state ({} for a stateless one)."""
    return dict(fitness.state_dict()) if hasattr(fitness, "state_dict") else {}


def load_fitness_state(fitness, state: dict | None) -> None:
    if state and hasattr(fitness, "load_state_dict"):
        fitness.load_state_dict(state)


def merges(fitness) -> bool:
    """Does ``fitness`` implement the whole protocol for state kept across workers?"""
    return all(callable(getattr(fitness, m, None)) for m in STATEFUL)


def check_distributable(fitness) -> None:
    """Refuse a fitness whose state a distributed run could not keep consistent."""
    state = fitness_state(fitness)
    if state and not merges(fitness):
        missing = [m for m in STATEFUL if not callable(getattr(fitness, m, None))]
        raise ValueError(f"this fitness ({type(fitness).__name__}) accumulates state ({', '.join(sorted(state))}) "
                         f"but cannot merge the workers' chunks (it lacks {', '.join(missing)}); "
                         "run it on the local backend")
