"""Ctrl-C and SIGTERM stop a run between two steps, so it can checkpoint instead of losing them.

The first SIGINT or SIGTERM only records the signal; the loop reads it after the current
step and ends the run as if its step count were reached (final metrics, a checkpoint when
there is a run directory). The caller then exits with the conventional 128 + signal number
(130, 143). A second signal means "stop now": it raises :class:`Interrupted` wherever the
process is, even inside a checkpoint write. That loses nothing committed, because a
checkpoint only exists once its single pointer file has been renamed into place.
"""
from __future__ import annotations

import signal
import threading
from typing import Callable

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """Raised by a second signal; ``signum`` gives the exit code 128 + signum."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopRequest:
    """While entered, SIGINT/SIGTERM set :attr:`signum` instead of interrupting the process.

    Installs handlers only in the main thread (Python allows no others) and restores the
    previous ones on exit. ``notify(signum)`` is called once, at the first signal.
    """

    def __init__(self, notify: Callable[[int], None] | None = None):
        self.signum: int | None = None
        self.notify = notify
        self._previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():
            for s in SIGNALS:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame) -> None:
        if self.signum is not None:
            raise Interrupted(signum)
        self.signum = signum
        if self.notify:
            self.notify(signum)


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name
