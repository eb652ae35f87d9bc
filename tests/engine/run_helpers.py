"""Run the CLI in a real child process, and compare two run directories bit for bit."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from hyperscalees.engine import load_checkpoint, read_rows
from hyperscalees.engine.files import TMP_PATTERN

# The child dies by SIGKILL just before its kill_at-th os.replace/os.fsync/os.unlink inside the
# second checkpoint save (so a committed one exists): every step of the commit protocol is one
# of those calls. Nothing is mocked: the real save runs until the process is killed.
KILL_CHILD = r"""
import os, signal, sys
kill_at, argv = int(sys.argv[1]), sys.argv[2:]
import hyperscalees.engine.loop as loop
saves, calls = [0], [0]

def counted(real):
    def call(*args, **kwargs):
        if saves[0] >= 2:
            calls[0] += 1
            if calls[0] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    return call

os.replace, os.fsync, os.unlink = counted(os.replace), counted(os.fsync), counted(os.unlink)
real_save = loop.save_checkpoint

def save(*args, **kwargs):
    saves[0] += 1
    return real_save(*args, **kwargs)

loop.save_checkpoint = save
from hyperscalees.cli.main import main
sys.exit(main(argv))
"""


def child_env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def run_killed(kill_at: int, argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", KILL_CHILD, str(kill_at), *argv], capture_output=True, text=True,
                          env=child_env(), timeout=120)


def start_cli(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "hyperscalees", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=child_env())


def wait_for_rows(directory: Path, n: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    """Block until ``metrics.jsonl`` in ``directory`` has at least ``n`` complete rows."""
    path, t0 = Path(directory) / "metrics.jsonl", time.monotonic()
    while time.monotonic() - t0 < timeout:
        if path.exists() and path.read_text().count("\n") >= n:
            return
        if proc.poll() is not None:
            raise AssertionError(f"child exited early ({proc.returncode}): {proc.stderr.read()}")
        time.sleep(0.01)
    raise AssertionError(f"no {n} metrics rows in {timeout}s")


def assert_same(a, b, where: str = "state") -> None:
    """Nested dicts/lists of tensors and plain values are identical (tensors bit for bit).

    Walks whatever structure it is given, so it does not depend on the strategy's keys.
    """
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def assert_same_run(a: Path, b: Path) -> None:
    """Model, strategy state, task state and per-step metrics are identical.

    Wall time differs, and an interrupted run also has held-out metrics at the step it
    stopped on; every value both rows hold must be equal.
    """
    ca, cb = load_checkpoint(a), load_checkpoint(b)
    assert ca.step == cb.step
    assert_same(ca.model, cb.model, "model")
    assert_same(ca.strategy, cb.strategy, "strategy")
    assert_same(ca.task, cb.task, "task")
    rows_a, rows_b = read_rows(Path(a) / "metrics.jsonl"), read_rows(Path(b) / "metrics.jsonl")
    assert [r["step"] for r in rows_a] == [r["step"] for r in rows_b] == list(range(1, ca.step + 1))
    for ra, rb in zip(rows_a, rows_b):
        assert "fitness_mean" in ra and "fitness_mean" in rb
        shared = ra.keys() & rb.keys() - {"time"}
        assert {k: ra[k] for k in shared} == {k: rb[k] for k in shared}, ra["step"]


def leftovers(directory: Path) -> list[str]:
    """Temporary files an interrupted save could leave."""
    return sorted(p.name for p in Path(directory).iterdir() if TMP_PATTERN.match(p.name))
