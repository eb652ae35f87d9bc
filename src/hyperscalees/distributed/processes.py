"""The processes this one started, so a start-up cut short can end what it had already launched.

``ray.init`` starts a GCS server, a raylet, a dashboard, monitors and workers before it returns.
Interrupted half-way (Ctrl-C during Ray's start-up) it has not yet recorded them anywhere
``ray.shutdown()`` looks, so they would keep running (until this process exits, through Ray's
fate sharing, on Linux). :func:`ended_if_failed` notes this process's descendants before a call
and, if the call raises, kills those that appeared during it. Read from ``/proc``: elsewhere it
does nothing and Ray's own reaper remains the only cleanup.
"""
from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Iterator

PROC = Path("/proc")


def descendants(pid: int | None = None) -> set[int]:
    """Process ids of every living descendant of ``pid`` (default: this process); empty without /proc."""
    root = os.getpid() if pid is None else pid
    children: dict[int, list[int]] = {}
    for stat in PROC.glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:          # gone meanwhile
            continue
        fields = text.rsplit(")", 1)[-1].split()   # after "pid (comm)": state, ppid, ...
        if len(fields) > 1 and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def kill(pids: set[int], reap_seconds: float = 2.0) -> None:
    """SIGKILL ``pids`` (all collected first: a parent killed first would orphan its children out of
    reach), then wait, for up to ``reap_seconds``, until each is gone: this process's children are
    reaped; the others (orphans now) are waited for until they are dead or a zombie, since a SIGKILL
    takes effect when the process is next scheduled, which on a loaded machine is not at once."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    waiting, deadline = set(pids), time.monotonic() + reap_seconds
    while waiting and time.monotonic() < deadline:
        for pid in list(waiting):
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == 0:
                    continue                      # not dead yet
            except ChildProcessError:             # not our child (or already reaped): dead yet?
                if _running(pid):
                    continue
            except OSError:
                pass
            waiting.discard(pid)
        if waiting:
            time.sleep(0.01)


def _running(pid: int) -> bool:
    """Is ``pid`` a process that has not died (a zombie has)? False without /proc."""
    try:
        return (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@contextlib.contextmanager
def ended_if_failed() -> Iterator[None]:
    """Run the body; if it raises (a signal included), kill the descendants it started, then re-raise."""
    before = descendants()
    try:
        yield
    except BaseException:
        kill(descendants() - before)
        raise
