"""Shared helper: train a task with its own defaults until solved."""

import torch

import hyperscalees as hs
from hyperscalees.tasks import get_task


def train(name, seed, max_steps, check_every=5, **es_overrides):
    """Train with the task defaults; return (steps taken until solved or max_steps, metrics)."""
    task = get_task(name)(seed=seed)
    model = task.build_model()
    kw = {k: v for k, v in task.defaults.items() if k != "steps"}
    kw.update(es_overrides)
    es = hs.EGGROLL(model, seed=seed, **kw)
    metrics = task.evaluate(model)
    with torch.no_grad():
        while es.step < max_steps:
            es.tell(hs.evaluate(es, lambda m, lo, hi, step: task.fitness(m, lo, hi, step=step)))
            if es.step % check_every == 0:
                metrics = task.evaluate(model)
                if task.solved(metrics):
                    break
    return es.step, metrics


