"""Durable writes and validated reads: the two halves of never losing or misreading a run.

Writes go to a dot-named temporary file in the target's directory, are fsync'd, then
renamed over the target (``os.replace`` is atomic on POSIX and Windows), so a reader sees
the old content or the new, never half of it. A rename is only durable once its directory
is fsync'd too, which :func:`fsync_dir` does.

Reads of anything the user may have damaged (a torn JSON file, a truncated tensor file, a
file where a directory should be) raise :class:`BadFileError`, a ``ValueError`` whose
message names the file and what is wrong with it, so the CLI can print one line instead
of a traceback from deep inside a parser.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import uuid
from pathlib import Path
from typing import Callable

# what a hard kill leaves behind: atomic_write's ".<name>.<pid>.<hex>.tmp", and the ".tmpXXXXXX"
# that safetensors (Rust's tempfile crate) writes before renaming it to atomic_write's name
TMP_PATTERN = re.compile(r"^\..+\.tmp$|^\.tmp[A-Za-z0-9]{6}$")
LOCK_FILE = ".lock"


class BadFileError(ValueError):
    """A file the engine reads is missing, unreadable or malformed; the message names it."""


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Call ``write(tmp_path)``, then atomically move the result to ``path``.

    If ``write`` raises (or the process dies), ``path`` keeps its previous content and the
    temporary file is removed (or, after a hard kill, left under a dot-name that
    :func:`remove_temporaries` clears). The file gets the ordinary mode of a new file even
    when ``write`` created it 0600 (safetensors does).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = str(path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def fsync_dir(directory: str | os.PathLike) -> None:
    """Make the renames and deletions inside ``directory`` durable (a no-op where unsupported)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # Windows cannot open a directory; its renames are durable by other means
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_temporaries(directory: str | os.PathLike) -> list[str]:
    """Delete the dot-``.tmp`` files that interrupted atomic writes left in ``directory``."""
    removed = []
    for p in Path(directory).iterdir():
        if TMP_PATTERN.match(p.name) and p.is_file():
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
            removed.append(p.name)
    return removed


def check_directory(path: str | os.PathLike, what: str) -> Path:
    """``path`` as a Path, refusing an existing non-directory (``what`` names the flag)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise BadFileError(f"{what} {str(path)!r} is a file, not a run directory")
    return path


def read_json(path: str | os.PathLike) -> object:
    """The parsed content of a JSON file; :class:`BadFileError` naming it if unreadable."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise BadFileError(f"{str(path)!r} is missing") from None
    except (IsADirectoryError, NotADirectoryError, PermissionError, UnicodeDecodeError) as e:
        raise BadFileError(f"cannot read {str(path)!r}: {_reason(e)}") from None
    if not text.strip():
        raise BadFileError(f"{str(path)!r} is empty")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise BadFileError(f"{str(path)!r} is not valid JSON ({e})") from None


def _reason(e: BaseException) -> str:
    return getattr(e, "strerror", None) or str(e) or type(e).__name__


def json_safe(obj, where: str = "") -> tuple[object, list[str]]:
    """``obj`` with every non-finite float replaced by None, and the dotted paths replaced.

    JSON has no NaN or infinity; Python's ``json`` writes them anyway, producing lines that
    strict parsers (``jq``, JavaScript) reject.
    """
    if isinstance(obj, float) and not math.isfinite(obj):
        return None, [where or "(value)"]
    if isinstance(obj, dict):
        out, found = {}, []
        for k, v in obj.items():
            out[k], f = json_safe(v, f"{where}.{k}" if where else str(k))
            found += f
        return out, found
    if isinstance(obj, (list, tuple)):
        out, found = [], []
        for i, v in enumerate(obj):
            c, f = json_safe(v, f"{where}[{i}]")
            out.append(c)
            found += f
        return out, found
    return obj, []


@contextlib.contextmanager
def exclusive(directory: str | os.PathLike):
    """Hold an advisory lock on ``directory`` so two processes never write one run at once.

    The lock dies with the process (even after SIGKILL), so a killed run never blocks the
    next one. Where ``fcntl`` is missing (Windows) this only creates the directory.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield directory
        return
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BadFileError(f"another process is writing to {str(directory)!r}; wait for it or pick "
                               "another directory") from None
        yield directory
    finally:
        os.close(fd)  # closing releases the lock
