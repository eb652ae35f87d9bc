"""The training loop: ask → evaluate (a backend) → shape → update, plus metrics and checkpoints.

Nothing here does ES maths or evaluates members; it wires a task, the module-level ES
facade, a backend and the files of a run directory. Per-step data comes from (seed, step),
noise from the strategy's seeds and anything else the task accumulates from its
``state_dict``, so a run resumed from a checkpoint continues bit for bit like an
uninterrupted one.

A run has three parts: :func:`_start` claims the run directory, builds the task and the
backend from the run's recipe (the task handed over explicitly, ``recipe.py``) and resumes;
:func:`_step` takes one step with its checks, evaluation, log row and checkpoint; :func:`_finish`
saves the last checkpoint and writes the summary.

A run loses nothing it has committed: checkpoints are committed by one rename
(checkpoint.py), SIGINT/SIGTERM end the run after the current step with a checkpoint
(interrupt.py), and weights that turn non-finite stop the run before they can be saved (guards.py).
"""
from __future__ import annotations

import contextlib
import math
import sys
import time
from dataclasses import dataclass
from functools import partial
from typing import Callable
from pathlib import Path

import torch
from tqdm import tqdm

from ..nn.select import evolved_numbers
from ..distributed import AbstractBackend, LocalBackend
from ..tasks import AbstractTask
from .checkpoint import checkpoint_step, has_checkpoint, load_checkpoint_config, remove_orphans, save_checkpoint
from .config import TrainConfig
from .evaluations import Evaluations
from .files import check_directory, exclusive
from .guards import check_finite, check_population
from .interrupt import StopRequest, signal_name
from .metrics import CSV_FILE, JSONL_FILE, SAMPLES_FILE, MetricsLogger, plot_curve
from .recipe import TaskRecipe
from .relocate import check_resumed_data
from .restarts import StallRestarts, restart
from .resume import parse_config, resume
from .snapshots import Snapshots, check_snapshots
from .tensorboard import TensorBoardSink
from .run_dir import Replacement, holds_anything, refuse_nonempty, remove_empty_failed

def run(cfg: TrainConfig, backend: Callable | None = None, on_start: Callable[[list[str]], None] | None = None) -> dict:
    """Train ``cfg.engine.steps`` steps in total (or until the time budget or a signal); return a summary.

    ``backend``: ``recipe -> backend`` (a backend class, or ``distributed.backend_factory``'s
    result; default: ``LocalBackend``). It is handed this run's recipe (``recipe.py``), turns
    each step's population into fitness, applies the update wherever replicas live, and is
    closed when the run ends; its ``report()`` lands in ``summary["backend"]``.
    ``summary["signal"]`` names the SIGINT/SIGTERM that ended the run early (None otherwise);
    the run was still checkpointed if it has a run directory. ``on_start(notes)`` is called once the
    run is built and about to take its first step (the CLI prints its notes then, not before an
    error that would make them moot).
    """
    t0, eng = time.perf_counter(), cfg.engine
    if eng.resume and not Path(eng.resume).exists():  # never create the directory a resume reads
        raise FileNotFoundError(f"no checkpoint in {eng.resume!r}: the directory does not exist (--resume)")
    if eng.resume and has_checkpoint(eng.resume):  # before the task reads a path that may be stale
        recorded = load_checkpoint_config(eng.resume)
        check_resumed_data(eng.resume, cfg, parse_config(recorded, eng.resume), recorded.get("options", {}))
    out = Path(eng.out or eng.resume) if (eng.out or eng.resume) else None
    existed = out is not None and out.exists()
    try:
        return _run(cfg, backend, out, t0, on_start)
    except BaseException:
        if out is not None and not existed:
            remove_empty_failed(out)  # a failed start leaves no directory holding only its lock
        raise


@dataclass
class _Run:
    """What a run holds from its start through its steps to its finish."""
    cfg: TrainConfig
    task: AbstractTask
    backend: AbstractBackend
    out: Path | None                  # the directory written now (an --overwrite run's staging one at first)
    replacing: Replacement | None     # --overwrite of an existing run: written beside until it commits
    restarts: StallRestarts | None
    logger: MetricsLogger | None
    board: TensorBoardSink | None
    stop: StopRequest
    evals: Evaluations
    deadline: float | None
    t0: float
    saved_at: float  # the last save (or the start): a long run loses at most checkpoint_minutes to a kill
    snapshots: Snapshots | None = None  # --snapshot-minutes: the exported model every few minutes

    @property
    def es(self):
        return self.backend.es


def _run(cfg: TrainConfig, backend, out: Path | None, t0: float, on_start=None) -> dict:
    eng = cfg.engine
    with contextlib.ExitStack() as stack:
        r = _start(cfg, backend, out, t0, on_start, stack)
        stopped = "steps"
        with torch.no_grad(), tqdm(total=eng.steps, initial=r.es.step, desc=cfg.task,
                                   disable=eng.json or not sys.stderr.isatty()) as bar:
            before = _evaluate_start(r) if eng.eval_at_start and r.es.step == 0 and not eng.resume else None
            while r.es.step < eng.steps and not r.stop.requested:
                if _step(r, bar):
                    stopped = "time_budget"
                    break
            metrics = _closing_metrics(r)
        return _finish(r, metrics, stopped, before)


def _start(cfg: TrainConfig, backend, out: Path | None, t0: float, on_start, stack: contextlib.ExitStack) -> _Run:
    """Claim the run directory, build the task and the backend, resume, and start the backend's workers."""
    eng = cfg.engine
    replacing = _claim(out, cfg, stack)
    out = replacing.staging if replacing else out
    recipe, task = TaskRecipe.for_driver(cfg)
    check_snapshots(task, eng.snapshot_minutes, out)
    backend = (backend or LocalBackend)(recipe, chunk=eng.chunk)
    stack.callback(backend.close)
    es = backend.es
    restarts = StallRestarts(eng.restart_patience, eng.restart_min_delta, task.goal) \
        if eng.restart_patience else None
    if eng.resume:
        meta = resume(es, task, cfg)  # before the first step: workers start from the resumed state
        if restarts is not None:
            restarts.load_state_dict(meta.get("restarts") or {})
    if out:
        remove_orphans(out)  # the files of a save a kill interrupted
    logger = MetricsLogger(out, task.metric_names(), es.step) if out else None
    board = stack.enter_context(TensorBoardSink(eng.tensorboard)) if eng.tensorboard else None
    if on_start is not None:
        on_start(rank_notes(es))
    stop = stack.enter_context(StopRequest(notify=partial(_say_stopping, saving=out is not None)))
    # Ray's start-up waits seconds inside C, where the request cannot be polled: a signal ends the run at once
    if es.step < eng.steps:
        with stop.at_once(f"while starting the {backend.name} backend"):
            backend.start()
    deadline = None if eng.time_budget is None else t0 + eng.time_budget
    evals = Evaluations(task, es.model, lambda: signal_name(stop.signum) if stop.requested else None, deadline)
    return _Run(cfg, task, backend, out, replacing, restarts, logger, board, stop, evals, deadline, t0,
                saved_at=time.perf_counter(),
                snapshots=Snapshots(60.0 * eng.snapshot_minutes) if eng.snapshot_minutes else None)


def _claim(out: Path | None, cfg: TrainConfig, stack: contextlib.ExitStack) -> Replacement | None:
    """Hold ``out`` as its one writer and check what it holds may be written; the replacement being
    written beside it when an ``--overwrite`` replaces an existing run."""
    eng = cfg.engine
    if not out:
        return None
    flag = "--out" if eng.out else "--resume"
    stack.enter_context(exclusive(check_directory(out, flag)))  # one writer per run directory
    _refuse_existing_run(out, cfg)
    if eng.overwrite and not _resuming_in_place(out, cfg) and holds_anything(out):
        return stack.enter_context(Replacement(out))
    return None


def _step(r: _Run, bar: tqdm) -> bool:
    """One ES step with its checks, its evaluation when due, its metrics row and a checkpoint when due;
    True when the time budget ends the run here, before its last step."""
    eng, es, task, evals = r.cfg.engine, r.es, r.task, r.evals
    ts = time.perf_counter()
    restarted = r.restarts is not None and r.restarts.due
    if restarted:  # the last evaluation stalled (engine/restarts.py)
        restart(es, task, r.backend, r.restarts.count + 1)
        r.restarts.restarted(es.step)
    stats = dict(r.backend.step())  # read: one sync
    check_finite(es.model, es.step, r.out)
    check_population(stats, r.backend.last_fitness.numel(), es.step, r.out)
    step_time = time.perf_counter() - ts
    due = es.step % eng.eval_every == 0
    out_of_time = _out_of_time(r.deadline, step_time, evals.reserve(), due)
    last = es.step >= eng.steps or out_of_time or r.stop.requested
    row = {**stats, "time": round(time.perf_counter() - r.t0, 4)}
    if restarted:
        row["restarts"] = r.restarts.count  # this step began from a new draw
    if (due or last) and evals.run(es.step):
        row.update(evals.metrics)
        _show_samples(task, r.logger, es.step)
        if r.restarts is not None:
            _observe(r.restarts, task, evals.metrics, es.step)
    out_of_time = out_of_time or evals.past_deadline()  # a validation ran into the deadline
    _log(row, r.logger, r.board)
    bar.update(1)
    bar.set_postfix(fitness=f"{stats['fitness_mean']:.4g}",
                    **{task.metric: f"{evals.metrics.get(task.metric, float('nan')):.4g}"}, **task.progress(step_time))
    if r.snapshots is not None and r.snapshots.due(time.perf_counter() - r.t0):
        r.snapshots.write(task, es.model, r.out, es.step, time.perf_counter() - r.t0)
    if r.out and not (last or out_of_time) and _checkpoint_due(eng, es.step, r.saved_at):
        save_checkpoint(r.out, es, r.cfg.to_dict(), task_state=task.state_dict(), extra=_extra(r.restarts))
        r.out, r.saved_at = _swap_in(r.replacing, r.logger, r.out), time.perf_counter()
    return out_of_time and es.step < eng.steps


def _closing_metrics(r: _Run) -> dict:
    """The last step's held-out metrics, and the test split's, scored once per run."""
    evals, step = r.evals, r.es.step
    if evals.step != step and evals.cut is None:  # nothing ran (a resume at its last step), or
        if evals.run(step):                         # a signal came between two steps
            _show_samples(r.task, r.logger, step)
    return {**evals.metrics, **evals.final()}


def _finish(r: _Run, metrics: dict, stopped: str, before: dict | None) -> dict:
    """The last checkpoint and the run's summary (what ended it, its metrics, its files, its notes)."""
    es, stop = r.es, r.stop
    if stop.requested and es.step < r.cfg.engine.steps:
        stopped = signal_name(stop.signum)
    summary = _summary(r.cfg, r.task, es, r.out, metrics, stopped, r.t0,
                       commit=partial(_swap_in, r.replacing, r.logger), extra=_extra(r.restarts))
    if r.restarts is not None:
        summary["restarts"] = r.restarts.count
    summary["before"] = before
    summary["metrics_step"] = r.evals.step
    summary["signal"] = signal_name(stop.signum) if stop.requested else None
    summary["notes"] += r.evals.notes(es.step) + (r.replacing.notes if r.replacing else [])
    report = r.backend.report()
    if report:
        summary["backend"] = report
    return summary


def rank_notes(es) -> list[str]:
    """A remark when ``rank`` exceeds min(out, in) of every low-rank parameter: their perturbations
    cannot have more than that rank, so the extra factors cost time and add no direction."""
    strategy, rank = es.strategy, es.config.rank
    mats = {n: min(strategy.params[n].shape) for n in strategy.lowrank if strategy.params[n].dim() == 2}
    if not mats or rank <= max(mats.values()):
        return []
    return [f"--rank {rank} is above min(out, in) of every matrix this model perturbs (at most "
            f"{max(mats.values())}): the perturbations have that rank at most, the extra factors only cost time"]


def _say_stopping(signum: int, saving: bool) -> None:
    then = "and saving a checkpoint" if saving else "(nothing will be saved: no --out)"
    print(f"\n{signal_name(signum)}: finishing this step (an evaluation under way is cut short) {then}; "
          "send it again to stop at once", file=sys.stderr, flush=True)


def _out_of_time(deadline: float | None, step_time: float, validation: float, due: bool) -> bool:
    """Should the run end at this step? Going on means this step's validation (when ``due``), the next
    step and the validation that closes the run after it, each as long as the last: all before the
    deadline, or the run ends now, its closing validation in the time that is left."""
    if deadline is None:
        return False
    return time.perf_counter() + validation * due + step_time + validation > deadline


def _checkpoint_due(eng, step: int, saved_at: float) -> bool:
    """Every ``checkpoint_every`` steps, and whenever ``checkpoint_minutes`` passed since the last save."""
    if eng.checkpoint_every and step % eng.checkpoint_every == 0:
        return True
    return bool(eng.checkpoint_minutes) and time.perf_counter() - saved_at >= 60.0 * eng.checkpoint_minutes


def _swap_in(replacing: Replacement | None, logger: MetricsLogger | None, out: Path) -> Path:
    """After a commit: an ``--overwrite`` run written beside its target takes its place now."""
    if replacing is None or replacing.committed:
        return out
    final = replacing.commit()
    if logger:
        logger.moved_to(final)
    return final


def _resuming_in_place(out: Path, cfg: TrainConfig) -> bool:
    return bool(cfg.engine.resume) and Path(cfg.engine.resume).resolve() == out.resolve()


def _refuse_existing_run(out: Path, cfg: TrainConfig) -> None:
    """A run in ``out`` is replaced only when asked to (``--overwrite``) or continued (``--resume``);
    a directory of other files is never written into unless ``--overwrite`` says replace it."""
    eng = cfg.engine
    if eng.overwrite or _resuming_in_place(out, cfg):
        return
    if has_checkpoint(out) or (out / JSONL_FILE).exists():
        step = checkpoint_step(out)
        what = f"a run (checkpoint at step {step})" if step is not None else "a run's files"
        raise ValueError(f"{str(out)!r} already holds {what}; continue it with --resume {out} "
                         "or replace it with --overwrite")
    refuse_nonempty(out)


def _evaluate_start(r: _Run) -> dict | None:
    """The run's starting point (``eval_at_start``): held-out metrics before the first step, logged as
    step 0 like any evaluation (samples included); None when a stop cut it short."""
    if not r.evals.run(0):
        return None
    row = {"step": 0, "time": round(time.perf_counter() - r.t0, 4), **r.evals.metrics}
    _show_samples(r.task, r.logger, 0)
    _log(row, r.logger, r.board)
    return dict(r.evals.metrics)


def _log(row: dict, logger: MetricsLogger | None, board: TensorBoardSink | None) -> None:
    """One metrics row to the run directory's files and to TensorBoard, where each is on."""
    if logger:
        logger.log(row)
    if board:
        board.log(row)


def _show_samples(task: AbstractTask, logger: MetricsLogger | None, step: int) -> None:
    """The evaluation's examples (if the task has any) to ``samples.jsonl``, and the first to the log."""
    samples = task.samples()
    if not samples:
        return
    if logger:
        logger.log_samples(step, samples)
    shown = "  ".join(f"{k}={_clip(v)}" for k, v in samples[0].items())
    tqdm.write(f"sample at step {step}: {shown}", file=sys.stderr)


def _clip(value, width: int = 160) -> str:
    text = repr(value)
    half = width // 2
    return text if len(text) <= width else text[:half] + " ... " + text[-half:]


def _observe(restarts: StallRestarts, task: AbstractTask, metrics: dict, step: int) -> None:
    """Feed an evaluation to the stall rule (engine/restarts.py); a solved task never restarts."""
    if task.solved(metrics):
        restarts.due = False
    else:
        restarts.observe(step, float(metrics.get(task.metric, math.nan)))


def _extra(restarts: StallRestarts | None) -> dict:
    """What the checkpoint pointer keeps of the engine's own state (for an exact resume)."""
    return {"restarts": restarts.state_dict()} if restarts is not None else {}


def _summary(cfg, task: AbstractTask, es, out: Path | None, metrics: dict, stopped: str, t0: float,
             commit=lambda out: out, extra: dict | None = None) -> dict:
    notes, paths = [], {}
    if out:
        files = save_checkpoint(out, es, cfg.to_dict(), extra={"metrics": metrics, **(extra or {})},
                                task_state=task.state_dict())
        new = commit(out)
        files = {k: new / Path(v).name for k, v in files.items()}
        out = new
        plot, why = plot_curve(out, task.metric)
        if why:
            notes.append(why)
        paths = {"out": str(out), "checkpoint": str(files["pointer"]), "model": str(files["model"]),
                 "metrics_jsonl": str(out / JSONL_FILE), "metrics_csv": str(out / CSV_FILE),
                 "plot": str(plot) if plot else None}
        if (out / SAMPLES_FILE).exists():
            paths["samples"] = str(out / SAMPLES_FILE)
        paths.update(task.export(es.model, out))
    return {"task": cfg.task, "strategy": cfg.strategy, "steps": es.step, "target_steps": cfg.engine.steps,
            "stopped": stopped, "metric": task.metric, "metrics": metrics, "solved": task.solved(metrics),
            "device": str(cfg.engine.resolved_device), "wall_time": round(time.perf_counter() - t0, 3),
            "evolved_numbers": evolved_numbers(es), "paths": paths, "notes": notes}
