"""Checkpoints a run can resume from bit for bit, written so a crash never leaves a torn one.

A checkpoint is three files in the run directory:
  ``model.safetensors``  the model's state (portable, loadable without this library);
  ``strategy.pt``        the strategy's state: step, optimizer moments, fp32 masters;
  ``checkpoint.json``    step, ``asdict(config)`` and versions -- written last.
Each file is written to a temporary name in the same directory, fsync'd, then moved over
the old one with ``os.replace`` (atomic on POSIX and Windows), so a reader sees either the
old file or the new one, never half of one. All three record the step; :func:`load_checkpoint`
refuses a set whose steps disagree (a crash between two renames), rather than resume from
a model and an optimizer of different steps.
"""
from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import load_file, save_file

MODEL_FILE = "model.safetensors"
STRATEGY_FILE = "strategy.pt"
META_FILE = "checkpoint.json"


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Call ``write(tmp_path)``, then atomically move the result to ``path``.

    If ``write`` raises (or the process dies), ``path`` keeps its previous content and the
    temporary file is removed (or, after a hard kill, left under a dot-name never read back).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a fresh unique name (not mkstemp: its 0600 mode would stick to the final file)
    tmp = str(path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def _write_text(text: str) -> Callable[[str], None]:
    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            f.write(text)
    return write


@dataclass
class Checkpoint:
    step: int
    config: dict
    model: dict[str, torch.Tensor]
    strategy: dict
    meta: dict


def save_checkpoint(directory: str | os.PathLike, es, config: dict, extra: dict | None = None) -> Path:
    """Write ``es``'s model and strategy state plus ``config`` into ``directory``."""
    directory = Path(directory)
    step = int(es.step)
    sd = es.state_dict()
    tensors = {k: v.detach().contiguous().clone() for k, v in sd["model"].items()}
    atomic_write(directory / MODEL_FILE, lambda tmp: save_file(tensors, tmp, metadata={"step": str(step)}))
    atomic_write(directory / STRATEGY_FILE, lambda tmp: torch.save({"step": step, "strategy": sd["strategy"]}, tmp))
    meta = {"step": step, "config": config, "version": package_version(), "torch": torch.__version__,
            "files": {"model": MODEL_FILE, "strategy": STRATEGY_FILE}, **(extra or {})}
    atomic_write(directory / META_FILE, _write_text(json.dumps(meta, indent=2, default=str) + "\n"))
    return directory


def package_version() -> str:
    """This library's installed version (read from metadata: the package root sits above engine)."""
    try:
        return importlib.metadata.version("hyperscalees")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def has_checkpoint(directory: str | os.PathLike) -> bool:
    return (Path(directory) / META_FILE).is_file()


def load_checkpoint_config(directory: str | os.PathLike) -> dict:
    """Just the saved ``asdict(config)`` of a checkpoint (cheap: no tensors read)."""
    path = Path(directory) / META_FILE
    try:
        return json.loads(path.read_text())["config"]
    except (OSError, ValueError, KeyError) as e:
        raise RuntimeError(f"unreadable checkpoint metadata {str(path)!r}: {e}") from e


def load_checkpoint(directory: str | os.PathLike, device: str | torch.device | None = None) -> Checkpoint:
    """Read a checkpoint written by :func:`save_checkpoint`, tensors placed on ``device``."""
    directory = Path(directory)
    if not has_checkpoint(directory):
        raise FileNotFoundError(f"no checkpoint in {str(directory)!r} (missing {META_FILE})")
    meta = json.loads((directory / META_FILE).read_text())
    dev = str(torch.device(device)) if device is not None else "cpu"
    model_path = directory / meta["files"]["model"]
    model = load_file(str(model_path), device=dev)
    from safetensors import safe_open
    with safe_open(str(model_path), framework="pt") as f:
        model_step = int((f.metadata() or {}).get("step", -1))
    blob = torch.load(directory / meta["files"]["strategy"], map_location=dev, weights_only=True)
    steps = {"checkpoint.json": int(meta["step"]), MODEL_FILE: model_step, STRATEGY_FILE: int(blob["step"])}
    if len(set(steps.values())) != 1:
        raise RuntimeError(f"inconsistent checkpoint in {str(directory)!r}: files are at different steps {steps}")
    return Checkpoint(step=int(meta["step"]), config=meta["config"], model=model, strategy=blob["strategy"], meta=meta)
