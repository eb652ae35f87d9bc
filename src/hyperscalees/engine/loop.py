"""The training loop: ask → evaluate (a backend) → shape → update, plus metrics and checkpoints.

Nothing here does ES maths or evaluates members; it wires a task, the module-level ES
facade, a backend and the files of a run directory. Per-step data comes from (seed, step),
noise from the strategy's seeds and anything else the task accumulates from its
``state_dict``, so a run resumed from a checkpoint continues bit for bit like an
uninterrupted one.

A run loses nothing it has committed: checkpoints are committed by one rename
(checkpoint.py), SIGINT/SIGTERM end the run after the current step with a checkpoint
(interrupt.py), and weights that turn non-finite stop the run before they can be saved.
"""
from __future__ import annotations

import contextlib
import math
import sys
import time
from dataclasses import asdict
from functools import partial
from typing import Callable
from pathlib import Path

import torch
from tqdm import tqdm

from ..distributed import LocalBackend
from ..mup import apply_mup
from ..nn.module_es import facade_for
from ..tasks import AbstractTask, get_task
from .checkpoint import (META_FILE, checkpoint_step, has_checkpoint, load_checkpoint, load_checkpoint_config,
                         remove_orphans, save_checkpoint)
from .config import TrainConfig, check_device
from .evaluations import Evaluations
from .files import BadFileError, check_directory, exclusive
from .interrupt import StopRequest, signal_name
from .metrics import CSV_FILE, JSONL_FILE, SAMPLES_FILE, MetricsLogger, plot_curve
from .recipe import TaskRecipe
from .relocate import check_data_present, check_resumed_data, relocated, same_run_options
from .restarts import StallRestarts, restart
from .tensorboard import TensorBoardSink
from .run_dir import Replacement, holds_anything, refuse_nonempty, remove_empty_failed

# what a strategy's or a model's load_state_dict raises on a state of another shape
_STATE_ERRORS = (KeyError, ValueError, TypeError, IndexError, RuntimeError, AttributeError)


class DivergedError(RuntimeError):
    """The weights became NaN or infinite; nothing of them was saved."""


def build(cfg: TrainConfig, device: torch.device | None = None):
    """The task, its freshly initialised model and the ES facade for ``cfg``."""
    device = check_device(device or cfg.engine.resolved_device)
    task = get_task(cfg.task)(seed=cfg.es.seed, device=device, options=cfg.options)
    model = task.build_model()
    options = task.es_options(model)
    if cfg.mup_base is not None:  # muP anchored at the task's model at that width (mup/apply.py)
        options["groups"] = apply_mup(model, task.model_at_width(cfg.mup_base), cfg.es.lr, cfg.es.optimizer,
                                      groups=options.get("groups"), es_map=options.get("es_map"))
    es = facade_for(cfg.strategy)(model, **asdict(cfg.es), **options)
    return task, model, es


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
        check_resumed_data(eng.resume, cfg, _parse_config(recorded, eng.resume), recorded.get("options", {}))
    out = Path(eng.out or eng.resume) if (eng.out or eng.resume) else None
    existed = out is not None and out.exists()
    try:
        return _run(cfg, backend, out, t0, on_start)
    except BaseException:
        if out is not None and not existed:
            remove_empty_failed(out)  # a failed start leaves no directory holding only its lock
        raise


def _run(cfg: TrainConfig, backend, out: Path | None, t0: float, on_start=None) -> dict:
    eng = cfg.engine
    replacing = None  # --overwrite of an existing run: the new one is written beside until it commits
    with contextlib.ExitStack() as stack:
        if out:
            flag = "--out" if eng.out else "--resume"
            stack.enter_context(exclusive(check_directory(out, flag)))  # one writer per run directory
            _refuse_existing_run(out, cfg)
            if eng.overwrite and not _resuming_in_place(out, cfg) and holds_anything(out):
                replacing = stack.enter_context(Replacement(out))
        out = replacing.staging if replacing else out
        backend = (backend or LocalBackend)(TaskRecipe(cfg.to_dict()), chunk=eng.chunk)
        stack.callback(backend.close)
        es, task = backend.es, backend.fitness.task
        model = es.model
        restarts = StallRestarts(eng.restart_patience, eng.restart_min_delta, task.goal) \
            if eng.restart_patience else None
        if eng.resume:
            meta = _resume(es, task, cfg)  # before the first step: workers start from the resumed state
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
        if hasattr(backend, "start") and es.step < eng.steps:
            with stop.at_once(f"while starting the {getattr(backend, 'name', 'distributed')} backend"):
                backend.start()
        deadline = None if eng.time_budget is None else t0 + eng.time_budget
        evals = Evaluations(task, model, lambda: signal_name(stop.signum) if stop.requested else None, deadline)
        stopped = "steps"
        saved_at = time.perf_counter()  # a long run loses at most checkpoint_minutes to a kill
        with torch.no_grad(), tqdm(total=eng.steps, initial=es.step, desc=cfg.task,
                                   disable=eng.json or not sys.stderr.isatty()) as bar:
            before = _evaluate_start(evals, task, logger, board, t0) \
                if eng.eval_at_start and es.step == 0 and not eng.resume else None
            while es.step < eng.steps and not stop.requested:
                ts = time.perf_counter()
                restarted = restarts is not None and restarts.due
                if restarted:  # the last evaluation stalled (engine/restarts.py)
                    restart(es, task, backend, restarts.count + 1)
                    restarts.restarted(es.step)
                stats = dict(backend.step())  # read: one sync
                _check_finite(model, es.step, out)
                _check_population(stats, backend.last_fitness.numel(), es.step, out)
                step_time = time.perf_counter() - ts
                due = es.step % eng.eval_every == 0
                out_of_time = _out_of_time(deadline, step_time, evals.reserve(), due)
                last = es.step >= eng.steps or out_of_time or stop.requested
                row = {**stats, "time": round(time.perf_counter() - t0, 4)}
                if restarted:
                    row["restarts"] = restarts.count  # this step began from a new draw
                if (due or last) and evals.run(es.step):
                    row.update(evals.metrics)
                    _show_samples(task, logger, es.step)
                    if restarts is not None:
                        _observe(restarts, task, evals.metrics, es.step)
                out_of_time = out_of_time or evals.past_deadline()  # a validation ran into the deadline
                _log(row, logger, board)
                bar.update(1)
                bar.set_postfix(fitness=f"{stats['fitness_mean']:.4g}",
                                **{task.metric: f"{evals.metrics.get(task.metric, float('nan')):.4g}"},
                                **task.progress(step_time))
                if out and not (last or out_of_time) and _checkpoint_due(eng, es.step, saved_at):
                    save_checkpoint(out, es, cfg.to_dict(), task_state=task.state_dict(), extra=_extra(restarts))
                    out, saved_at = _swap_in(replacing, logger, out), time.perf_counter()
                if out_of_time and es.step < eng.steps:
                    stopped = "time_budget"
                    break
            if evals.step != es.step and evals.cut is None:  # nothing ran (a resume at its last step), or
                if evals.run(es.step):                         # a signal came between two steps
                    _show_samples(task, logger, es.step)
            metrics = {**evals.metrics, **evals.final()}  # once per run: the test split
        if stop.requested and es.step < eng.steps:
            stopped = signal_name(stop.signum)
        summary = _finish(cfg, task, es, out, metrics, stopped, t0, commit=partial(_swap_in, replacing, logger),
                          extra=_extra(restarts))
        if restarts is not None:
            summary["restarts"] = restarts.count
        summary["before"] = before
        summary["metrics_step"] = evals.step
        summary["signal"] = signal_name(stop.signum) if stop.requested else None
        summary["notes"] += evals.notes(es.step) + (replacing.notes if replacing else [])
        if backend.report():
            summary["backend"] = backend.report()
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


def _check_finite(model: torch.nn.Module, step: int, out: Path | None) -> None:
    """Stop before non-finite weights reach a checkpoint.

    One pass and one device sync per step: a tensor's sum is finite unless an element is
    NaN or infinite (or finite weights so large that their sum overflows, which the exact
    per-tensor check below then clears). ``isfinite().all()`` costs ~20x more on CPU.
    """
    params = [(n, p) for n, p in model.named_parameters() if p.is_floating_point()]
    if not params or bool(torch.isfinite(torch.stack([p.sum(dtype=torch.float32) for _, p in params])).all()):
        return
    bad = [n for n, p in params if not bool(torch.isfinite(p).all())]
    if not bad:
        return
    raise DivergedError(f"the weights became non-finite at step {step} ({', '.join(bad[:3])}"
                        f"{', ...' if len(bad) > 3 else ''}); stopped without saving them, {_kept(out)}. "
                        "Try a smaller lr or sigma")


def _check_population(stats: dict, size: int, step: int, out: Path | None) -> None:
    """A step whose every fitness is NaN or infinite carries no signal: its update is zero and every
    later one too, so the run would "finish" on a diverged model. Stop instead."""
    if size and stats["nonfinite"] >= size:
        raise DivergedError(f"every fitness of step {step} is non-finite (NaN or infinite): the run diverged; "
                            f"stopped without saving it, {_kept(out)}. Try a smaller lr or sigma")


def _evaluate_start(evals: Evaluations, task: AbstractTask, logger: MetricsLogger | None,
                    board: TensorBoardSink | None, t0: float) -> dict | None:
    """The run's starting point (``eval_at_start``): held-out metrics before the first step, logged as
    step 0 like any evaluation (samples included); None when a stop cut it short."""
    if not evals.run(0):
        return None
    row = {"step": 0, "time": round(time.perf_counter() - t0, 4), **evals.metrics}
    _show_samples(task, logger, 0)
    _log(row, logger, board)
    return dict(evals.metrics)


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


def _kept(out: Path | None) -> str:
    saved = checkpoint_step(out) if out else None
    return (f"the checkpoint of step {saved} in {str(out)!r} is kept" if saved is not None
            else "no checkpoint had been written")


def _observe(restarts: StallRestarts, task: AbstractTask, metrics: dict, step: int) -> None:
    """Feed an evaluation to the stall rule (engine/restarts.py); a solved task never restarts."""
    if task.solved(metrics):
        restarts.due = False
    else:
        restarts.observe(step, float(metrics.get(task.metric, math.nan)))


def _extra(restarts: StallRestarts | None) -> dict:
    """What the checkpoint pointer keeps of the engine's own state (for an exact resume)."""
    return {"restarts": restarts.state_dict()} if restarts is not None else {}


def _finish(cfg, task: AbstractTask, es, out: Path | None, metrics: dict, stopped: str, t0: float,
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
            "paths": paths, "notes": notes}


def _resume(es, task: AbstractTask, cfg: TrainConfig) -> dict:
    """Load the checkpoint in ``cfg.engine.resume`` after checking it belongs to the same run."""
    directory = cfg.engine.resume
    try:
        ckpt = load_checkpoint(directory, cfg.engine.resolved_device)
    except FileNotFoundError as e:
        if (Path(directory) / JSONL_FILE).exists():  # killed before its first checkpoint
            raise FileNotFoundError(f"{e}; the run there stopped before its first checkpoint: start it again "
                                    f"with --out {directory} --overwrite") from None
        raise
    old, new = _parse_config(ckpt.config, directory).to_dict(), cfg.to_dict()
    diff = [k for k in ("task", "strategy") if old.get(k) != new[k]]
    if not same_run_options(new["task"], old.get("options", {}), new["options"]):  # the data may have moved
        diff.append("options")
    diff += [f"es.{k}" for k in new["es"] if old.get("es", {}).get(k) != new["es"][k]]
    if diff:
        detail = ", ".join(f"{k}: checkpoint {_get(old, k)!r} vs now {_get(new, k)!r}" for k in diff)
        raise ValueError(f"cannot resume {directory!r}: it is a different run ({detail})")
    if ckpt.step > cfg.engine.steps:
        raise ValueError(f"the checkpoint in {directory!r} is already at step {ckpt.step}, past --steps "
                         f"{cfg.engine.steps}; give --steps {ckpt.step} or more to continue it")
    try:
        es.load_state_dict({"model": ckpt.model, "strategy": ckpt.strategy})
    except _STATE_ERRORS as e:
        raise BadFileError(f"the checkpoint in {directory!r} does not fit this run's model or strategy: "
                           f"{_squash(e)}") from None
    _load_task_state(task, ckpt.task, directory)
    return ckpt.meta


def _load_task_state(task: AbstractTask, state: dict, directory) -> None:
    try:
        task.load_state_dict(state)
    except _STATE_ERRORS as e:
        raise BadFileError(f"the task state in {str(directory)!r} does not fit task {task.name!r}: "
                           f"{_squash(e)}") from None


def _squash(e: BaseException) -> str:
    """An error message on one line (torch's load_state_dict errors span several)."""
    return " ".join(str(e).split())[:300] or type(e).__name__


def _get(d: dict, dotted: str):
    for part in dotted.split("."):
        d = d.get(part) if isinstance(d, dict) else None
    return d


def saved_config(directory: str | Path) -> TrainConfig:
    """The ``TrainConfig`` a checkpoint was written with (cheap: reads only the pointer)."""
    return _parse_config(load_checkpoint_config(directory), directory)


def _parse_config(saved: dict, directory: str | Path) -> TrainConfig:
    try:
        return TrainConfig.from_dict(saved)
    except ValueError as e:
        raise BadFileError(f"{str(Path(directory) / META_FILE)!r} holds an unusable config: {e}") from None


def load_run(directory: str | Path, device: str | torch.device | None = None, data: dict[str, str] | None = None,
             data_free: bool = False):
    """(config, task, model, step) of the checkpoint in ``directory``, the model on ``device``.

    Reads the model and the task state only: evaluating needs no optimizer state. ``data``: new
    paths of the task's data options (``--data NEW`` after the data moved); ``data_free``: build
    the task from what the run saved, without reading its data, where the task can (lm: its
    vocabulary) -- enough to use the model (``generate``), not to evaluate it.
    """
    dev = check_device(device if device is not None else "cpu")  # first: a missing GPU is not a damaged file
    ckpt = load_checkpoint(directory, dev, strategy=False)
    cfg = _parse_config(ckpt.config, directory)
    if data:
        cfg = relocated(cfg, data)
    task = _task_of_run(cfg, dev, ckpt, directory, data_free)
    model = task.build_model()
    try:
        model.load_state_dict(ckpt.model)
    except _STATE_ERRORS as e:
        raise BadFileError(f"the model in {str(directory)!r} does not fit task {cfg.task!r}: {_squash(e)}") from None
    _load_task_state(task, ckpt.task, directory)
    return cfg, task, model, ckpt.step


def _task_of_run(cfg: TrainConfig, device: torch.device, ckpt, directory, data_free: bool) -> AbstractTask:
    """The run's task: from its saved state alone when ``data_free`` and the task can, else from its data
    (one clear line when the data the run recorded has moved)."""
    task_cls = get_task(cfg.task)
    if data_free:
        try:
            task = task_cls.without_data(cfg.es.seed, device, cfg.options, ckpt.task)
        except (KeyError, ValueError, TypeError, AttributeError) as e:
            raise BadFileError(f"the task state in {str(directory)!r} is damaged: {_squash(e)}") from None
        if task is not None:
            return task
    check_data_present(task_cls, cfg.options, directory, ckpt.config.get("options", {}))
    return task_cls(seed=cfg.es.seed, device=device, options=cfg.options)
