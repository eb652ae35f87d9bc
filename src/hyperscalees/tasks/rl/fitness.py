"""RL's fitness as a backend sees it: rollouts whose observation statistics workers can merge.

Every rollout adds to the running observation sums (``normalize.py``). In one process that
just happens. On workers, each chunk's additions are recorded and sent back with its
result (:meth:`chunk_state`); the coordinator, which rolls nothing out, replays them in
member order (:meth:`merge`): the same float64 additions in the same order as one process
that scored the same chunks, so the statistics, and then the weights, agree bit for bit.
The protocol is the one ``distributed/recipe.py`` describes.
"""
from __future__ import annotations

from torch import Tensor, nn

from ..base import TaskFitness


class ObservationStatsFitness(TaskFitness):
    def __init__(self, task):
        super().__init__(task)
        self._added: dict | None = None

    def __call__(self, model: nn.Module, lo: int, hi: int, step: int) -> Tensor:
        stats, before = self.task.stats, self.task.env_steps
        stats.log = []
        try:
            f = self.task.fitness(model, lo, hi, step=step)
            self._added = {"obs": stats.log, "env_steps": self.task.env_steps - before}
        finally:
            stats.log = None
        return f

    def chunk_state(self) -> dict | None:
        """What the last call added to the statistics (and its env steps); None after it was taken."""
        added, self._added = self._added, None
        return added

    def merge(self, model: nn.Module, step: int, states: list) -> None:
        """Add the chunks' increments, in member order, as if this process had scored them; first
        what every fitness call does at a step's start (fold the previous steps', set the policy's
        normalisation buffers)."""
        self.task.sync_stats(model, step)
        for added in states:
            if added is not None:
                self.task.stats.replay(added["obs"])
                self.task.env_steps += int(added["env_steps"])
