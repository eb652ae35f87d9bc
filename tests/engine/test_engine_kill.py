"""SIGKILL at each step of a checkpoint save: the run always resumes, bit-identical to an uninterrupted one.

A real child process runs ``hyperscalees train`` and is killed with SIGKILL just before one of
the file-system calls of its second save (see ``run_helpers.KILL_CHILD``). The save at step 4
makes these calls, in order; the rename of ``checkpoint.json`` (call 9) is the commit:
  1 fsync model tmp    2 rename model     3 fsync strategy tmp   4 rename strategy
  5 fsync task tmp     6 rename task      7 fsync directory      8 fsync pointer tmp
  9 rename pointer    10 fsync directory  11-13 delete the step-2 files
bench/kill_resume.py kills at random instants instead, many more times.
"""
import signal

import pytest
from run_helpers import assert_same_run, leftovers, run_killed

from hyperscalees.distributed import LocalBackend
from hyperscalees.engine import load_checkpoint, make_config, run
from hyperscalees.engine.checkpoint import STEP_FILE

pytestmark = pytest.mark.usefixtures("no_plot")

ES = {"population": 16, "seed": 3}
FLAGS = ["train", "xor", "--population", "16", "--seed", "3", "--checkpoint-every", "2", "--steps", "6"]
COMMIT = 9


def config(**engine):
    return make_config("xor", es=ES, engine={"steps": 6, "checkpoint_every": 2, **engine})


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("uninterrupted")
    run(config(out=str(out)), LocalBackend)
    return out


@pytest.mark.parametrize("kill_at", [2, 4, 7, 9, 10, 12])
def test_a_kill_inside_a_save_leaves_the_last_commit_and_resume_is_exact(tmp_path, reference, kill_at):
    out = tmp_path / "run"
    res = run_killed(kill_at, [*FLAGS, "--out", str(out), "--json"])
    assert res.returncode == -signal.SIGKILL, res.stderr
    assert load_checkpoint(out).step == (2 if kill_at <= COMMIT else 4)
    summary = run(config(resume=str(out)), LocalBackend)
    assert summary["steps"] == 6
    assert_same_run(reference, out)
    assert leftovers(out) == []
    assert sorted(p.name for p in out.iterdir() if STEP_FILE.match(p.name)) == \
        ["model-000006.safetensors", "strategy-000006.safetensors", "task-000006.safetensors"]
