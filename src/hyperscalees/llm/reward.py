"""Any user reward, made safe to train on: a per-call timeout, and failures scored worst, counted.

``SafeReward(fn, timeout=5.0, worst=-1.0)`` wraps ``reward(prompt, completion) -> float``. ``fn``
is a callable or a path: ``"package.module:function"`` (imported as usual) or
``"path/to/file.py:function"`` (the file run as a fresh module; a relative path is resolved
against the current directory when the wrapper is built). A path that cannot be loaded raises
:class:`RewardLoadError` naming it, when the wrapper is built.

What counts as a failure, scored ``worst`` and counted in ``counts`` (it never stops the run):

- the call raises (or returns something ``float()`` refuses): ``counts["errors"]``;
- the call runs past ``timeout`` seconds: ``counts["timeouts"]``;
- the value is NaN or infinite: ``counts["nonfinite"]``.

``counts["calls"]`` counts every call, ``last_error`` says what went wrong last and
``failures()`` sums the three kinds (``llm.RewardFitness`` reads it to tell a step in which every
call failed). ``worst``
should be at or below the reward's lowest value: -1.0 by default, under the 0.0 of a wrong answer
of the tasks here, so a completion that breaks the reward never beats one that does not.

**Isolation.** By default (``isolation="process"``) the reward runs in a worker process (a
plain ``python`` running ``_reward_worker.py``: no torch, no fork), started once and reused.
:meth:`batch` sends many pairs in one message and the worker answers each as it finishes, so a
fast reward costs tens of microseconds a call. A call past its timeout gets the worker killed
and a new one started for the remaining pairs. A callable is sent to the worker by pickle, so it
must be a module-level function (or any picklable callable), and the worker imports its module
and whatever that imports (a path to a small module starts fastest); a lambda or closure needs
``isolation="thread"``, where a hung call is abandoned (the thread cannot be killed and keeps
running in the background) and the next pairs run in a new thread.

**Pickling.** A ``SafeReward`` pickles as its path (or pickled callable) and settings, with its
counts; the copy starts its own worker on first use, so a Ray worker can rebuild it.
``llm.RewardFitness`` calls :meth:`batch` once per chunk when the reward has one.

A reward's own keyword arguments (``reward(prompt, completion, **fields)``: a JSONL row's other
columns, as TRL passes dataset columns) go with each pair: ``batch(prompts, completions, fields)``.
"""
from __future__ import annotations

import math
import os
import pickle
import queue
import subprocess
import sys
import threading
import weakref
from pathlib import Path
from typing import Callable, Sequence

from ._reward_worker import FORMS, RewardLoadError, load_function, score, split_spec

WORKER = Path(__file__).with_name("_reward_worker.py")
COUNTS = ("calls", "errors", "timeouts", "nonfinite")
_EOF = ("eof", None)


def _stop_process(proc: subprocess.Popen, reader: threading.Thread) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for pipe in (proc.stdin,):
        try:
            pipe.close()
        except OSError:
            pass
    reader.join(timeout=5.0)
    proc.stdout.close()


def _read_replies(stdout, replies: queue.SimpleQueue) -> None:
    """The reader thread: every reply of the worker into the queue, then an end marker."""
    try:
        while True:
            replies.put(pickle.load(stdout))
    except (EOFError, OSError, ValueError, pickle.UnpicklingError):
        replies.put(_EOF)


class _Runner:
    """What ``SafeReward`` talks to: ``submit(pairs)``, then one reply per pair from ``get``, in order
    (``None`` when none came within ``timeout``: the pair in flight has run past its time)."""
    queue: queue.SimpleQueue

    def get(self, timeout: float):
        try:
            return self.queue.get(timeout=timeout)
        except queue.Empty:
            return None


class _ProcessRunner(_Runner):
    """One worker process: send a batch, read one reply per pair from a queue."""

    def __init__(self, init: dict, load_timeout: float, what: str):
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.proc = subprocess.Popen([sys.executable, "-u", str(WORKER)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, close_fds=True)
        self.reader = threading.Thread(target=_read_replies, args=(self.proc.stdout, self.queue), daemon=True)
        self.reader.start()
        self._finalizer = weakref.finalize(self, _stop_process, self.proc, self.reader)
        if not self.send(init):
            self.close()
            raise RewardLoadError(f"the reward worker for {what} exited before loading it")
        reply = self.get(load_timeout)
        if reply is None or reply[0] != "ready":
            self.close()
            if reply is None:
                raise RewardLoadError(f"loading {what} took over {load_timeout:g} s")
            if reply[0] == "load_error":
                raise RewardLoadError(reply[1])
            raise RewardLoadError(f"the reward worker for {what} exited while loading it")

    def send(self, message) -> bool:
        try:
            pickle.dump(message, self.proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    def submit(self, pairs: list) -> bool:
        return self.send(("batch", pairs))

    def close(self) -> None:
        self._finalizer()


class _ThreadRunner(_Runner):
    """The same protocol in a daemon thread (a hung call is abandoned, not killed)."""

    def __init__(self, fn: Callable):
        self.fn, self.queue, self.abandoned = fn, queue.SimpleQueue(), False

    def _run(self, pairs: list) -> None:
        for prompt, completion, fields in pairs:
            if self.abandoned:
                return
            self.queue.put(score(self.fn, prompt, completion, fields))

    def submit(self, pairs: list) -> bool:
        threading.Thread(target=self._run, args=(pairs,), daemon=True).start()
        return True

    def close(self) -> None:
        self.abandoned = True


class SafeReward:
    """``reward(prompt, completion) -> float`` with a timeout; failures score ``worst`` and are counted."""

    def __init__(self, fn: Callable[[str, str], float] | str, timeout: float = 5.0, worst: float = -1.0,
                 isolation: str = "process", load_timeout: float = 60.0):
        for name, v in (("timeout", timeout), ("load_timeout", load_timeout)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf:
                raise ValueError(f"{name} must be a positive number of seconds, got {v!r}")
        if isinstance(worst, bool) or not isinstance(worst, (int, float)) or not math.isfinite(worst):
            raise ValueError(f"worst must be a finite number, got {worst!r}")
        if isolation not in ("process", "thread"):
            raise ValueError(f"isolation must be 'process' or 'thread', got {isolation!r}")
        self.timeout, self.worst, self.isolation, self.load_timeout = float(timeout), float(worst), isolation, \
            float(load_timeout)
        self.spec: str | None = None
        self.fn: Callable | None = None
        self._pickled: bytes | None = None
        if isinstance(fn, str):
            where, name, is_file = split_spec(fn)
            if is_file:
                path = Path(where).expanduser()
                if not path.is_file():
                    raise RewardLoadError(f"reward file {where!r} (from {fn!r}) does not exist")
                fn = f"{path.resolve()}:{name}"
            self.spec = fn
        elif callable(fn):
            self.fn = fn
            if isolation == "process":
                try:
                    self._pickled = pickle.dumps(fn)
                except Exception as e:
                    raise TypeError(f"the reward {fn!r} cannot be sent to a worker process ({type(e).__name__}: {e}); "
                                    "pass a module-level function, a 'module:function' path, or "
                                    "isolation='thread'") from None
        else:
            raise TypeError(f"the reward must be a callable or a path {FORMS}, got {type(fn).__name__}")
        self.counts = dict.fromkeys(COUNTS, 0)
        self.last_error: str | None = None
        self._setup()
        self._runner = self._start()  # a path that does not load fails here, not in the first step

    def _setup(self) -> None:
        self._lock = threading.Lock()
        self._runner = None
        self._started = False  # in this process: the first start raises, later restarts score worst

    @property
    def what(self) -> str:
        return repr(self.spec) if self.spec is not None else repr(self.fn)

    def _start(self):
        self._started = True
        if self.isolation == "thread":
            if self.fn is None:
                self.fn = load_function(self.spec)
            return _ThreadRunner(self.fn)
        init = {"sys_path": list(sys.path), "cwd": os.getcwd(), "spec": self.spec, "pickled": self._pickled}
        return _ProcessRunner(init, self.load_timeout, self.what)

    # -- calls -------------------------------------------------------------------------------
    def __call__(self, prompt: str, completion: str, **fields) -> float:
        """One pair's reward (``worst`` on a failure); ``fields`` reach the reward as keyword arguments."""
        return self.batch([prompt], [completion], [fields])[0]

    def batch(self, prompts: Sequence[str], completions: Sequence[str],
              fields: Sequence[dict] | None = None) -> list[float]:
        """Rewards of many pairs, one message to the worker; each pair has its own timeout.
        ``fields[i]`` (a dict, one per pair) are pair ``i``'s keyword arguments."""
        fields = [{}] * len(prompts) if fields is None else list(fields)
        if not len(prompts) == len(completions) == len(fields):
            raise ValueError(f"need one completion and one fields dict per prompt, got {len(prompts)} prompts, "
                             f"{len(completions)} completions and {len(fields)} fields")
        pairs = list(zip(prompts, completions, fields))
        scores: list[float] = []
        with self._lock:
            self.counts["calls"] += len(pairs)
            while len(scores) < len(pairs):
                if not self._ensure_runner(len(pairs) - len(scores), scores):
                    break
                self._collect(pairs, scores)
        return scores

    def failures(self) -> int:
        """Calls that scored ``worst``: errors, timeouts and non-finite values."""
        return self.counts["errors"] + self.counts["timeouts"] + self.counts["nonfinite"]

    def _ensure_runner(self, left: int, scores: list[float]) -> bool:
        """A live runner, restarting one if needed; on a failed restart the rest scores worst."""
        if not self._started:  # a copy rebuilt from a pickle: a reward that cannot load is an error
            self._runner = self._start()
        if self._runner is None:
            try:
                self._runner = self._start()
            except RewardLoadError as e:
                self.counts["errors"] += left
                self.last_error = f"restarting the reward failed: {e}"
                scores.extend([self.worst] * left)
                return False
        return True

    def _collect(self, pairs: list, scores: list[float]) -> None:
        """Send the pairs not scored yet and read their replies until all are in or the runner
        fails (then it is dropped, the pair it failed on scores worst, and the caller restarts)."""
        runner = self._runner
        if not runner.submit(pairs[len(scores):]):
            self._fail(scores, "errors", "the reward worker had exited")
            return
        while len(scores) < len(pairs):
            reply = runner.get(self.timeout)
            if reply is None:
                self._fail(scores, "timeouts", f"a call ran past the {self.timeout:g} s timeout")
                return
            kind, value = reply
            if kind == "eof":
                self._fail(scores, "errors", "the reward worker died during a call")
                return
            if kind == "error":
                self.counts["errors"] += 1
                self.last_error = value
                scores.append(self.worst)
            elif not math.isfinite(value):
                self.counts["nonfinite"] += 1
                self.last_error = f"the reward returned {value}"
                scores.append(self.worst)
            else:
                scores.append(value)

    def _fail(self, scores: list[float], kind: str, message: str) -> None:
        self.counts[kind] += 1
        self.last_error = message
        scores.append(self.worst)
        self._runner.close()
        self._runner = None

    # -- life cycle --------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the worker (a later call starts a new one)."""
        with self._lock:
            if self._runner is not None:
                self._runner.close()
                self._runner = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __getstate__(self):
        state = {k: v for k, v in self.__dict__.items() if k not in ("_lock", "_runner", "_started")}
        if self.spec is not None:
            state["fn"] = None  # rebuilt from the path
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._setup()

    def __repr__(self) -> str:
        return (f"SafeReward({self.what}, timeout={self.timeout:g}, worst={self.worst:g}, "
                f"isolation={self.isolation!r}, counts={self.counts})")
