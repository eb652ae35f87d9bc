"""The engine's recipe: a run's config turned into what every worker builds, ``(es, fitness)``.

It is only data (the config as a dict), so it pickles to any worker; calling it builds the
task, its model and the ES facade exactly as the driver did (same seeds, same init). The
fitness object is the task's (``AbstractTask.make_fitness``); ``fitness.task`` is the task.
"""
from __future__ import annotations

from .config import TrainConfig


class TaskRecipe:
    def __init__(self, config: dict):
        self.config = config

    def __call__(self):
        from .loop import build
        task, _, es = build(TrainConfig.from_dict(self.config))
        return es, task.make_fitness()

    def __repr__(self) -> str:
        return f"TaskRecipe(task={self.config.get('task')!r})"
