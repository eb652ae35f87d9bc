"""A run whose data has moved: say so in one line, and let ``--data NEW`` give its new place.

A run records where its data was (``AbstractTask.data_options``, e.g. lm's ``data``, stored as an
absolute path; runs saved before that stored it as typed). ``eval``, ``generate`` and
``--resume`` read that path again; once the data is moved or deleted, the task's own error
("does not exist") would not say that the *run's* path is stale, nor what to do. These
checks do, before the task reads anything. A new path is taken as a place, not as another
run: the task itself checks from its saved state that the data is the same (lm: its hash).
"""
from __future__ import annotations

import os
from pathlib import Path

from ..tasks import AbstractTask, get_task
from .config import TrainConfig


def flag(option: str) -> str:
    return "--" + option.replace("_", "-")


def check_data_present(task_cls: type[AbstractTask], options: dict, directory, recorded: dict | None = None) -> None:
    """FileNotFoundError, one line, when a data path the run in ``directory`` recorded no longer exists.

    ``options``: the run's options as parsed here (paths made absolute); ``recorded``: as saved,
    to name a relative path the way the run stored it.
    """
    for name in task_cls.data_options:
        path = options.get(name)
        if not path or os.path.exists(path):
            continue
        saved = (recorded or {}).get(name, path)
        shown = repr(path) if saved == path else \
            f"{saved!r} (recorded relative to where the run started; from here {path!r})"
        raise FileNotFoundError(f"data has moved: {shown}, the data of the run in {str(directory)!r}, no longer "
                                f"exists; pass {flag(name)} NEW (the same data at its new place)")


def relocated(cfg: TrainConfig, paths: dict[str, str]) -> TrainConfig:
    """``cfg`` with its data options at new ``paths`` (option -> path); a ValueError names an option the
    task has no data under."""
    task_cls = get_task(cfg.task)
    bad = sorted(set(paths) - set(task_cls.data_options))
    if bad:
        raise ValueError(f"{flag(bad[0])}: task {cfg.task!r} reads no data from a path")
    return TrainConfig.from_dict({**cfg.to_dict(), "options": {**cfg.options, **paths}})


def same_run_options(task: str, old: dict, new: dict) -> bool:
    """Do two runs' options describe the same run? Where the data lives does not count (it may move)."""
    movable = set(get_task(task).data_options)
    return {k: v for k, v in old.items() if k not in movable} == {k: v for k, v in new.items() if k not in movable}


def check_resumed_data(directory, cfg: TrainConfig, saved: TrainConfig, recorded: dict) -> None:
    """For ``--resume``: a data path the run recorded (``saved``; ``recorded``: its raw options) and
    this run reuses must still exist."""
    task_cls = get_task(cfg.task)
    kept = {k: v for k, v in cfg.options.items() if k in task_cls.data_options and saved.options.get(k) == v}
    check_data_present(task_cls, kept, Path(directory), recorded)
