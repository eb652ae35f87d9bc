"""What a backend is: a population -> fitness evaluator handed a recipe, the same for every backend.

    backend = hs.LocalBackend(recipe)              # or hs.RayBackend(recipe, workers=2)
    for _ in range(steps):
        metrics = backend.step()                   # evaluate on workers, shape, update everywhere
    model = backend.model                          # the driver's weights after the last step
    backend.close()

The recipe (``recipe.py``) builds ``(es, fitness)`` from scratch; the backend calls it once
on the driver (``backend.es``, ``backend.fitness``) and, for a distributed backend, once on
every worker. A step is :meth:`evaluate` (the whole population's fitness, chunk by chunk,
wherever the backend runs chunks), ``es.shape`` on the driver, then :meth:`update` wherever
a replica of the model lives. Since noise is a pure function of seeds and every replica
applies the same update to the same state, backends differ in speed, never in the weights.
"""
from __future__ import annotations

import time
from contextlib import contextmanager

from torch import Tensor

from ..nn.evaluate import check_chunk
from ..strategies.metrics import StepMetrics
from ..strategies.shaping import check_fitness, fitness_stats
from .recipe import Recipe, cook


class PhaseTimes:
    """Seconds spent in each named phase of a step, summed over the steps taken.

    Why: a distributed step is only worth its overhead when that overhead is known; every
    backend times the same phases (evaluate, shape, update) so they can be set side by side,
    and a backend that has more to say (Ray: waiting, wire, replay) adds its own names.
    """

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.steps = 0

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    @contextmanager
    def __call__(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0)

    def per_step_ms(self) -> dict[str, float]:
        """Mean milliseconds per step of each phase ({} before the first step)."""
        return {k: 1000 * v / self.steps for k, v in self.seconds.items()} if self.steps else {}

    def reset(self) -> None:
        self.seconds.clear()
        self.steps = 0


class AbstractBackend:
    """The driver's strategy and fitness, built from ``recipe``; subclasses say where chunks run."""

    name = "abstract"

    def __init__(self, recipe: Recipe, chunk: int | None = None):
        self.recipe = recipe
        self.es, self.fitness = cook(recipe)
        self.chunk = None if chunk is None else check_chunk(chunk, self.es.population)
        self.last_fitness = None
        self.phases = PhaseTimes()

    @property
    def model(self):
        """The driver's model (after the last step's update)."""
        return self.es.model

    def start(self) -> None:
        """Bring up whatever runs the chunks (nothing in-process). The training loop calls it before
        the first step, where a signal cuts it short at once; the first step does it if nobody did."""

    def evaluate(self) -> Tensor:
        """Fitness (P,) or (P, G) of the current step's whole population."""
        raise NotImplementedError

    def update(self, shaped: Tensor) -> StepMetrics:
        """Apply the step's update from shaped fitness wherever a replica of the model lives."""
        return self.es.update(shaped)

    def step(self) -> StepMetrics:
        """One ES step: evaluate, shape on the driver, update everywhere; the step's metrics."""
        with self.phases("evaluate"):
            fitness = check_fitness(self.evaluate(), self.es.population)
        self.last_fitness = fitness  # (P,) or (P, G) raw scores of the step just taken, on the device
        with self.phases("shape"):
            shaped = self.es.shape(fitness)
        with self.phases("update"):
            metrics = self.update(shaped)
        self.phases.steps += 1
        return metrics | fitness_stats(fitness)

    def reset_breakdown(self) -> None:
        """Forget the phases timed so far (the benchmarks' warm-up steps)."""
        self.phases.reset()

    def breakdown(self) -> dict:
        """Mean ms per step of each phase: {"driver": {...}} (a distributed backend adds "workers")."""
        return {"driver": self.phases.per_step_ms()}

    def reload(self) -> None:
        """The driver's model or strategy changed outside an update (a restart): replicas take its
        state. In-process there is nothing else to change."""

    def report(self) -> dict:
        """What the backend counted over the run (workers, retries, bytes); {} in-process."""
        return {}

    def close(self) -> None:
        """Release workers (nothing to do in-process)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
