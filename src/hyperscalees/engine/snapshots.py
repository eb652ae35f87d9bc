"""Snapshots: the model as users take it away, written every few minutes of a run's wall clock.

A checkpoint holds one state, the latest, to resume from; a snapshot keeps the exported model
(``task.export``: an LLM's ``save_pretrained`` folder) of a moment of the run, so its held-out
metrics can be scored afterwards, outside the run's clock, as a curve against wall time --
what a comparison at equal wall clock needs, without spending the run's budget on evaluations.

``--snapshot-minutes M`` writes ``OUT/snapshots/step_NNNNNN/`` whenever another M minutes of the
run's wall clock (since its start; a resumed run counts from its restart) have passed, and one
line per snapshot to ``OUT/snapshots/index.jsonl``: ``{"step", "time", "path"}`` (the path relative
to ``OUT``, so the run directory can move). The write counts against the run's clock, like a
checkpoint's. Only a task with an export can snapshot (refused at the start otherwise).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from ..tasks import AbstractTask

SNAPSHOT_DIR = "snapshots"
INDEX_FILE = "index.jsonl"


class Snapshots:
    """When the next snapshot is due, and writing it. ``every_s``: seconds of wall clock between two."""

    def __init__(self, every_s: float):
        if not every_s > 0:
            raise ValueError(f"snapshot interval must be > 0 seconds, got {every_s!r}")
        self.every_s, self.next_s, self.written = float(every_s), float(every_s), 0

    def due(self, elapsed_s: float) -> bool:
        return elapsed_s >= self.next_s

    def write(self, task, model, out: Path, step: int, elapsed_s: float) -> Path:
        """Export ``model`` into ``out/snapshots/step_NNNNNN`` and index it; the next one is due at the
        next multiple of the interval past ``elapsed_s`` (a slow step skips marks, never bunches them)."""
        folder = Path(out) / SNAPSHOT_DIR / f"step_{step:06d}"
        paths = task.export(model, folder)
        entry = {"step": step, "time": round(elapsed_s, 4),
                 "path": {k: os.path.relpath(v, out) for k, v in paths.items()}}
        with open(Path(out) / SNAPSHOT_DIR / INDEX_FILE, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.written += 1
        while self.next_s <= elapsed_s:
            self.next_s += self.every_s
        return folder


def read_snapshots(out) -> list[dict]:
    """The snapshots a run directory holds, in order, each ``{"step", "time", "path": {name: absolute path}}``;
    a line a kill cut short is skipped."""
    index = Path(out) / SNAPSHOT_DIR / INDEX_FILE
    if not index.exists():
        return []
    entries = []
    for line in index.read_text(encoding="utf-8").splitlines():
        try:
            e = json.loads(line)
        except json.JSONDecodeError:
            continue
        entries.append({**e, "path": {k: str(Path(out) / v) for k, v in e["path"].items()}})
    return entries


def check_snapshots(task, minutes: float, out) -> None:
    """Refuse ``--snapshot-minutes`` where nothing could be written: no run directory, or a task without
    an export (it would write empty folders)."""
    if not minutes:
        return
    if out is None:
        raise ValueError("--snapshot-minutes needs a run directory (--out) to write the snapshots into")
    if type(task).export is AbstractTask.export:
        raise ValueError(f"--snapshot-minutes: task {type(task).__name__} exports nothing to snapshot "
                         "(snapshots are an exporting task's model, e.g. train llm's save_pretrained folder)")
