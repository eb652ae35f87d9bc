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
    reach) and reap, for up to ``reap_seconds``, the ones that are this process's children."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    waiting, deadline = set(pids), time.monotonic() + reap_seconds
    while waiting and time.monotonic() < deadline:
        for pid in list(waiting):
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == 0:
                    continue                      # not dead yet
            except OSError:                       # not our child (or already reaped): nothing to do
                pass
            waiting.discard(pid)
        if waiting:
            time.sleep(0.01)


@contextlib.contextmanager
def ended_if_failed() -> Iterator[None]:
    """Run the body; if it raises (a signal included), kill the descendants it started, then re-raise."""
    before = descendants()
    try:
        yield
    except BaseException:
        kill(descendants() - before)
        raise
