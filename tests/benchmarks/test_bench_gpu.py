"""Smoke test of ``hyperscalees bench gpu --quick`` on CPU: structure and ratio definitions, never timings."""
from __future__ import annotations

import argparse
import json
import math

import pytest

from hyperscalees.benchmarks import gpu
from hyperscalees.benchmarks.base import Report
from hyperscalees.cli import bench

HEADLINE = ("step_over_inference_worst", "forward_over_inference_worst", "step_over_floor_worst", "peak_mem_ratio",
            "ops_per_step_max")


@pytest.fixture(scope="module")
def report() -> dict:
    return json.loads(gpu.run(quick=True, device="cpu", log=lambda *_: None).to_json())


def test_every_quick_config_is_reported(report):
    cases = gpu.plan(quick=True).cases
    assert {c.kind for c in cases} == {"linear", "lm"}
    assert [(r["kind"], r["width"], r["tokens"], r["population"]) for r in report["configs"]] == \
        [(c.kind, c.width, c.tokens, c.population) for c in cases]
    assert len(report["rows"]) == len(cases)
    assert all(r["tokens"] * r["population"] == 512 and r["population"] % 2 == 0 for r in report["configs"])


def test_headline_keys_are_finite_and_positive(report):
    for key in HEADLINE:
        assert isinstance(report[key], (int, float)) and math.isfinite(report[key]) and report[key] > 0, key
    assert report["syncs_per_step_max"] >= 0 and report["launches_per_step_max"] is None  # CUDA only
    assert (report["device"], report["dtype"]) == ("cpu", "fp32") and report["torch"]


def test_ratios_follow_their_definitions(report):
    approx = lambda v: pytest.approx(v, rel=1e-9)
    for r in report["configs"]:
        assert r["floor_s"] == approx(r["inference_s"] + r["update_gemm_s"] + r["adam_s"])
        assert r["step_over_inference"] == approx(r["inference_s"] / r["step_s"])
        assert r["forward_over_inference"] == approx(r["inference_s"] / r["forward_s"])
        assert r["step_over_floor"] == approx(r["step_s"] / r["floor_s"]) and r["step_over_floor"] > 0
        assert r["peak_mem_ratio"] == approx(r["step_peak_mib"] / r["inference_peak_mib"]) and r["peak_mem_ratio"] > 0
        assert r["ops_per_step"] > 0 and r["syncs_per_step"] == sum(r["sync_ops"].values())
        assert r["launches_per_step"] is None  # CUDA only
        assert r["graphed_step_over_floor"] == approx(r["graphed_step_s"] / r["floor_s"])
        assert 0 < r["kernel_ops_per_step"] < r["ops_per_step"] and r["syncs_per_step"] == 0  # a step never waits
        assert all(r["timings"][k]["median"] == r[f"{k}_s"] for k in gpu.TIMED)
    worst = lambda f, k: f(r[k] for r in report["configs"])
    assert report["step_over_inference_worst"] == worst(min, "step_over_inference")
    assert report["forward_over_inference_worst"] == worst(min, "forward_over_inference")
    assert report["step_over_floor_worst"] == worst(max, "step_over_floor")
    assert report["peak_mem_ratio"] == worst(max, "peak_mem_ratio")
    assert report["ops_per_step_max"] == worst(max, "ops_per_step")
    assert report["graphed_step_over_floor_worst"] == worst(max, "graphed_step_over_floor")
    assert report["graphs"] == ["CUDA graphs need a CUDA device; the parameters are on cpu"]  # eager, and says why


def test_update_gemm_takes_the_update_shapes_of_every_parameter():
    s = gpu.build(gpu.Case("lm", 16, 4, 8, layers=1, vocab=32), "cpu", gpu.DTYPES["fp32"])
    es = gpu.facade(s)
    assert set(gpu.trainable(es)) == set(es.strategy.trainable) and es.strategy.lowrank
    gpu.update_gemm(es, pairs=4)()
    gpu.adam_step(list(gpu.trainable(es).values()))()


def _parser():
    parser = argparse.ArgumentParser()
    bench.register(parser.add_subparsers(dest="cmd"))
    return parser


def test_cli_passes_gpu_flags_and_refuses_them_elsewhere(capsys, monkeypatch):
    seen = {}

    def fake(**kw):
        seen.update(kw)
        return Report("gpu", "q?", ["config"], rows=[["x"]], summary={"step_over_inference_worst": 0.5})
    monkeypatch.setattr(gpu, "run", fake)
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    args = _parser().parse_args(["bench", "gpu", "--quick", "--json", "--dtype", "fp32", "--repeats", "2"])
    assert args.func(args) == 0
    assert (seen["quick"], seen["device"], seen["dtype"], seen["repeats"]) == (True, "cpu", "fp32", 2)
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["bench"] == "gpu"
    args = _parser().parse_args(["bench", "calls", "--quick", "--dtype", "bf16"])
    assert args.func(args) == 2 and "--dtype applies to gpu only" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _parser().parse_args(["bench", "gpu", "--repeats", "0"])
    assert gpu.plan(quick=True, repeats=2).repeats == 2
