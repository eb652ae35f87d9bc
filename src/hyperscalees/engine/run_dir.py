"""What a run directory may hold, and replacing a run all or nothing (``--overwrite``).

A new run starts only in an empty (or new) directory unless ``--overwrite`` is given: any
file already there may be the user's. A run writes a known set of names (``checkpoint.json``,
step files, metrics, curve); nothing here ever deletes a file by any other name.

``--overwrite`` of an existing directory first trains into a sibling staging directory
``.<name>.overwrite`` (same filesystem, so renames are cheap) and only when that new run
commits its first checkpoint swaps it in: the old directory is renamed aside, the new one
renamed into place, then the old run's own files are deleted. A run that fails or is killed
before that commit leaves the old run exactly as it was (a stale staging directory is cleared
by the next ``--overwrite``). Files in the old directory that were not the run's are kept
where it was moved to, and a note says where.
"""
from __future__ import annotations

import contextlib
import shutil
import uuid
from pathlib import Path

from .checkpoint import META_FILE, MODEL_FILE, STEP_FILE, STRATEGY_FILE
from .files import LOCK_FILE, TMP_PATTERN, exclusive, fsync_dir
from .metrics import CSV_FILE, JSONL_FILE, PLOT_FILE

RUN_FILES = {META_FILE, MODEL_FILE, STRATEGY_FILE, JSONL_FILE, CSV_FILE, PLOT_FILE, LOCK_FILE}


def is_run_file(name: str) -> bool:
    """A name a run writes (or an interrupted write of one leaves)."""
    return name in RUN_FILES or bool(STEP_FILE.match(name)) or bool(TMP_PATTERN.match(name))


def holds_anything(directory: Path) -> bool:
    """True when ``directory`` holds more than a lock file and temporaries (what a failed start leaves)."""
    if not directory.is_dir():
        return False
    return any(p.name != LOCK_FILE and not TMP_PATTERN.match(p.name) for p in directory.iterdir())


def refuse_nonempty(directory: Path) -> None:
    """Refuse to start a new run in a directory that already holds files (``--overwrite`` skips this)."""
    if holds_anything(directory):
        names = sorted(p.name for p in directory.iterdir() if p.name != LOCK_FILE and not TMP_PATTERN.match(p.name))
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        raise ValueError(f"--out {str(directory)!r} is not empty and holds no run ({shown}); choose an empty or "
                         "new directory, or replace its contents with --overwrite")


def remove_empty_failed(directory: Path) -> None:
    """Remove a directory a failed start created, if it holds nothing of value: its lock, temporaries
    and metrics files without a row (a run that failed before its first step leaves just those)."""
    with contextlib.suppress(OSError):
        if not directory.is_dir() or (directory / JSONL_FILE).is_file() and (directory / JSONL_FILE).stat().st_size:
            return
        names = [p.name for p in directory.iterdir()]
        if all(n in (LOCK_FILE, JSONL_FILE, CSV_FILE) or TMP_PATTERN.match(n) for n in names):
            for n in names:
                (directory / n).unlink()
            directory.rmdir()


class Replacement:
    """A new run trained beside ``out`` and swapped in at its first commit (see the module docstring).

    Use as a context manager (held while the run lasts): ``staging`` is where the run writes
    until :meth:`commit`; leaving without a commit deletes the staging directory only.
    """

    def __init__(self, out: Path):
        self.out = Path(out)
        self.staging = self.out.parent / f".{self.out.name}.overwrite"
        self.committed = False
        self.notes: list[str] = []
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> "Replacement":
        if self.staging.exists():        # what a killed --overwrite left: never committed, so never used
            shutil.rmtree(self.staging)
        self._stack.enter_context(exclusive(self.staging))
        return self

    def commit(self) -> Path:
        """Swap the staged run in; returns ``out`` (where the run now lives)."""
        if self.committed:
            return self.out
        old = self.out.parent / f".{self.out.name}.replaced-{uuid.uuid4().hex[:8]}"
        self.out.rename(old)
        self.staging.rename(self.out)
        fsync_dir(self.out.parent)
        self.committed = True
        for p in old.iterdir():          # the old run's own files go; anything else stays, named
            if is_run_file(p.name) and p.is_file():
                p.unlink()
        if any(old.iterdir()):
            self.notes.append(f"--overwrite kept files that were not part of the old run in {str(old)!r}")
        else:
            old.rmdir()
        return self.out

    def __exit__(self, *exc) -> None:
        self._stack.close()
        if not self.committed:
            shutil.rmtree(self.staging, ignore_errors=True)
