"""The training loop: ask → evaluate (a backend) → shape → update, plus metrics and checkpoints.

Nothing here does ES maths or evaluates members; it wires a task, the module-level ES
facade, a backend and the files of a run directory. Per-step data comes from (seed, step) and noise from the strategy's
seeds, so a run resumed from a checkpoint continues bit for bit like an uninterrupted one.
"""
from __future__ import annotations

import sys
import time
from dataclasses import asdict
from functools import partial
from pathlib import Path

import torch
from tqdm import tqdm

from ..nn import EGGROLL, OpenES
from ..strategies.shaping import fitness_stats
from ..tasks import AbstractTask, get_task
from .checkpoint import MODEL_FILE, load_checkpoint, save_checkpoint
from .config import TrainConfig, check_device
from .metrics import CSV_FILE, JSONL_FILE, MetricsLogger, plot_curve

MODULE_ES = {"eggroll": EGGROLL, "open_es": OpenES}


def build(cfg: TrainConfig, device: torch.device | None = None):
    """The task, its freshly initialised model and the ES facade for ``cfg``."""
    device = check_device(device or cfg.engine.resolved_device)
    task = get_task(cfg.task)(seed=cfg.es.seed, device=device, options=cfg.options)
    model = task.build_model()
    es = MODULE_ES[cfg.strategy](model, **asdict(cfg.es))
    return task, model, es


def run(cfg: TrainConfig, backend) -> dict:
    """Train ``cfg.engine.steps`` steps in total (or until the time budget); return a summary.

    ``backend`` turns each step's population into fitness (``hyperscalees.distributed``;
    the CLI builds it) and applies the update wherever replicas live.
    """
    t0, eng = time.perf_counter(), cfg.engine
    task, model, es = build(cfg)
    if eng.resume:
        _resume(es, cfg)
    out = Path(eng.out or eng.resume) if (eng.out or eng.resume) else None
    logger = MetricsLogger(out, task.metric_names(), es.step) if out else None
    metrics, stopped = {}, "steps"
    with torch.no_grad(), tqdm(total=eng.steps, initial=es.step, desc=cfg.task,
                               disable=eng.json or not sys.stderr.isatty()) as bar:
        while es.step < eng.steps:
            ts = time.perf_counter()
            fitness = backend.evaluate(es, partial(task.fitness, step=es.step), eng.chunk)
            stats = {**backend.update(es, es.shape(fitness)), **fitness_stats(fitness)}
            step_time = time.perf_counter() - ts
            out_of_time = eng.time_budget is not None and \
                time.perf_counter() - t0 + step_time > eng.time_budget
            last = es.step >= eng.steps or out_of_time
            row = {**stats, "time": round(time.perf_counter() - t0, 4)}
            if es.step % eng.eval_every == 0 or last:
                metrics = task.evaluate(model)
                row.update(metrics)
            if logger:
                logger.log(row)
            bar.update(1)
            bar.set_postfix(fitness=f"{stats['fitness_mean']:.4g}",
                            **{task.metric: f"{metrics.get(task.metric, float('nan')):.4g}"})
            if out and eng.checkpoint_every and es.step % eng.checkpoint_every == 0 and not last:
                save_checkpoint(out, es, cfg.to_dict())
            if out_of_time and es.step < eng.steps:
                stopped = "time_budget"
                break
        if not metrics:  # nothing ran (already at the target step): still report the model
            metrics = task.evaluate(model)
    return _finish(cfg, task, es, out, metrics, stopped, t0)


def _finish(cfg, task: AbstractTask, es, out: Path | None, metrics: dict, stopped: str, t0: float) -> dict:
    notes, paths = [], {}
    if out:
        save_checkpoint(out, es, cfg.to_dict(), extra={"metrics": metrics})
        plot, why = plot_curve(out, task.metric)
        if why:
            notes.append(why)
        paths = {"out": str(out), "checkpoint": str(out / MODEL_FILE), "metrics_jsonl": str(out / JSONL_FILE),
                 "metrics_csv": str(out / CSV_FILE), "plot": str(plot) if plot else None}
    return {"task": cfg.task, "strategy": cfg.strategy, "steps": es.step, "target_steps": cfg.engine.steps,
            "stopped": stopped, "metric": task.metric, "metrics": metrics, "solved": task.solved(metrics),
            "device": str(cfg.engine.resolved_device), "wall_time": round(time.perf_counter() - t0, 3),
            "paths": paths, "notes": notes}


def _resume(es, cfg: TrainConfig) -> None:
    """Load the checkpoint in ``cfg.engine.resume`` after checking it belongs to the same run."""
    ckpt = load_checkpoint(cfg.engine.resume, cfg.engine.resolved_device)
    old, new = ckpt.config, cfg.to_dict()
    diff = [k for k in ("task", "strategy", "options") if old.get(k) != new[k]]
    diff += [f"es.{k}" for k in new["es"] if old.get("es", {}).get(k) != new["es"][k]]
    if diff:
        detail = ", ".join(f"{k}: checkpoint {_get(old, k)!r} vs now {_get(new, k)!r}" for k in diff)
        raise ValueError(f"cannot resume {cfg.engine.resume!r}: it is a different run ({detail})")
    es.load_state_dict({"model": ckpt.model, "strategy": ckpt.strategy})


def _get(d: dict, dotted: str):
    for part in dotted.split("."):
        d = d.get(part) if isinstance(d, dict) else None
    return d


def load_run(directory: str | Path, device: str | torch.device | None = None):
    """(config, task, model, step) of the checkpoint in ``directory``, the model on ``device``."""
    ckpt = load_checkpoint(directory, device)
    cfg = TrainConfig.from_dict(ckpt.config)
    dev = check_device(device if device is not None else "cpu")
    task = get_task(cfg.task)(seed=cfg.es.seed, device=dev, options=cfg.options)
    model = task.build_model()
    model.load_state_dict(ckpt.model)
    return cfg, task, model, ckpt.step
