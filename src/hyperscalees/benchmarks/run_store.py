"""Finished runs kept on disk, so a study cut short by a session's end resumes instead of starting over.

A study's runs can take an hour each on a CPU (an LLM study's) or fill hours as a series (``bench
population-loss`` at 300 s a run), longer than a working session. Every finished run is written
(atomically) under a runs folder as soon as it ends, beside the key that says what it ran (method,
seed, budget, settings ...). Run the same command again with the same folder and a run whose file
holds the same key is read back instead of trained again. A file holding a different key means two
studies share the folder: that is refused, never overwritten. A run killed midway wrote nothing, so
it runs again whole; runs that must meet the same contention (a side-by-side pair) are written
together, after both end, so they also run again together.

Scores made outside the clock (the model's held-out accuracy before training) are kept the same way:
on SmolLM2 the pooled held-out set takes nine minutes to score.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from hyperscalees.benchmarks.base import BenchSetupError
from hyperscalees.engine.files import atomic_write

KEY_FIELD = "run_key"


class RunStore:
    """Records under ``folder`` by name (``es_seed301``, ``tuning/grpo_seed1_setting0``); ``folder``
    None keeps nothing (every lookup misses, every save is dropped)."""

    def __init__(self, folder: str | os.PathLike | None):
        self.folder = None if folder is None else Path(folder)

    def path(self, name: str) -> Path:
        return self.folder / f"{name}.json"

    def load(self, name: str, key: dict) -> dict | None:
        """The record saved as ``name`` for exactly ``key``, or None when there is none."""
        if self.folder is None or not self.path(name).exists():
            return None
        path = self.path(name)
        try:
            saved = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise BenchSetupError(f"{path}: not a run record ({e}); move it away to run it again") from e
        if not isinstance(saved, dict) or saved.get(KEY_FIELD) != canonical(key):
            raise BenchSetupError(
                f"{path} holds a different run (its key {saved.get(KEY_FIELD) if isinstance(saved, dict) else None}, "
                f"this run's {canonical(key)}): give this study a --runs-dir of its own")
        return {k: v for k, v in saved.items() if k != KEY_FIELD}

    def save(self, name: str, key: dict, record: dict) -> None:
        if self.folder is None:
            return
        text = json.dumps({KEY_FIELD: canonical(key), **record}) + "\n"
        atomic_write(self.path(name), lambda tmp: Path(tmp).write_text(text))


def canonical(key: dict) -> dict:
    """``key`` as it reads back from JSON (tuples become lists, paths strings), so a fresh key and a saved
    one compare equal exactly when they name the same run."""
    return json.loads(json.dumps(key, default=str, sort_keys=True))
