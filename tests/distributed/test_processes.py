"""An interrupted start-up ends the processes it launched, and only those (what Ray's half-done init leaves)."""
import subprocess
import time
from pathlib import Path

import pytest

from hyperscalees.distributed.processes import descendants, ended_if_failed

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")

# a child that starts a grandchild, like ray.init starting a raylet that starts workers
PARENT = ["sh", "-c", "sleep 60 & wait"]
SLEEPER = ["sleep", "60"]


def alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped is dead)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(condition, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("timed out")


def test_a_failed_start_kills_what_it_launched_and_nothing_else():
    bystander = subprocess.Popen(SLEEPER)
    try:
        with pytest.raises(KeyboardInterrupt):
            with ended_if_failed():
                parent = subprocess.Popen(PARENT)
                (grandchild,) = wait_for(lambda: descendants(parent.pid))
                raise KeyboardInterrupt   # what the run's signal handler raises during Ray's start-up
        assert not alive(parent.pid) and not alive(grandchild)
        assert bystander.poll() is None and alive(bystander.pid)
        parent.wait()                 # already reaped: returns at once
    finally:
        bystander.kill()
        bystander.wait()


def test_a_start_that_succeeds_keeps_its_processes():
    with ended_if_failed():
        child = subprocess.Popen(SLEEPER)
    try:
        assert child.pid in descendants() and alive(child.pid)
    finally:
        child.kill()
        child.wait()
