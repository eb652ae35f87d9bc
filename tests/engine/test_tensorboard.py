"""`train --tensorboard DIR`: the metric rows of metrics.jsonl, as TensorBoard scalars."""
import builtins
import json

import pytest

from hyperscalees.cli.main import main
from hyperscalees.engine.tensorboard import MISSING, TensorBoardSink


def test_train_writes_each_step_row_as_scalars(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    board, out = tmp_path / "tb", tmp_path / "run"
    assert main(["train", "xor", "--steps", "3", "--population", "8", "--json",
                 "--out", str(out), "--tensorboard", str(board)]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    events = EventAccumulator(str(board))
    events.Reload()
    logged = events.Tags()["scalars"]
    assert "fitness_mean" in logged and "time" not in logged and "step" not in logged
    for name in ("fitness_mean", "lr"):
        scalars = events.Scalars(name)
        assert [s.step for s in scalars] == [r["step"] for r in rows] == [1, 2, 3]
        assert [s.value for s in scalars] == pytest.approx([r[name] for r in rows])


def test_sink_skips_what_is_not_a_finite_number(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with TensorBoardSink(tmp_path) as sink:
        sink.log({"step": 1, "loss": 0.5, "nonfinite": 0, "bad": float("nan"), "note": "x", "solved": True,
                  "missing": None, "time": 1.0})
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert sorted(events.Tags()["scalars"]) == ["loss", "nonfinite"]


def test_missing_package_is_a_one_line_error(monkeypatch, tmp_path):
    real_import = builtins.__import__

    def no_tensorboard(name, *args, **kwargs):
        if name.startswith("torch.utils.tensorboard") or name.startswith("tensorboard"):
            raise ImportError("No module named 'tensorboard'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tensorboard)
    with pytest.raises(RuntimeError) as e:
        TensorBoardSink(tmp_path)
    assert str(e.value) == MISSING and "\n" not in MISSING
