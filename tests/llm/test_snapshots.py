"""``--snapshot-minutes``: the exported model every few minutes of a run, for a held-out curve
scored afterwards. A snapshot taken at step k is the model a run of k steps exports, bit for bit."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
from hyperscalees.engine import make_config, run  # noqa: E402
from hyperscalees.engine.snapshots import Snapshots, read_snapshots  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py
ARITH = {"task": "arithmetic", "prompts": 2, "max_new_tokens": 6, "eval_prompts": 2}
EVERY_STEP = 1e-9  # minutes: every step is past the next mark


def config(folder, out, reward, steps, snapshot_minutes=0.0, options=None):
    return make_config("llm", es={"population": 8, "sigma": 0.05, "lr": 0.05},
                       engine={"steps": steps, "out": str(out), "eval_every": 100, "json": True, "chunk": 4,
                               "snapshot_minutes": snapshot_minutes},
                       options={"model": folder, "reward": reward, **ARITH, **(options or {})})


@pytest.mark.parametrize("options", [{}, {"subspace": 8}], ids=["full", "subspace"])
def test_a_snapshot_is_the_model_a_shorter_run_exports(options, folder, variety, tmp_path, no_plot):
    from transformers import AutoModelForCausalLM
    long = run(config(folder, tmp_path / "long", variety, 3, EVERY_STEP, options))
    snaps = read_snapshots(long["paths"]["out"])
    assert [s["step"] for s in snaps] == [1, 2, 3]
    assert all(a["time"] < b["time"] for a, b in zip(snaps, snaps[1:]))
    short = run(config(folder, tmp_path / "short", variety, 2, 0.0, options))
    load = lambda path: AutoModelForCausalLM.from_pretrained(path, local_files_only=True).state_dict()  # noqa: E731
    at2, ref, end = load(snaps[1]["path"]["export"]), load(short["paths"]["export"]), load(long["paths"]["export"])
    assert set(at2) == set(ref) and all(torch.equal(at2[k], ref[k]) for k in ref)
    assert any(not torch.equal(at2[k], end[k]) for k in ref)  # step 3 moved it: the snapshots differ
    assert not (tmp_path / "short" / "snapshots").exists()  # off by default


def test_snapshots_are_refused_without_a_directory_or_an_export(tmp_path):
    with pytest.raises(ValueError, match="needs a run directory"):
        run(make_config("xor", engine={"steps": 1, "snapshot_minutes": 1.0, "json": True}))
    with pytest.raises(ValueError, match="exports nothing to snapshot"):
        run(make_config("xor", engine={"steps": 1, "snapshot_minutes": 1.0, "json": True,
                                       "out": str(tmp_path / "x")}))
    with pytest.raises(ValueError, match="snapshot_minutes must be a finite number >= 0, got -1"):
        make_config("xor", engine={"snapshot_minutes": -1.0})


class Exporting:
    def export(self, model, directory):
        directory.mkdir(parents=True)
        (directory / "w.txt").write_text(str(model))
        return {"export": str(directory / "w.txt")}


def test_a_slow_step_skips_marks_instead_of_bunching_them(tmp_path):
    s = Snapshots(10.0)
    assert not s.due(9.9) and s.due(10.0)
    s.write(Exporting(), "a", tmp_path, 4, 35.0)  # a slow step: marks 10, 20 and 30 passed at once
    assert not s.due(39.9) and s.due(40.0)
    s.write(Exporting(), "b", tmp_path, 5, 40.5)
    snaps = read_snapshots(tmp_path)
    assert [(e["step"], e["time"]) for e in snaps] == [(4, 35.0), (5, 40.5)]
    assert [Path(e["path"]["export"]).read_text() for e in snaps] == ["a", "b"]  # relative paths, read back absolute
    with open(tmp_path / "snapshots" / "index.jsonl", "a") as f:
        f.write('{"step": 6, "ti')  # a line a kill cut short
    assert len(read_snapshots(tmp_path)) == 2
    with pytest.raises(ValueError, match="must be > 0 seconds"):
        Snapshots(0.0)
