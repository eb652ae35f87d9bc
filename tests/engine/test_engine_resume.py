"""A run stopped and resumed from its checkpoint ends bit-identical to an uninterrupted one."""
import json

import pytest
import torch

from hyperscalees.distributed import LocalBackend

from hyperscalees.engine import load_checkpoint, load_run, make_config, metrics as metrics_mod, read_rows, run


def params(directory):
    return load_run(directory)[2].state_dict()


def assert_bitwise_equal(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.mark.parametrize("task,strategy", [("xor", "eggroll"), ("predict2", "eggroll"), ("predict2", "open_es")])
def test_three_plus_three_equals_six(tmp_path, task, strategy):
    es = {"population": 64, "seed": 5}
    run(make_config(task, strategy, es=es, engine={"steps": 6, "out": str(tmp_path / "full")}), LocalBackend)
    run(make_config(task, strategy, es=es, engine={"steps": 3, "out": str(tmp_path / "part")}), LocalBackend)
    summary = run(make_config(task, strategy, es=es, engine={"steps": 6, "resume": str(tmp_path / "part")}), LocalBackend)
    assert summary["steps"] == 6
    assert_bitwise_equal(params(tmp_path / "full"), params(tmp_path / "part"))
    full, part = load_checkpoint(tmp_path / "full"), load_checkpoint(tmp_path / "part")
    for a, b in zip(full.strategy["rule"]["optimizer"]["optimizers"], part.strategy["rule"]["optimizer"]["optimizers"]):
        for k in a["state"]:
            for name, v in a["state"][k].items():
                assert torch.equal(v, b["state"][k][name]), name
    # the resumed run's metrics continue the first part's: one row per step, same numbers
    rows_full = read_rows(tmp_path / "full" / "metrics.jsonl")
    rows_part = read_rows(tmp_path / "part" / "metrics.jsonl")
    assert [r["step"] for r in rows_part] == [1, 2, 3, 4, 5, 6]
    assert [r["fitness_mean"] for r in rows_part] == [r["fitness_mean"] for r in rows_full]


def test_resume_after_crash_drops_rows_past_the_checkpoint(tmp_path, monkeypatch):
    """Crash after step 5 with checkpoints every 2: resume from step 4 and still match a clean run."""
    es = {"population": 32, "seed": 1}
    run(make_config("predict2", es=es, engine={"steps": 6, "out": str(tmp_path / "clean")}), LocalBackend)

    real_log = metrics_mod.MetricsLogger.log

    def crashing_log(self, row):
        real_log(self, row)
        if row["step"] == 5:
            raise RuntimeError("simulated crash")

    monkeypatch.setattr(metrics_mod.MetricsLogger, "log", crashing_log)
    crashed = tmp_path / "crashed"
    with pytest.raises(RuntimeError, match="simulated crash"):
        run(make_config("predict2", es=es, engine={"steps": 6, "out": str(crashed), "checkpoint_every": 2}), LocalBackend)
    monkeypatch.setattr(metrics_mod.MetricsLogger, "log", real_log)
    assert json.loads((crashed / "checkpoint.json").read_text())["step"] == 4
    assert len(read_rows(crashed / "metrics.jsonl")) == 5
    run(make_config("predict2", es=es, engine={"steps": 6, "resume": str(crashed), "checkpoint_every": 2}), LocalBackend)
    assert_bitwise_equal(params(tmp_path / "clean"), params(crashed))
    assert [r["step"] for r in read_rows(crashed / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]
    csv_lines = (crashed / "metrics.csv").read_text().splitlines()
    assert len(csv_lines) == 1 + 6


def test_resume_refuses_a_different_run(tmp_path):
    run(make_config("xor", es={"population": 16}, engine={"steps": 2, "out": str(tmp_path)}), LocalBackend)
    with pytest.raises(ValueError, match=r"es\.sigma.*0\.1.*0\.2"):
        run(make_config("xor", es={"population": 16, "sigma": 0.2}, engine={"steps": 4, "resume": str(tmp_path)}), LocalBackend)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        run(make_config("xor", engine={"steps": 4, "resume": str(tmp_path / "missing")}), LocalBackend)


def test_resume_at_the_target_step_does_nothing(tmp_path):
    run(make_config("xor", es={"population": 16}, engine={"steps": 3, "out": str(tmp_path)}), LocalBackend)
    before = params(tmp_path)
    summary = run(make_config("xor", es={"population": 16}, engine={"steps": 3, "resume": str(tmp_path)}), LocalBackend)
    assert summary["steps"] == 3 and "mse" in summary["metrics"]
    assert_bitwise_equal(before, params(tmp_path))
