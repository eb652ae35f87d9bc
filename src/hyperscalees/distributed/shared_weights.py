"""One copy of a group's trained weights on its node, shared by its workers: each replays one part of an update.

Why: every replica replays the whole update each step (regenerates every member's noise, forms (A⊙f)Bᵀ for
every matrix), a cost that does not shrink as workers are added; ``bench scale`` finds it is what caps
SmolLM2-135M at a thousand CPU cores. The k workers of a group (``RayConfig(group_size=k, shared_replay=True)``,
all on one node) instead map their trainable parameters from one file in shared memory. Worker j replays only
part j (:func:`partition`: whole parameters, balanced by size) and marks its part done; a worker evaluates step
s only once every part has reached s. A node then replays each update once, split over its k cores, and holds
one copy of the trained weights instead of k. The bits are a whole replay's: a parameter's step depends on
its own noise and its own optimizer state (``AbstractUpdateRule.by_parameter``), and each part is moved by the
same code as in a whole update.

The file: a header of k int64 marks (the step each part has reached), read and written with pread/pwrite under
an ``flock`` (the lock orders a mark after the weights it announces, for the reader too), then the parameters,
each 64-byte aligned. It lives in /dev/shm (memory) where there is one, named after the process that made it, and
that process removes it (:func:`remove`); one left by a process that died is removed by the next :func:`create`.
"""
from __future__ import annotations

import fcntl
import glob
import os
import tempfile
import time
import uuid
from dataclasses import dataclass

import torch

PREFIX = "hyperscalees-weights-"
ALIGN = 64
POLL_S = 2e-4   # first pause between reads of the marks; doubles up to 5 ms (a replay takes milliseconds or more)


@dataclass(frozen=True)
class SharedSpec:
    """Where a group's shared weights are and how they are split: what each of its workers is started with."""
    path: str
    parts: int
    wait_s: float = 120.0   # how long a worker waits for the other parts before it calls itself drifted


def partition(sizes: dict[str, int], parts: int) -> list[list[str]]:
    """``sizes`` ({name: elements}) split into ``parts`` lists of about equal total size, the same in every
    process: largest first, each to the lightest part so far (ties: the lowest index), each list in the
    order of ``sizes``. A replay's cost per parameter grows with its elements, at a fixed population."""
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts!r}")
    load, owner = [0] * parts, {}
    for name in sorted(sizes, key=lambda n: -sizes[n]):  # a stable sort: equal sizes keep their order
        j = min(range(parts), key=lambda i: (load[i], i))
        owner[name], load[j] = j, load[j] + sizes[name]
    return [[n for n in sizes if owner[n] == j] for j in range(parts)]


def _layout(params: dict[str, torch.Tensor], parts: int) -> tuple[dict[str, int], int]:
    """(byte offset of each parameter, file size): the marks' header, then each parameter aligned."""
    offset, where = -(-8 * parts // ALIGN) * ALIGN, {}
    for name, p in params.items():
        where[name] = offset
        offset += -(-p.numel() * p.element_size() // ALIGN) * ALIGN
    return where, max(offset, ALIGN)


def shared_dir() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_orphans(directory: str) -> None:
    """Files left by processes of this machine that died before removing theirs."""
    for path in glob.glob(os.path.join(directory, PREFIX + "*")):
        pid = os.path.basename(path)[len(PREFIX):].split("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            remove(path)


def create(params: dict[str, torch.Tensor], parts: int, step: int, wait_s: float = 120.0) -> SharedSpec:
    """A new shared file holding ``params`` as they are, every part marked at ``step``; written whole
    under a temporary name first, so a worker never maps a half-written file."""
    directory = shared_dir()
    _remove_orphans(directory)
    path = os.path.join(directory, f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}")
    where, size = _layout(params, parts)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.truncate(size)
    flat = torch.from_file(tmp, shared=True, size=size, dtype=torch.uint8)
    for name, p in params.items():
        _view(flat, where[name], p).copy_(p.detach())
    del flat
    fd = os.open(tmp, os.O_RDWR)
    try:
        os.pwrite(fd, torch.full((parts,), step, dtype=torch.int64).numpy().tobytes(), 0)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return SharedSpec(path, parts, wait_s)


def remove(path: str) -> None:
    for p in (path, path + ".tmp"):
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass


def _view(flat: torch.Tensor, offset: int, like: torch.Tensor) -> torch.Tensor:
    return flat[offset:offset + like.numel() * like.element_size()].view(like.dtype).view(like.shape)


class SharedWeights:
    """A process's mapping of a group's shared file: ``params`` ({name: parameter}) are re-pointed at it
    (``p.data``), so the model, its optimizer and its noise see the shared values, and writes go there."""

    def __init__(self, spec: SharedSpec, params: dict[str, torch.nn.Parameter]):
        self.spec, self.names = spec, list(params)
        where, size = _layout(params, spec.parts)
        if not os.path.exists(spec.path):
            raise FileNotFoundError(f"the group's shared weights {spec.path} are gone (its coordinator stopped?)")
        if os.path.getsize(spec.path) != size:
            raise ValueError(f"{spec.path} holds {os.path.getsize(spec.path)} bytes, this model's trainable "
                             f"parameters in {spec.parts} parts need {size}: not this model's file")
        self._flat = torch.from_file(spec.path, shared=True, size=size, dtype=torch.uint8)
        with torch.no_grad():
            for name, p in params.items():
                p.data = _view(self._flat, where[name], p)
        self._fd = os.open(spec.path, os.O_RDWR)

    def steps(self) -> list[int]:
        """The step each part has reached."""
        fcntl.flock(self._fd, fcntl.LOCK_SH)
        try:
            raw = os.pread(self._fd, 8 * self.spec.parts, 0)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        return torch.frombuffer(bytearray(raw), dtype=torch.int64).tolist()

    def mark(self, part: int, step: int) -> None:
        """Part ``part`` of the weights is at ``step`` (call after writing it)."""
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            os.pwrite(self._fd, int(step).to_bytes(8, "little", signed=True), 8 * part)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def wait(self, step: int) -> str | None:
        """Wait until every part has reached ``step``; None then, or why not after ``spec.wait_s`` seconds."""
        deadline, pause = time.monotonic() + self.spec.wait_s, POLL_S
        while True:
            steps = self.steps()
            if min(steps) >= step:
                return None
            if time.monotonic() > deadline:
                behind = [j for j, s in enumerate(steps) if s < step]
                return (f"parts {behind} of the shared weights stayed at steps {[steps[j] for j in behind]} for "
                        f"{self.spec.wait_s:g} s, this worker is at step {step}")
            time.sleep(pause)
            pause = min(2 * pause, 5e-3)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
