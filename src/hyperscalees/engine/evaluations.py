"""A run's held-out evaluations, cut short by a stop: the last complete one and what a stop cut.

A validation pass can take far longer than a step (``lm``: tens of seconds for 32k tokens on a
CPU). Waiting for it after Ctrl-C, SIGTERM or the end of ``--time-budget`` would stop the run
a pass late, so every evaluation runs with the task's ``stop_check`` set: tasks poll it
between windows, env steps or generate chunks (``AbstractTask.check_stop``) and one cut short
raises before it changes anything the task keeps. The run then reports the last *complete* evaluation and says
from which step it is; its checkpoint is the step's state, untouched, and resumes exactly.

What may stop which evaluation:

- validation passes (:meth:`Evaluations.run`): a signal, or the time budget's deadline. The loop
  ends a budgeted run early enough for the validation that closes it to fit (:meth:`reserve`),
  so the deadline cuts one only when a pass runs longer than the earlier ones (or is the first);
- the end-of-run score (:meth:`Evaluations.final`, ``lm``'s whole test split, once per run, the
  figure to report): a signal only. It runs after the budget, like the run's summary; a
  signalled run skips it.
"""
from __future__ import annotations

import time
from typing import Callable

from torch import nn

from ..tasks import AbstractTask, EvaluationStopped

BUDGET = "the time budget"


class Evaluations:
    """Evaluate ``model`` on ``task`` for the training loop (see the module docstring).

    ``signalled()``: the name of the signal that asked the run to stop, or None; ``deadline``:
    the ``time.perf_counter()`` reading the time budget ends at (None: no budget).
    """

    def __init__(self, task: AbstractTask, model: nn.Module, signalled: Callable[[], str | None],
                 deadline: float | None = None):
        self.task, self.model, self.signalled, self.deadline = task, model, signalled, deadline
        self.metrics: dict = {}               # of the last complete validation ...
        self.step: int | None = None          # ... at this step
        self.seconds = 0.0                    # the longest complete pass so far
        self.cut: tuple[int, str] | None = None     # (step, stopped by) of the pass a stop cut short
        self.final_skipped: str | None = None       # what stopped the end-of-run score, if anything

    def past_deadline(self) -> bool:
        return self.deadline is not None and time.perf_counter() > self.deadline

    def stop_reason(self) -> str | None:
        """What asks evaluations to stop now: a signal's name, :data:`BUDGET`, or None."""
        return self.signalled() or (BUDGET if self.past_deadline() else None)

    def run(self, step: int) -> bool:
        """Validate at ``step``; False when a stop cut the pass short (the last complete one stays).

        Started even when a stop is already due: a task that polls stops at its first window (at no
        cost), one whose evaluation is too short to poll (xor) still reports the step it stopped at.
        """
        t = time.perf_counter()
        try:
            metrics = self._polled(self.task.evaluate, lambda: self.stop_reason() is not None)
        except EvaluationStopped:
            self.cut = (step, self.stop_reason() or BUDGET)
            return False
        self.metrics, self.step = metrics, step
        self.seconds = max(self.seconds, time.perf_counter() - t)
        return True

    def reserve(self) -> float:
        """Seconds the time budget keeps for one validation pass: the longest so far, with a quarter to
        spare (passes vary: lm prints a sample every few). 0 before the first one."""
        return 1.25 * self.seconds

    def final(self) -> dict:
        """The end-of-run metrics (``task.final_evaluate``), or {} when a signal stops or skipped them."""
        if not _has_final(self.task):
            return {}
        if self.signalled():
            self.final_skipped = self.signalled()
            return {}
        try:
            return self._polled(self.task.final_evaluate, lambda: self.signalled() is not None)
        except EvaluationStopped:
            self.final_skipped = self.signalled()
            return {}

    def _polled(self, evaluate, check: Callable[[], bool]) -> dict:
        self.task.stop_check = check
        try:
            return evaluate(self.model)
        finally:
            self.task.stop_check = None

    def notes(self, step: int) -> list[str]:
        """One line each on metrics a stop left stale or missing (none when the run evaluated its last step)."""
        notes = []
        if self.step != step:
            why = (f"{self.cut[1]} cut short the evaluation of step {self.cut[0]}" if self.cut
                   else f"the run stopped before evaluating step {step}")
            got = (f"the metrics are those of step {self.step}, the last complete evaluation"
                   if self.step is not None else "no evaluation completed, so there are no metrics "
                                                 "(`hyperscalees eval DIR` scores a saved run)")
            notes.append(f"{why}: {got}")
        if self.final_skipped:
            notes.append(f"{self.final_skipped}: the end-of-run evaluation (the test split) was skipped")
        return notes


def _has_final(task: AbstractTask) -> bool:
    """Does the task score anything at the end of a run (``final_evaluate`` overridden)?"""
    return type(task).final_evaluate is not AbstractTask.final_evaluate
