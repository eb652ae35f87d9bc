"""The loop: metrics files, plot, time budget, chunking, config validation."""
import csv
import json
import sys

import pytest
import torch

from hyperscalees.distributed import LocalBackend

from hyperscalees.engine import EngineConfig, TrainConfig, build, make_config, read_rows, run
from hyperscalees.strategies import ESConfig


def test_metrics_files_have_one_row_per_step_and_a_png(tmp_path):
    engine = {"steps": 7, "eval_every": 3, "out": str(tmp_path)}
    summary = run(make_config("poly", es={"population": 32}, engine=engine), LocalBackend)
    rows = read_rows(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, 8))
    assert [r["step"] for r in rows if "mse" in r] == [3, 6, 7]  # every 3 steps and at the end
    with open(tmp_path / "metrics.csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 7 and table[2]["mse"] and not table[0]["mse"]
    assert float(table[-1]["mse"]) == pytest.approx(summary["metrics"]["mse"])
    png = tmp_path / "curve.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert summary["paths"]["plot"] == str(png) and summary["notes"] == []


def test_eval_at_start_scores_the_untrained_model_as_step_0(tmp_path):
    """Off by default (the summary's "before" is None); on, the starting weights are scored before the
    first step, logged as a step-0 row (CSV too, its step columns empty) and returned as "before"."""
    cfg = lambda out, **e: make_config("poly", es={"population": 32}, engine={"steps": 4, "eval_every": 2,
                                                                              "out": str(out), **e})
    plain = run(cfg(tmp_path / "plain"), LocalBackend)
    assert plain["before"] is None and read_rows(tmp_path / "plain" / "metrics.jsonl")[0]["step"] == 1
    summary = run(cfg(tmp_path / "start", eval_at_start=True), LocalBackend)
    rows = read_rows(tmp_path / "start" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4] and set(rows[0]) == {"step", "time", "mse"}
    assert summary["before"] == {"mse": rows[0]["mse"]} and rows[0]["mse"] > summary["metrics"]["mse"]  # it learnt
    with open(tmp_path / "start" / "metrics.csv") as f:
        first = next(csv.DictReader(f))
    assert first["step"] == "0" and first["mse"] and not first["fitness_mean"]
    assert [r.get("mse") for r in rows[1:]] == [r.get("mse") for r in read_rows(tmp_path / "plain" / "metrics.jsonl")]


def test_missing_matplotlib_skips_the_plot_with_a_message(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` raise ImportError
    summary = run(make_config("xor", es={"population": 16}, engine={"steps": 2, "out": str(tmp_path)}), LocalBackend)
    assert summary["paths"]["plot"] is None and not (tmp_path / "curve.png").exists()
    assert any("matplotlib is not installed" in n for n in summary["notes"])


def test_time_budget_stops_early():
    summary = run(make_config("xor", es={"population": 16}, engine={"steps": 50, "time_budget": 1e-6}), LocalBackend)
    assert summary["steps"] == 1 and summary["stopped"] == "time_budget"
    assert "mse" in summary["metrics"]


def test_chunked_evaluation_matches_whole_population():
    a = run(make_config("xor", es={"population": 64, "seed": 2}, engine={"steps": 3}), LocalBackend)
    b = run(make_config("xor", es={"population": 64, "seed": 2}, engine={"steps": 3, "chunk": 16}), LocalBackend)
    assert a["metrics"]["mse"] == pytest.approx(b["metrics"]["mse"], rel=1e-4)


def test_summary_is_json_serialisable_and_complete():
    s = run(make_config("xor", es={"population": 16}, engine={"steps": 2}), LocalBackend)
    back = json.loads(json.dumps(s))
    assert {"task", "steps", "metrics", "wall_time", "paths", "solved", "stopped"} <= set(back)
    assert back["steps"] == 2 and back["paths"] == {}


def test_device_reaches_model_and_data():
    cfg = make_config("digits", es={"population": 16}, engine={"device": "cpu"})
    task, model, _ = build(cfg)
    assert all(p.device == torch.device("cpu") for p in model.parameters())
    assert task.x_train.device == torch.device("cpu")


def test_make_config_uses_task_defaults_under_overrides():
    cfg = make_config("digits", es={"lr": 0.5})
    from hyperscalees.tasks import DigitsTask
    assert cfg.es.population == DigitsTask.defaults["population"] and cfg.es.lr == 0.5
    assert cfg.engine.steps == DigitsTask.defaults["steps"]
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("kwargs,match", [
    ({"task": "nope"}, "'nope'"),
    ({"strategy": "cma"}, "'cma'"),
    ({"es": {"optimizer": "lbfgs"}}, "'lbfgs'"),
    ({"es": {"sigma": -1.0}}, "sigma"),
    ({"es": {"nonsense": 1}}, "nonsense"),
    ({"engine": {"chunk": 3}}, "chunk"),
    ({"engine": {"checkpoint_every": 2}}, "--out"),
    ({"options": {"hidden_size": 3}}, "hidden_size"),
])
def test_bad_configs_name_the_bad_value(kwargs, match):
    args = {"task": "xor", **kwargs}
    with pytest.raises(ValueError, match=match):
        make_config(args.pop("task"), **args)


def test_dataclasses_are_frozen():
    cfg = make_config("xor")
    with pytest.raises(AttributeError):
        cfg.engine.steps = 3
    assert isinstance(cfg.es, ESConfig) and isinstance(cfg.engine, EngineConfig)
