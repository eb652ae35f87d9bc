"""Checkpoints a run can resume from bit for bit, committed so that a kill at any instant leaves one.

A checkpoint at step 60 is four files in the run directory:
  ``model-000060.safetensors``     the model's state (portable, loadable without this library);
  ``strategy-000060.safetensors``  the strategy's state dict, kept opaque: step, optimizer moments, masters;
  ``task-000060.safetensors``      the task's state dict (observation statistics, data position; often empty);
  ``checkpoint.json``              the commit pointer: step, the names of the three files above,
                                   ``asdict(config)`` and versions.
The strategy and task states are nested trees written by :mod:`.tree_io`: their tensors as
safetensors, the tree around them as JSON in the same file's header. Nothing read from disk
is a pickle, so opening a checkpoint from elsewhere cannot run code.

Three files written one after the other cannot be replaced atomically as a set, but one
pointer can. So a save writes the step-named files (each atomically and fsync'd), fsyncs
the directory, then replaces ``checkpoint.json``: that rename is the commit. Only once the
directory is fsync'd again are the previous checkpoint's files deleted. Killed anywhere
before the rename, the old pointer still names the old, complete files; killed after it,
the new one names the new files. A reader opens only what the pointer names, and the
files of an interrupted save are orphans that :func:`remove_orphans` deletes on the next start.
A save deletes only the files the previous pointer named, never anything else in the directory.

Saving the step a pointer already names (a resumed run that had nothing left to do, or a
new run replacing an old one with ``--overwrite``) uses the name ``model-000060-1...``, so a
committed file is never overwritten in place. Checkpoints of earlier versions (format 1 and 2)
kept the strategy and task states as ``torch.save`` pickles (``strategy-000060.pt``); they are
refused with a message saying so rather than unpickled. Their files are still recognised as a
run's, so ``--overwrite`` replaces them (engine/run_dir.py).
"""
from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from .files import BadFileError, atomic_write, check_directory, fsync_dir, json_safe, read_json, remove_temporaries
from .tree_io import TreeFormatError, flatten, read_tree, write_flat

META_FILE = "checkpoint.json"
MODEL_FILE = "model.safetensors"    # the first layout's names: recognised so they can be replaced
STRATEGY_FILE = "strategy.pt"
FORMAT = 3                          # 3: strategy and task states as safetensors + JSON (1, 2: pickles)
PARTS = {"model": "safetensors", "strategy": "safetensors", "task": "safetensors"}
STEP_FILE = re.compile(r"^(model|strategy|task)-\d+(-\d+)?\.(safetensors|pt)$")  # .pt: earlier versions
# what safetensors raises on damaged bytes: a header that does not parse, a short read, a bad dtype
_LOAD_ERRORS = (SafetensorError, EOFError, KeyError, ValueError, RuntimeError, OSError)


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
    names = step_file_names(step, previous | {p.name for p in directory.iterdir()})  # never over any file
    # flattened first: an unstorable leaf fails here, naming its path, before any file is written
    states = {"strategy": flatten(sd["strategy"], copy=False), "task": flatten(task_state or {}, copy=False)}
    atomic_write(directory / names["model"], lambda tmp: save_file(tensors, tmp, metadata={"step": str(step)}))
    for part, (flat, spec) in states.items():
        header = {"step": str(step), "part": part}
        atomic_write(directory / names[part], lambda tmp, f=flat, s=spec, h=header: write_flat(tmp, f, s, h))
    fsync_dir(directory)  # the three renames are on disk before the pointer can name them
    meta = {"format": FORMAT, "step": step, "files": names, "config": config, "version": package_version(),
            "torch": torch.__version__, **(extra or {})}
    text = json.dumps(json_safe(meta)[0], indent=2, default=str, allow_nan=False) + "\n"
    atomic_write(directory / META_FILE, lambda tmp: Path(tmp).write_text(text))
    fsync_dir(directory)  # the commit is durable: only now may the previous checkpoint go
    _remove_files(directory, (previous or set()) - set(names.values()))
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
    """Delete what interrupted saves of this run left behind: temporaries and step files no pointer names.

    Only a run directory (one with a readable pointer) loses step files, and only files
    named the way :func:`save_checkpoint` names them: a directory without a pointer may be
    anything, and its ``model-000001.safetensors`` someone's model. If the pointer is
    unreadable nothing but temporaries is touched: the step files may be all that is left.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return []
    removed = remove_temporaries(directory)
    keep = committed_files(directory) if has_checkpoint(directory) else None
    if keep:
        removed += _remove_files(directory, {p.name for p in directory.iterdir()
                                             if STEP_FILE.match(p.name) and p.name not in keep})
    return removed


def _remove_files(directory: Path, names: set[str]) -> list[str]:
    removed = []
    for name in sorted(names):
        with contextlib.suppress(FileNotFoundError):
            (directory / name).unlink()
            removed.append(name)
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
    needed = ["strategy"] * strategy + ["task"] * ("task" in files)
    _refuse_other_formats(directory, meta, needed)
    model, model_step = _load_model(directory / files["model"], dev)
    steps = {META_FILE: step, files["model"]: model_step}
    states = {"strategy": None, "task": {}}
    for part in needed:
        states[part], steps[files[part]] = _load_state(directory / files[part], dev, part)
    if len(set(steps.values())) != 1:
        raise BadFileError(f"inconsistent checkpoint in {str(directory)!r}: files are at different steps {steps}")
    return Checkpoint(step=step, config=meta["config"], model=model, strategy=states["strategy"], meta=meta,
                      task=states["task"])


def _refuse_other_formats(directory: Path, meta: dict, needed: list[str]) -> None:
    """Earlier versions pickled the strategy and task states; a later one may write what this cannot read."""
    fmt = meta.get("format", 1)
    if isinstance(fmt, int) and fmt > FORMAT:
        raise BadFileError(f"the checkpoint in {str(directory)!r} has format {fmt}, newer than this version reads "
                           f"({FORMAT}): upgrade hyperscalees")
    old = [meta["files"][part] for part in needed if not meta["files"][part].endswith(".safetensors")]
    if old:
        raise BadFileError(f"the checkpoint in {str(directory)!r} was written by an earlier hyperscalees in the "
                           f"torch.save format ({', '.join(old)}), which this version no longer reads (no pickle is "
                           "loaded from disk); continue it with the version that wrote it, or start a new run")


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


def _load_state(path: Path, device: str, part: str) -> tuple[dict, int]:
    """(state dict, step recorded in the metadata) of a strategy or task file written by :func:`write_tree`."""
    if not path.is_file():
        raise BadFileError(f"checkpoint file {str(path)!r} is missing" if not path.exists()
                           else f"checkpoint file {str(path)!r} is not a file")
    try:
        state, recorded = read_tree(path, device)
    except TreeFormatError as e:
        raise BadFileError(f"{part} file {str(path)!r} is unusable: {e}") from None
    except _LOAD_ERRORS as e:
        raise BadFileError(f"damaged {part} file {str(path)!r}: {_one_line(e)}") from None
    if recorded.get("part") != part:
        raise BadFileError(f"{part} file {str(path)!r} holds the {recorded.get('part')!r} state, not the {part}'s")
    if not isinstance(state, dict):
        raise BadFileError(f"{part} file {str(path)!r} does not hold a {part} state (a dict), but a "
                           f"{type(state).__name__}")
    try:
        return state, int(recorded.get("step"))
    except (TypeError, ValueError):
        raise BadFileError(f"{part} file {str(path)!r} records no step (got {recorded.get('step')!r})") from None


def _one_line(e: BaseException) -> str:
    """What is wrong, in a few words rather than the loader's paragraphs of advice."""
    if isinstance(e, EOFError):
        return "the file ends early (truncated)"
    if isinstance(e, (KeyError, UnicodeDecodeError)):
        return f"malformed safetensors data ({type(e).__name__})"
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:200]
