"""The backprop reference: train a task's float model with Adam under the same budget and metrics.

ES results mean little without the gradient-trained model of the same size beside them
(nano-egg's fp32 baseline, ``hyperscalees.md`` §5.6). ``run_backprop`` drives the same task,
data, evaluations, metrics files and checkpoint layout as the ES loop, so the two curves
(``metrics.jsonl``: ``time`` and the task's metric per evaluation) are directly comparable
and ``hyperscalees eval``/``generate`` read its checkpoints. A task opts in by defining
``loss(model, step) -> scalar tensor`` (differentiable, on step ``step``'s data); integer
models cannot be trained this way and are refused. No resume: a backprop reference run is
short and simply rerun.
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from ..tasks import get_task
from .checkpoint import META_FILE, save_checkpoint
from .config import TrainConfig, check_device
from .metrics import MetricsLogger, plot_curve


class _AdamState:
    """What ``save_checkpoint`` asks of an ES facade: a step and a state dict."""

    def __init__(self, model, optimizer, step: int):
        self.model, self.optimizer, self.step = model, optimizer, step

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "strategy": {"adam": self.optimizer.state_dict()}}


def run_backprop(cfg: TrainConfig, lr: float) -> dict:
    """Adam on ``task.loss`` for ``cfg.engine.steps`` steps or ``time_budget`` seconds; an ES-like summary."""
    t0, eng = time.perf_counter(), cfg.engine
    if eng.resume:
        raise ValueError("a backprop run cannot be resumed; start it again with --out DIR --overwrite")
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a finite number > 0, got {lr!r}")
    device = check_device(eng.resolved_device)
    task = get_task(cfg.task)(seed=cfg.es.seed, device=device, options=cfg.options)
    if not hasattr(task, "loss"):
        raise ValueError(f"task {cfg.task!r} has no differentiable loss: --trainer backprop needs one")
    model = task.build_model()
    if any(not p.is_floating_point() for p in model.parameters()):
        raise ValueError("this model has integer weights: backprop cannot train it (use --trainer es)")
    out = Path(eng.out) if eng.out else None
    if out and (out / META_FILE).exists() and not eng.overwrite:
        raise ValueError(f"{str(out)!r} already holds a run; replace it with --overwrite")
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    logger = MetricsLogger(out, task.metric_names(), 0) if out else None
    metrics, step, stopped = {}, 0, "steps"
    with tqdm(total=eng.steps, desc=f"{cfg.task} (backprop)", disable=eng.json or not sys.stderr.isatty()) as bar:
        while step < eng.steps:
            ts = time.perf_counter()
            loss = task.loss(model, step)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            step_time = time.perf_counter() - ts
            out_of_time = eng.time_budget is not None and time.perf_counter() - t0 + step_time > eng.time_budget
            row = {"step": step, "loss": float(loss.detach()), "time": round(time.perf_counter() - t0, 4)}
            if not math.isfinite(row["loss"]):
                raise RuntimeError(f"the loss became non-finite at step {step}; try a smaller --lr")
            if step % eng.eval_every == 0 or step >= eng.steps or out_of_time:
                with torch.no_grad():
                    metrics = task.evaluate(model)
                row.update(metrics)
            if logger:
                logger.log(row)
            bar.update(1)
            bar.set_postfix(loss=f"{row['loss']:.4g}", **{task.metric: f"{metrics.get(task.metric, math.nan):.4g}"})
            if out_of_time and step < eng.steps:
                stopped = "time_budget"
                break
    if not metrics:
        with torch.no_grad():
            metrics = task.evaluate(model)
    notes, paths = [], {}
    if out:
        files = save_checkpoint(out, _AdamState(model, opt, step), cfg.to_dict(), extra={"metrics": metrics,
                                "trainer": "backprop"}, task_state=task.state_dict())
        plot, why = plot_curve(out, task.metric)
        notes += [why] if why else []
        paths = {"out": str(out), "checkpoint": str(files["pointer"]), "model": str(files["model"]),
                 "plot": str(plot) if plot else None}
    return {"task": cfg.task, "strategy": "backprop", "trainer": "backprop", "steps": step,
            "target_steps": eng.steps, "stopped": stopped, "metric": task.metric, "metrics": metrics,
            "solved": task.solved(metrics), "device": str(device), "wall_time": round(time.perf_counter() - t0, 3),
            "paths": paths, "notes": notes, "signal": None}
