"""What a worker holds and does: a model replica that evaluates chunks and replays updates.

A :class:`Replica` calls the run's recipe (so it builds the same model and draws the same
noise from the same seeds as the coordinator) and keeps what it built. From then on it only

- evaluates members [lo, hi) of its current step and answers with a RESULT message
  (``wire.py``): ternary-packed pair signs when the strategy shapes with pair_sign/ternary,
  float32 otherwise, plus what a stateful fitness added (``recipe.py``);
- applies a SHAPED message: the same deterministic update the coordinator applied, so no
  weights cross the network. With the update the coordinator sends its parameter hash
  every ``hash_every`` steps; a replica whose hash differs refuses to evaluate
  (:class:`ReplicaDrift`) until the coordinator re-sends its state;
- loads the coordinator's full state (parameters, optimizer, fitness state) when it is new,
  restarted or repaired: never by replaying history.

It knows nothing about Ray (``ray.py`` wraps it in an actor) nor about the engine, so it is
tested in-process. Subclasses may wrap :meth:`evaluate` and :meth:`update` (the fault tests
do: ``tests/distributed/faulty.py``).
"""
from __future__ import annotations

import hashlib
import os

import torch

from ..nn.evaluate import check_chunk_fitness
from ..strategies.shaping import SHAPINGS
from . import wire
from .base import PhaseTimes
from .recipe import Recipe, cook, fitness_state, load_fitness_state


class ReplicaDrift(RuntimeError):
    """This replica's parameters differ from the coordinator's: it must be re-sent the state."""


def state_hash(model: torch.nn.Module) -> str:
    """SHA-256 of the model's parameters, in name order, bit for bit (buffers that a fitness derives
    from its own state, like observation statistics, are set per step by fitness, not by updates)."""
    h = hashlib.sha256()
    for name, t in sorted(model.named_parameters()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def ternary_results(es) -> bool:
    """Can a chunk's result be sent as pair signs? Only when the shaping is pair_sign/ternary of
    one score per member with no baseline members, since then shaping the chunk alone gives
    exactly the coordinator's shaping of the whole population (it only compares twins)."""
    shaping = es.strategy.shaping
    return any(shaping is SHAPINGS[n] for n in ("pair_sign", "ternary")) and not es.config.baseline_every


class BundledStates(tuple):
    """What a stateful fitness added in each of a group's chunks, in member order: a group's coordinator
    (``ray_groups.py``) answers for its range with the list, and the driver merges them one by one, so
    the merge sees the same chunks as a flat run's."""


def unbundle(state) -> tuple:
    """A chunk's added state as the sequence the driver merges (a group's several, anyone else's one)."""
    return tuple(state) if isinstance(state, BundledStates) else (state,)


def coordinator_state(es, fitness) -> dict:
    """Everything a new or repaired replica loads: parameters, optimizer, fitness state."""
    sd = es.state_dict()
    return {"model": sd["model"], "strategy": sd["strategy"], "fitness": fitness_state(fitness)}


class Replica:
    def __init__(self, recipe: Recipe, state: dict | None = None, threads: int | None = 1, slot: int = 0,
                 generation: int = 0):
        if threads:
            torch.set_num_threads(threads)
        self.slot, self.generation = slot, generation
        self.es, self.fitness = cook(recipe)
        self.model = self.es.model
        self.ternary = ternary_results(self.es)
        self.drifted: str | None = None
        self.phases = PhaseTimes()   # this worker's evaluate / wire / replay / hash seconds
        if state is not None:
            self.load(state)

    def ready(self) -> int:
        return os.getpid()

    def phase_times(self) -> dict:
        """Seconds this replica spent per phase so far ({name: seconds}) and its updates ("steps"):
        the worker side of the backend's step breakdown, read once at the end, not per step."""
        return {**self.phases.seconds, "steps": self.phases.steps}

    def reset_phases(self) -> None:
        """Start the breakdown afresh (after warm-up steps), in order with the calls before it."""
        self.phases.reset()

    @property
    def step(self) -> int:
        return self.es.step

    def load(self, state: dict) -> str:
        """Take the coordinator's state; returns the resulting hash."""
        self.es.load_state_dict({"model": state["model"], "strategy": state["strategy"]})
        load_fitness_state(self.fitness, state.get("fitness"))
        self.drifted = None
        return state_hash(self.model)

    def evaluate(self, step: int, lo: int, hi: int) -> tuple[bytes, dict | None]:
        """(RESULT message with the fitness of members [lo, hi) at this replica's step, what a stateful
        fitness added while scoring them, or None).

        ``step`` is what the coordinator expects; a replica at another step still answers with
        its own, and the coordinator's decoder refuses it and re-sends the state.
        """
        if self.drifted:
            raise ReplicaDrift(self.drifted)
        with self.phases("evaluate"), self.es.perturbed((lo, hi)):
            f = check_chunk_fitness(self.fitness(self.model, lo, hi, self.es.step), lo, hi).cpu()
        added = self.fitness.chunk_state() if hasattr(self.fitness, "chunk_state") else None
        with self.phases("wire"):
            encoding = wire.F32
            if self.ternary and f.dim() == 1 and bool(torch.isfinite(f).all()):
                f, encoding = self.es.strategy.shaping(f), wire.TERNARY  # exact: see ternary_results
            return wire.encode(wire.RESULT, self.es.step, lo, f, encoding), added

    def update(self, message: bytes, expected_hash: str | None = None, fitness_state: dict | None = None) -> str | None:
        """Apply the SHAPED message of this step; with ``expected_hash``, compare the result.
        ``fitness_state``: the coordinator's fitness state after the step (every chunk merged)."""
        with self.phases("wire"):
            msg = wire.decode(message, wire.SHAPED, self.es.step, 0, self.es.population)
        with self.phases("replay"):
            self.replay(msg.values)
        self.phases.steps += 1
        load_fitness_state(self.fitness, fitness_state)
        return self.check_hash(expected_hash)

    def replay(self, shaped) -> None:
        """This replica's share of the update: all of it (a worker sharing its node's weights: a part)."""
        self.es.update(shaped)

    def check_hash(self, expected_hash: str | None) -> str | None:
        """This replica's hash; a mismatch with ``expected_hash`` marks it drifted until it is re-sent the state."""
        if expected_hash is None:
            return None
        with self.phases("hash"):
            mine = state_hash(self.model)
        if mine != expected_hash:
            self.drifted = (f"parameters after step {self.es.step} hash to {mine[:12]}, the coordinator's to "
                            f"{expected_hash[:12]}")
        return mine
