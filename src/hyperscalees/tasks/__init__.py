"""Fitness functions with their models and metrics; ``TASKS`` maps a name to its class."""
from .base import AbstractTask, EvaluationStopped, NoOptions, member_major
from .digits import DigitsTask
from .lm import LMTask
from .finetune import FinetuneTask
from .poly import PolyTask
from .predict2 import Predict2Task
from .rl import RLTask
from .xor import XorTask

TASKS: dict[str, type[AbstractTask]] = {t.name: t for t in (XorTask, Predict2Task, PolyTask, DigitsTask, RLTask,
                                                               LMTask, FinetuneTask)}


def get_task(name: str) -> type[AbstractTask]:
    """The task class called ``name``; a ValueError names the bad value and the choices."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose one of {sorted(TASKS)}")
    return TASKS[name]


__all__ = ["AbstractTask", "DigitsTask", "EvaluationStopped", "FinetuneTask", "LMTask", "NoOptions", "PolyTask",
           "Predict2Task", "RLTask", "TASKS", "XorTask", "get_task", "member_major"]
