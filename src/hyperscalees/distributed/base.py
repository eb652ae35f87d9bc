"""What a backend is: the thing that turns one step's population into its fitness.

The engine receives a backend and never evaluates members itself:

    pop = es.ask()
    fitness = backend.evaluate(es, fitness_fn, chunk)   # (P,) or (P, G)
    metrics = backend.update(es, es.shape(fitness))     # every replica applies the same update

``fitness_fn(model, lo, hi)`` runs the perturbed model on member-major inputs for members
[lo, hi) and returns their scores, (hi - lo,) or (hi - lo, G). The in-process backend
(``local.py``) loops over chunks; a distributed one hands the same chunks to workers that
rebuild the same noise from seeds, so the result is the same, bit for bit.
"""
from __future__ import annotations

from typing import Callable

from torch import Tensor, nn

FitnessFn = Callable[[nn.Module, int, int], Tensor]


class AbstractBackend:
    def start(self, cfg, task, es) -> None:
        """Called by the engine once before the first step, with the run's config, task and ES
        (a distributed backend starts workers that build the same ones; in-process: nothing)."""

    def evaluate(self, es, fitness_fn: FitnessFn, chunk: int | None = None) -> Tensor:
        """Fitness of the whole current population: (P,) or (P, G), on the CPU."""
        raise NotImplementedError

    def update(self, es, shaped: Tensor) -> dict[str, float]:
        """Apply the step's update from shaped fitness wherever a replica of the model lives."""
        return es.update(shaped)

    def close(self) -> None:
        """Release workers (nothing to do in-process)."""
