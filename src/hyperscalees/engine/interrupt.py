"""Ctrl-C and SIGTERM stop a run between two steps, so it can checkpoint instead of losing them.

The first SIGINT or SIGTERM only records the signal; the loop reads it after the current
step and ends the run as if its step count were reached (a checkpoint when there is a run
directory). An evaluation under way is cut short (tasks poll the request between windows or
env steps, ``tasks.base.AbstractTask.check_stop``) and none is started after it, so the run
stops within a step, not a validation pass, later. The caller then exits with the
conventional 128 + signal number (130, 143). A second signal means "stop now": it raises
:class:`Interrupted` wherever the process is, even inside a checkpoint write. That loses
nothing committed, because a checkpoint only exists once its single pointer file has been
renamed into place.

Waits that cannot poll the request (Ray's start-up blocks for seconds inside C) run under
:meth:`StopRequest.at_once`: there the first signal already raises :class:`Interrupted`.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Callable, Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)
RESEND_SECONDS = 0.05  # a signal whose exception a callback swallowed is sent again this much later


class Interrupted(KeyboardInterrupt):
    """Raised by a second signal, or the first during :meth:`StopRequest.at_once` (``during`` says
    what it cut short); ``signum`` gives the exit code 128 + signum."""

    def __init__(self, signum: int, during: str | None = None):
        super().__init__(signal.Signals(signum).name)
        self.signum, self.during = signum, during


class StopRequest:
    """While entered, SIGINT/SIGTERM set :attr:`signum` instead of interrupting the process.

    Installs handlers only in the main thread (Python allows no others) and restores the
    previous ones on exit. ``notify(signum)`` is called once, at the first signal.
    """

    def __init__(self, notify: Callable[[int], None] | None = None):
        self.signum: int | None = None
        self.notify = notify
        self._previous: dict[int, object] = {}
        self._at_once: str | None = None

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

    @contextlib.contextmanager
    def at_once(self, during: str) -> Iterator[None]:
        """Within it the first signal raises :class:`Interrupted` too (``during``: what it cuts short,
        e.g. "while starting the ray backend"): for a wait that cannot poll :attr:`requested`.

        A handler's exception is lost when it is raised inside a callback that swallows errors:
        after each fork, Python runs its at-fork hooks (``logging``'s among them), the first Python
        code a signal that came during the fork meets, and Ray forks a dozen processes as it
        starts. Such a loss is reported to ``sys.unraisablehook``; the signal is then sent again a
        moment later (from a timer thread: a handler run inside the hook would be lost the same
        way), so its exception is raised anew where it can propagate. Should one still be lost,
        leaving the section raises it.
        """
        self._at_once = during
        previous = sys.unraisablehook

        def resend(signum: int) -> None:
            if self._at_once is not None:  # still starting: nothing has stopped it yet
                os.kill(os.getpid(), signum)

        def raise_again(unraisable) -> None:
            if isinstance(unraisable.exc_value, Interrupted) and self._at_once is not None:
                timer = threading.Timer(RESEND_SECONDS, resend, (unraisable.exc_value.signum,))
                timer.daemon = True
                timer.start()
            else:
                previous(unraisable)

        sys.unraisablehook = raise_again
        try:
            yield
        finally:
            sys.unraisablehook = previous
            self._at_once = None
        if self.signum is not None:  # it came, but its exception never reached here
            raise Interrupted(self.signum, during)

    def _handle(self, signum: int, frame) -> None:
        first = self.signum is None
        if first:
            self.signum = signum
        if not first or self._at_once is not None:
            raise Interrupted(signum, self._at_once)
        if self.notify:
            self.notify(signum)


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name
