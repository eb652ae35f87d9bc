"""Restart a run whose held-out metric stalled: re-drawn weights, a fresh update rule.

ES can settle where every nearby member scores about the same: a Pendulum policy that swings
up from half of the starts and never from the others (the update's signal fades, σ stays, the
evaluation holds still for hundreds of steps; issue #20 measured 2 seeds in 10). Ties are one
such case (``ESConfig.tie_sigma_growth`` widens σ); a plateau with small but non-zero
differences is not a tie, and waiting does not end it. What does is what evolution strategies
have long done at a stall (IPOP-style restarts): begin again from another initial point.

The rule: a run restarts when its metric has not improved on the best since the last (re)start
by more than ``min_delta`` for ``patience`` steps, unless the task reports the metric solved.
The evaluation that finds the stall marks the restart due; it happens before the next step, so
the last step's weights are never thrown away and a run resumed from that step's checkpoint
restarts exactly as the uninterrupted one did. A restart re-draws the parameters from the task's initialisation
with the seed of draw ``k``, clears what the task learnt beside them (``restart_state``: RL's
observation statistics), then gives the strategy a fresh update rule with its σ/lr decay counted from that step
(:meth:`~hyperscalees.strategies.base.AbstractStrategy.restart`). The step counter goes on, so noise
is never reused. Everything here is part of the checkpoint: a resumed run restarts where the
uninterrupted one does.

Patience is counted in steps, not evaluations, so a task that repeats its last numbers between
fresh evaluations (``rl``'s ``--eval-every-env-steps``) waits the same wall of training.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass
class StallRestarts:
    """When to restart (:meth:`observe`), and the count so far; ``goal`` is "max" or "min"."""

    patience: int
    min_delta: float
    goal: str = "max"
    best: float | None = None    # best metric since the last (re)start
    best_step: int = 0           # the step that set it (or the restart's step)
    count: int = 0               # restarts so far
    due: bool = False            # the last evaluation stalled: restart before the next step

    def improves(self, value: float) -> bool:
        if self.best is None:
            return True
        return value > self.best + self.min_delta if self.goal == "max" else value < self.best - self.min_delta

    def observe(self, step: int, value: float) -> bool:
        """Record the metric evaluated at ``step``; True when the run should restart now."""
        if not math.isfinite(value):
            return False  # a diverged evaluation is the NaN guard's business, not a plateau
        if self.improves(value):
            self.best, self.best_step = float(value), step
        else:
            self.due = step - self.best_step >= self.patience
        return self.due

    def restarted(self, step: int) -> None:
        self.count += 1
        self.best, self.best_step, self.due = None, step, False

    def state_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k in ("best", "best_step", "count", "due")}

    def load_state_dict(self, state: dict) -> None:
        self.best = None if state.get("best") is None else float(state["best"])
        self.best_step, self.count = int(state.get("best_step", 0)), int(state.get("count", 0))
        self.due = bool(state.get("due", False))


def restart(es, task, backend, draw: int) -> None:
    """Re-draw ``es.model``'s parameters (draw ``draw`` of the task's init), restart the strategy and
    hand the new state to every replica the backend keeps."""
    task.redraw_parameters(es.model, draw)
    task.restart_state()
    es.strategy.restart()
    backend.reload()
