"""The coordinator's bookkeeping for one step: which chunk goes to which worker, and when it is done.

Pure Python and a clock, no Ray, so every rule is tested directly (and measured by
``hyperscalees bench distributed``). Workers *pull*: whoever is free asks
:meth:`ChunkQueue.assign`, and gets

1. the first chunk nobody has started (in member order), else
2. a straggler: the chunk that has run longest past the straggler timeout and that this
   worker is not already running. It is now running twice; the first result wins.

Results go to :meth:`complete` (True: accepted; False: a duplicate, counted and dropped),
failures (a dead worker, a message the wire decoder refused) to :meth:`fail`, which puts
the chunk back at the front of the queue unless another copy is still running. A chunk that
fails ``max_failures`` times in one step raises :class:`ChunkFailedError`: a fault that
repeats (a task that returns the wrong shape, a worker build that always sends garbage) ends
the run with its reason instead of looping forever.

The straggler timeout is ``straggler_timeout`` seconds when given, else ``factor`` x the
median of recent chunk times (never below ``floor``); before any chunk has finished it is
``initial`` seconds. Chunk times carry over from step to step (:class:`ChunkTimes`).
"""
from __future__ import annotations

import statistics
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Hashable


class ChunkFailedError(RuntimeError):
    """One chunk failed too often within a step."""


@dataclass(frozen=True)
class Chunk:
    index: int
    lo: int    # first member
    hi: int    # one past the last member

    @property
    def count(self) -> int:
        return self.hi - self.lo


def split(population: int, chunk: int) -> list[Chunk]:
    """Members [0, population) in chunks of ``chunk`` (the last may be shorter)."""
    if population < 1 or chunk < 1:
        raise ValueError(f"population and chunk must be >= 1, got {population} and {chunk}")
    return [Chunk(i, lo, min(population, lo + chunk)) for i, lo in enumerate(range(0, population, chunk))]


@dataclass
class ChunkTimes:
    """Recent chunk durations (seconds) and the straggler timeout they imply."""

    straggler_timeout: float | None = None  # fixed timeout; None: derived from the median
    factor: float = 3.0
    floor: float = 0.05
    initial: float = 30.0
    window: int = 64
    recent: deque = field(default_factory=deque)

    def __post_init__(self):
        if self.straggler_timeout is not None and not self.straggler_timeout > 0:
            raise ValueError(f"straggler_timeout must be > 0 seconds, got {self.straggler_timeout!r}")
        if not self.factor > 1:
            raise ValueError(f"straggler factor must be > 1, got {self.factor!r}")

    def add(self, seconds: float) -> None:
        self.recent.append(seconds)
        if len(self.recent) > self.window:
            self.recent.popleft()

    @property
    def median(self) -> float | None:
        return statistics.median(self.recent) if self.recent else None

    @property
    def timeout(self) -> float:
        if self.straggler_timeout is not None:
            return self.straggler_timeout
        m = self.median
        return self.initial if m is None else max(self.floor, self.factor * m)


@dataclass
class Counters:
    """What happened, summed over a run (reported by the backend)."""
    assigned: int = 0
    reissued: int = 0      # straggler copies handed out
    duplicates: int = 0    # results that arrived after the first one
    failed: int = 0        # dead workers, refused messages
    requeued: int = 0


class ChunkQueue:
    """One step's chunks and who runs them; ``results()`` once :attr:`done`."""

    def __init__(self, step: int, chunks: list[Chunk], times: ChunkTimes | None = None,
                 counters: Counters | None = None, clock: Callable[[], float] = time.monotonic,
                 max_failures: int = 10):
        self.step = step
        self.chunks = list(chunks)
        self.times = times or ChunkTimes()
        self.counters = counters or Counters()
        self.clock = clock
        self.pending: deque[int] = deque(c.index for c in self.chunks)   # never started, or put back
        self.running: dict[int, dict[Hashable, float]] = {}             # chunk -> {worker: start time}
        self.values: dict[int, object] = {}
        self.failures: dict[int, int] = {}
        self.max_failures = max_failures

    @property
    def done(self) -> bool:
        return len(self.values) == len(self.chunks)

    def assign(self, worker: Hashable) -> Chunk | None:
        """The chunk ``worker`` should run next, or None (nothing pending, no straggler yet)."""
        now = self.clock()
        while self.pending:
            i = self.pending.popleft()
            if i not in self.values:
                return self._start(i, worker, now)
        timeout = self.times.timeout
        late = [(min(runs.values()), i) for i, runs in self.running.items()
                if worker not in runs and i not in self.values and runs and now - min(runs.values()) >= timeout]
        if not late:
            return None
        self.counters.reissued += 1
        return self._start(min(late)[1], worker, now)  # the longest-running one (ties: member order)

    def owns(self, chunk: Chunk) -> bool:
        """Is ``chunk`` one of this queue's? (A group's coordinator runs several queues a step, one per
        chunk the driver hands it: a straggler's copy may come back from an earlier one.)"""
        return 0 <= chunk.index < len(self.chunks) and self.chunks[chunk.index] == chunk

    def until_late(self) -> float | None:
        """Seconds until the longest-running chunk becomes a straggler an idle worker may copy (0 once
        it is), None while nothing runs: how long a coordinator with an idle worker may sleep."""
        starts = [min(runs.values()) for i, runs in self.running.items() if runs and i not in self.values]
        if not starts:
            return None
        return max(0.0, min(starts) + self.times.timeout - self.clock())

    def _start(self, i: int, worker: Hashable, now: float) -> Chunk:
        self.running.setdefault(i, {})[worker] = now
        self.counters.assigned += 1
        return self.chunks[i]

    def complete(self, index: int, worker: Hashable, values) -> bool:
        """Record a result; False (and counted) when another copy already won."""
        runs = self.running.get(index, {})
        started = runs.pop(worker, None)
        if index in self.values:
            self.counters.duplicates += 1
            return False
        if started is not None:
            self.times.add(self.clock() - started)
        self.values[index] = values
        self.running.pop(index, None)
        return True

    def fail(self, index: int, worker: Hashable, why: str = "") -> None:
        """``worker``'s run of chunk ``index`` is lost: run it again unless a copy is still out."""
        runs = self.running.get(index, {})
        runs.pop(worker, None)
        self.counters.failed += 1
        self.failures[index] = self.failures.get(index, 0) + 1
        if self.failures[index] >= self.max_failures and index not in self.values:
            c = self.chunks[index]
            raise ChunkFailedError(f"members [{c.lo}, {c.hi}) of step {self.step} failed {self.failures[index]} "
                                   f"times; last: {why or 'unknown'}")
        if index in self.values or runs:
            return
        self.running.pop(index, None)
        self.pending.appendleft(index)
        self.counters.requeued += 1

    def forget(self, worker: Hashable) -> list[int]:
        """A worker is gone: every chunk it was running is failed; returns their indices."""
        lost = [i for i, runs in self.running.items() if worker in runs]
        for i in lost:
            self.fail(i, worker)
        return lost

    def results(self) -> list:
        """The chunks' values in member order."""
        if not self.done:
            raise RuntimeError(f"step {self.step}: {len(self.chunks) - len(self.values)} chunks still missing")
        return [self.values[c.index] for c in self.chunks]
