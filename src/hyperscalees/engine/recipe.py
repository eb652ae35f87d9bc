"""The engine's recipe: a run's config turned into what every worker builds, ``(es, fitness)``.

It is only data (the config as a dict), so it pickles to any worker; calling it builds the
task, its model and the ES facade exactly as the driver did (same seeds, same init). The
fitness object is the task's (``AbstractTask.make_fitness``).

The driver needs the task itself too (held-out evaluation, its state in checkpoints), and it
must be the very task the driver's fitness scores with. :meth:`TaskRecipe.for_driver` builds
both once and hands the task to the training loop explicitly; the backend's first call of the
recipe then returns that same ``(es, fitness)``, and every worker, which receives the recipe
pickled, builds its own from the config.
"""
from __future__ import annotations

from dataclasses import asdict

import torch

from ..mup import apply_mup
from ..nn.module_es import facade_for
from ..tasks import AbstractTask, get_task
from .config import TrainConfig, check_device


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


class TaskRecipe:
    """``recipe() -> (es, fitness)`` of the run whose config (``TrainConfig.to_dict()``) is ``config``."""

    def __init__(self, config: dict):
        self.config = config
        self._built = None  # (es, fitness) already built in this process: the next call's, never pickled

    @classmethod
    def for_driver(cls, cfg: TrainConfig) -> tuple["TaskRecipe", AbstractTask]:
        """The recipe of ``cfg`` and the driver's task: the recipe's first call in this process returns
        the ES facade and fitness built beside that task, so what the engine evaluates and saves is
        what the backend's fitness scores with."""
        task, _, es = build(cfg)
        recipe = cls(cfg.to_dict())
        recipe._built = (es, task.make_fitness())
        return recipe, task

    def __call__(self):
        if self._built is not None:
            built, self._built = self._built, None
            return built
        task, _, es = build(TrainConfig.from_dict(self.config))
        return es, task.make_fitness()

    def __getstate__(self) -> dict:
        return {"config": self.config, "_built": None}  # a worker builds its own

    def __repr__(self) -> str:
        return f"TaskRecipe(task={self.config.get('task')!r})"
