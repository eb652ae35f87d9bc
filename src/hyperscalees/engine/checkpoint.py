"""Checkpoints a run can resume from bit for bit, committed so that a kill at any instant leaves one.

A checkpoint at step 60 is four files in the run directory:
  ``model-000060.safetensors``  the model's state (portable, loadable without this library);
  ``strategy-000060.pt``        the strategy's state dict, kept opaque: step, optimizer moments, masters;
  ``task-000060.pt``            the task's state dict (observation statistics, data position; often empty);
  ``checkpoint.json``           the commit pointer: step, the names of the three files above,
                                ``asdict(config)`` and versions.
Three files written one after the other cannot be replaced atomically as a set, but one
pointer can. So a save writes the step-named files (each atomically and fsync'd), fsyncs
the directory, then replaces ``checkpoint.json``: that rename is the commit. Only once the
directory is fsync'd again are the previous checkpoint's files deleted. Killed anywhere
before the rename, the old pointer still names the old, complete files; killed after it,
the new one names the new files. A reader opens only what the pointer names, and the
files of an interrupted save are orphans that :func:`remove_orphans` deletes on the next start.

Saving the step a pointer already names (a resumed run that had nothing left to do, or a
new run replacing an old one with ``--overwrite``) uses the name ``model-000060-1...``, so a
committed file is never overwritten in place. Directories of the older layout (plain
``model.safetensors`` and ``strategy.pt``, no task file) still load: their pointer names them.
"""
from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import pickle
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from .files import BadFileError, atomic_write, check_directory, fsync_dir, json_safe, read_json, remove_temporaries

META_FILE = "checkpoint.json"
MODEL_FILE = "model.safetensors"    # the older layout's names, still read
STRATEGY_FILE = "strategy.pt"
FORMAT = 2
PARTS = {"model": "safetensors", "strategy": "pt", "task": "pt"}
STEP_FILE = re.compile(r"^(model|strategy|task)-\d+(-\d+)?\.(safetensors|pt)$")
# what torch.load and safetensors raise on damaged bytes: a bad pickle opcode, a torn zip, a short read
_LOAD_ERRORS = (SafetensorError, pickle.UnpicklingError, EOFError, IndexError, KeyError, ValueError, RuntimeError,
                OSError)


@dataclass
class Checkpoint:
    step: int
    config: dict
    model: dict[str, torch.Tensor]
    strategy: dict | None           # None when loaded without it (evaluation needs no optimizer)
    meta: dict
    task: dict = field(default_factory=dict)


def step_file_names(step: int, taken: set[str] = frozenset()) -> dict[str, str]:
    """{part: file name} for a checkpoint at ``step``, avoiding every name in ``taken``."""
    for k in range(len(taken) + 1):
        tag = f"{step:06d}" + (f"-{k}" if k else "")
        names = {part: f"{part}-{tag}.{ext}" for part, ext in PARTS.items()}
        if not taken & set(names.values()):
            return names
    raise AssertionError("unreachable: len(taken) + 1 tags cannot all be taken")


def save_checkpoint(directory: str | os.PathLike, es, config: dict, extra: dict | None = None,
                    task_state: dict | None = None) -> dict[str, Path]:
    """Commit ``es``'s model and strategy state, ``task_state`` and ``config`` into ``directory``.

    Returns the paths of the committed files by part ("model", "strategy", "task", "pointer").
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    step = int(es.step)
    sd = es.state_dict()
    tensors = {k: v.detach().contiguous().clone() for k, v in sd["model"].items()}
    previous = committed_files(directory) or set()
    names = step_file_names(step, previous)
    atomic_write(directory / names["model"], lambda tmp: save_file(tensors, tmp, metadata={"step": str(step)}))
    atomic_write(directory / names["strategy"], lambda tmp: torch.save({"step": step, "strategy": sd["strategy"]}, tmp))
    atomic_write(directory / names["task"], lambda tmp: torch.save({"step": step, "task": task_state or {}}, tmp))
    fsync_dir(directory)  # the three renames are on disk before the pointer can name them
    meta = {"format": FORMAT, "step": step, "files": names, "config": config, "version": package_version(),
            "torch": torch.__version__, **(extra or {})}
    text = json.dumps(json_safe(meta)[0], indent=2, default=str, allow_nan=False) + "\n"
    atomic_write(directory / META_FILE, lambda tmp: Path(tmp).write_text(text))
    fsync_dir(directory)  # the commit is durable: only now may the previous checkpoint go
    _remove_step_files(directory, keep=set(names.values()))
    return {**{part: directory / name for part, name in names.items()}, "pointer": directory / META_FILE}


def package_version() -> str:
    """This library's installed version (read from metadata: the package root sits above engine)."""
    try:
        return importlib.metadata.version("hyperscalees")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def has_checkpoint(directory: str | os.PathLike) -> bool:
    return (Path(directory) / META_FILE).is_file()


def read_pointer(directory: str | os.PathLike) -> dict:
    """The validated content of ``checkpoint.json``; FileNotFoundError if there is none."""
    directory = check_directory(directory, "checkpoint directory")
    path = directory / META_FILE
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint in {str(directory)!r} (missing {META_FILE})")
    meta = read_json(path)
    problem = _pointer_problem(meta)
    if problem:
        raise BadFileError(f"{str(path)!r} is not a valid checkpoint pointer: {problem}")
    return meta


def _pointer_problem(meta) -> str | None:
    if not isinstance(meta, dict):
        return f"expected a JSON object, got {type(meta).__name__}"
    if not isinstance(meta.get("step"), int) or meta["step"] < 0:
        return f"'step' must be an integer >= 0, got {meta.get('step')!r}"
    if not isinstance(meta.get("config"), dict):
        return "'config' is missing or not an object"
    files = meta.get("files")
    if not isinstance(files, dict) or not {"model", "strategy"} <= set(files):
        return "'files' must name the model and strategy files"
    for part, name in files.items():
        if not isinstance(name, str) or Path(name).name != name or name.startswith("."):
            return f"files.{part} must be a plain file name in the run directory, got {name!r}"
    return None


def committed_files(directory: str | os.PathLike) -> set[str] | None:
    """Names the pointer commits to: empty without a pointer, None if it is unreadable."""
    try:
        return set(read_pointer(directory)["files"].values())
    except FileNotFoundError:
        return set()
    except BadFileError:
        return None


def checkpoint_step(directory: str | os.PathLike) -> int | None:
    """The committed step in ``directory``, or None when there is no readable checkpoint."""
    with contextlib.suppress(FileNotFoundError, BadFileError):
        return read_pointer(directory)["step"]
    return None


def remove_orphans(directory: str | os.PathLike) -> list[str]:
    """Delete what interrupted saves left behind: temporaries and step files no pointer names.

    If the pointer itself is unreadable nothing but temporaries is touched: the step files
    may be all that is left of the run.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return []
    removed = remove_temporaries(directory)
    keep = committed_files(directory)
    if keep is not None:
        removed += _remove_step_files(directory, keep)
    return removed


def _remove_step_files(directory: Path, keep: set[str]) -> list[str]:
    removed = []
    for p in directory.iterdir():
        if p.name not in keep and (STEP_FILE.match(p.name) or p.name in (MODEL_FILE, STRATEGY_FILE)):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
            removed.append(p.name)
    return removed


def load_checkpoint_config(directory: str | os.PathLike) -> dict:
    """Just the saved ``asdict(config)`` of a checkpoint (cheap: no tensors read)."""
    return read_pointer(directory)["config"]


def load_checkpoint(directory: str | os.PathLike, device: str | torch.device | None = None,
                    strategy: bool = True) -> Checkpoint:
    """Read the checkpoint ``checkpoint.json`` commits to, tensors placed on ``device``.

    ``strategy=False`` skips the strategy file, which evaluating a model does not need.
    Every file is checked: a damaged or mismatched one raises :class:`BadFileError` naming it.
    """
    directory = Path(directory)
    meta = read_pointer(directory)
    dev = str(torch.device(device)) if device is not None else "cpu"
    files, step = meta["files"], meta["step"]
    model, model_step = _load_model(directory / files["model"], dev)
    steps = {META_FILE: step, files["model"]: model_step}
    blob = None
    if strategy:
        blob = _load_pickled(directory / files["strategy"], dev, "strategy")
        steps[files["strategy"]] = blob["step"]
    task = {}
    if "task" in files:
        task_blob = _load_pickled(directory / files["task"], dev, "task")
        steps[files["task"]] = task_blob["step"]
        task = task_blob["task"]
    if len(set(steps.values())) != 1:
        raise BadFileError(f"inconsistent checkpoint in {str(directory)!r}: files are at different steps {steps}")
    return Checkpoint(step=step, config=meta["config"], model=model, strategy=blob["strategy"] if blob else None,
                      meta=meta, task=task)


def _load_model(path: Path, device: str) -> tuple[dict[str, torch.Tensor], int]:
    """(tensors, step recorded in the metadata) of a safetensors file."""
    if not path.is_file():
        raise BadFileError(f"checkpoint file {str(path)!r} is missing" if not path.exists()
                           else f"checkpoint file {str(path)!r} is not a file")
    try:
        with safe_open(str(path), framework="pt", device=device) as f:
            recorded = (f.metadata() or {}).get("step")
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except _LOAD_ERRORS as e:
        raise BadFileError(f"damaged model file {str(path)!r}: {_one_line(e)}") from None
    try:
        return tensors, int(recorded)
    except (TypeError, ValueError):
        raise BadFileError(f"model file {str(path)!r} records no step (got {recorded!r}); "
                           "it was not written by this library") from None


def _load_pickled(path: Path, device: str, key: str) -> dict:
    """``{"step": int, key: dict}`` saved with ``torch.save``, read without running arbitrary code."""
    if not path.is_file():
        raise BadFileError(f"checkpoint file {str(path)!r} is missing" if not path.exists()
                           else f"checkpoint file {str(path)!r} is not a file")
    try:
        with warnings.catch_warnings():  # garbage bytes can also trigger a pickle-protocol UserWarning
            warnings.simplefilter("ignore")
            blob = torch.load(path, map_location=device, weights_only=True)
    except _LOAD_ERRORS as e:
        raise BadFileError(f"damaged {key} file {str(path)!r}: {_one_line(e)}") from None
    if not (isinstance(blob, dict) and isinstance(blob.get("step"), int) and isinstance(blob.get(key), dict)):
        raise BadFileError(f"{key} file {str(path)!r} does not hold a {key} state "
                           f"(expected {{'step': int, {key!r}: dict}})")
    return blob


def _one_line(e: BaseException) -> str:
    """What is wrong, in a few words rather than the loader's paragraphs of advice."""
    if isinstance(e, EOFError):
        return "the file ends early (truncated)"
    if isinstance(e, pickle.UnpicklingError):
        return "not a weights-only torch.save file (garbage bytes, or objects other than tensors and plain data)"
    if isinstance(e, (IndexError, KeyError, UnicodeDecodeError)):
        return f"malformed pickle data ({type(e).__name__})"
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if "zip archive" in text:
        return "truncated, or not a torch.save archive"
    return text[:200]
