"""A run read back from its checkpoint: resumed into a live run (``resume``), or loaded to be
used or scored (``load_run``, ``saved_config``), each refusing a checkpoint that does not fit
with one line that names what differs."""
from __future__ import annotations

from pathlib import Path

import torch

from ..tasks import AbstractTask, get_task
from .checkpoint import META_FILE, load_checkpoint, load_checkpoint_config
from .config import TrainConfig, check_device
from .files import BadFileError
from .metrics import JSONL_FILE
from .relocate import check_data_present, relocated, same_run_options

# what a strategy's or a model's load_state_dict raises on a state of another shape
_STATE_ERRORS = (KeyError, ValueError, TypeError, IndexError, RuntimeError, AttributeError)


def resume(es, task: AbstractTask, cfg: TrainConfig) -> dict:
    """Load the checkpoint in ``cfg.engine.resume`` after checking it belongs to the same run."""
    directory = cfg.engine.resume
    try:
        ckpt = load_checkpoint(directory, cfg.engine.resolved_device)
    except FileNotFoundError as e:
        if (Path(directory) / JSONL_FILE).exists():  # killed before its first checkpoint
            raise FileNotFoundError(f"{e}; the run there stopped before its first checkpoint: start it again "
                                    f"with --out {directory} --overwrite") from None
        raise
    old, new = parse_config(ckpt.config, directory).to_dict(), cfg.to_dict()
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
    return parse_config(load_checkpoint_config(directory), directory)


def parse_config(saved: dict, directory: str | Path) -> TrainConfig:
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
    cfg = parse_config(ckpt.config, directory)
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
