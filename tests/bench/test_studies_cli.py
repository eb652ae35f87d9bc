"""The studies left `hyperscalees bench` for bench/: the installed CLI says where each went, and each
runs by path from a checkout with its own --help."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import hyperscalees
from hyperscalees.cli import bench
from hyperscalees.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(bench.MOVED))
def test_a_moved_study_is_named_with_its_command_and_exits_2(name, capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", name, "--model", "m", "--seeds", "100"])   # its own flags: no "unrecognized" error first
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and bench.MOVED[name] in err
    script = bench.MOVED[name].split()[-1]
    assert (ROOT / script).is_file() and name not in bench.BENCHMARKS


def test_every_study_runs_by_path_with_its_own_help():
    """`python bench/STUDY.py --help` from another directory: the one documented command of each."""
    env = {**os.environ, "PYTHONPATH": str(Path(hyperscalees.__file__).resolve().parents[1])}
    for script in ("llm_vs_grpo.py", "llm_signal.py", "rl_vs_ppo.py", "mup_transfer.py", "grpo_run.py"):
        p = subprocess.run([sys.executable, str(ROOT / "bench" / script), "--help"], capture_output=True, text=True,
                           env=env, cwd=str(ROOT.parent), timeout=120)
        assert p.returncode == 0 and f"python bench/{script}" in p.stdout, (script, p.stderr[-500:])
