"""Smoke tests of the benchmarks' --quick runs: structure and JSON keys, never timings."""
from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hyperscalees.benchmarks import population, throughput
from hyperscalees.benchmarks.base import Report, make_workload, measure_peak, side_by_side
from hyperscalees.cli import bench

# The peer harness is a script under bench/ (a dev tool, not in the installed package);
# it imports its sibling peer_drivers.py the way `python bench/peers.py` does: bench/ on sys.path.
BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))
import peers  # noqa: E402
from peer_drivers import DRIVERS, minimal_step  # noqa: E402

quiet = lambda *_: None


def test_throughput_quick_reports_every_config_and_headline_keys():
    rep = throughput.run(quick=True, log=quiet)
    c = throughput.configs(True)
    assert len(rep.rows) == len(c["kinds"]) * len(c["widths"]) * len(c["shapes"])
    d = json.loads(rep.to_json())
    for key in ("es_over_inference", "eggroll_over_openes", "peak_mem_ratio", "es_over_inference_t1"):
        assert key in d
    assert d["es_over_inference"] > 0 and d["eggroll_over_openes"] > 0
    assert d["peak_mem_ratio"] is None  # quick mode skips the memory subprocesses
    assert all(r["eggroll_tok_s"] > 0 and r["infer_tok_s"] > 0 for r in d["rows"])


def test_population_quick_fits_an_exponent_and_reports_memory():
    rep = population.run(quick=True, log=quiet, isolate=False)
    d = rep.to_dict()
    assert [r["population"] for r in d["rows"]] == [16, 32, 64]
    assert math.isfinite(d["time_exponent"]) and d["largest_population"] == 64
    assert all(r["peak_mib"] > 0 for r in d["rows"]) and isinstance(d["mem_bounded"], bool)


def test_fit_exponent_recovers_a_power_law():
    ns = [2 ** e for e in range(10, 15)]
    assert population.fit_exponent(ns, [3e-6 * n ** 1.25 for n in ns]) == pytest.approx(1.25)


def test_peers_quick_without_venvs_reports_them_as_unable_to_run(tmp_path, monkeypatch):
    monkeypatch.setenv("HS_PEERS_DIR", str(tmp_path))  # empty: quick mode must not install anything
    rep = peers.run(quick=True, log=quiet, isolate=False)
    d = rep.to_dict()
    names = [r["contender"] for r in d["rows"]]
    assert any(n.startswith("hyperscalees EGGROLL") for n in names)
    assert any("inference" in n for n in names) and any("minimal" in n for n in names)
    for p in peers.PEERS:
        row = next(r for r in d["rows"] if r["contender"] == p)
        assert row["status"] == "could not run" and "not installed" in row["note"]
        assert "not installed" in d["peer_status"][p]
    assert d["ours_s_per_gen"] > 0 and d["speedup"] == {}
    assert not list(tmp_path.iterdir())


def test_peers_script_quick_runs_by_path_from_another_directory(tmp_path):
    """`python bench/peers.py`: our probe's subprocess target (peers:ours_probe) must resolve."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HS_PEERS_DIR"] = str(tmp_path / "venvs")
    out = tmp_path / "res" / "peers.txt"
    p = subprocess.run([sys.executable, str(BENCH_DIR / "peers.py"), "--quick", "--json", "--out", str(out)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = p.stdout.strip().splitlines()
    d = json.loads(lines[-1])
    assert lines[0].startswith("# peers: ") and d["bench"] == "peers" and d["ours_s_per_gen"] > 0
    assert set(d["peer_status"]) == set(peers.PEERS) and d["speedup"] == {}
    assert out.read_text().strip().splitlines()[-1] == lines[-1]
    assert not (tmp_path / "venvs").exists()  # quick mode never installs


def test_peer_harness_and_allocator_live_outside_the_library():
    assert importlib.util.find_spec("hyperscalees.benchmarks.peers") is None
    assert importlib.util.find_spec("hyperscalees.benchmarks.peer_drivers") is None
    assert importlib.util.find_spec("hyperscalees.engine.allocator") is None
    assert importlib.util.find_spec("hyperscalees.cli.allocator") is not None


def test_cli_bench_peers_points_to_the_script(capsys):
    import argparse
    parser = argparse.ArgumentParser()
    bench.register(parser.add_subparsers(dest="cmd"))
    with pytest.raises(SystemExit) as e:   # refused while parsing: its own flags never reach this parser
        parser.parse_args(["bench", "peers", "--quick"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "python bench/peers.py" in err and "source checkout" in err
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "--help"])
    assert "bench/peers.py" in capsys.readouterr().out


def test_peer_drivers_are_valid_python_for_each_peer():
    assert set(DRIVERS) == set(peers.PEERS)
    for src in DRIVERS.values():
        compile(src, "driver", "exec")


def test_minimal_reference_step_updates_weights_and_returns_centered_ranks():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    step = minimal_step(state, 8, sigma=0.05, lr=0.05)
    f = step(torch.randn(8, 4, 64), torch.randn(4, 10))
    assert sorted(f.tolist()) == pytest.approx([i / 7 - 0.5 for i in range(8)])


def test_side_by_side_and_measure_peak_shapes():
    calls = []
    t = side_by_side({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, warmup=1, repeats=3)
    assert calls == ["a", "b"] * 4 and t["a"].repeats == 3 and t["a"].min <= t["a"].median <= t["a"].max
    m = measure_peak(lambda: torch.ones(4 * 2**20).sum())
    assert m["peak_mib"] >= m["floor_mib"] - 1 and set(m) >= {"peak_mib", "working_mib"}


def test_workload_kinds_and_unknown_kind():
    w = make_workload("lm", 16, 3, 4)
    assert w.fitness(w.model, 0, 4).shape == (4,)
    w = make_workload("mlp", 8, 2, 4)
    assert w.fitness(w.model, 0, 2).shape == (2,)
    with pytest.raises(ValueError, match="unknown workload"):
        make_workload("cnn", 8, 1, 2)


def test_report_json_is_strict_and_last_line(capsys, tmp_path):
    rep = Report("x", "q?", ["a", "b"], rows=[[1, float("nan")]], summary={"k": float("inf")})
    d = json.loads(rep.to_json())
    assert d["rows"] == [{"a": 1, "b": None}] and d["k"] is None
    assert "| a | b   |" in rep.table()


def test_population_probe_in_a_fresh_process():
    rep = population.run(quick=True, log=quiet, max_exponent=4)
    row = rep.to_dict()["rows"][0]
    assert row["population"] == 16 and row["peak_mib"] > 0 and row["s_per_step"] > 0


def test_cli_bench_quick_json_last_line_and_out_file(capsys, tmp_path, monkeypatch):
    import argparse
    fake = Report("population", "q?", ["population"], rows=[[16]], summary={"time_exponent": 1.0})
    monkeypatch.setattr(population, "run", lambda **kw: fake)
    parser = argparse.ArgumentParser()
    bench.register(parser.add_subparsers(dest="cmd"))
    out = tmp_path / "res.txt"
    args = parser.parse_args(["bench", "population", "--quick", "--json", "--out", str(out)])
    assert args.func(args) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(last)["bench"] == "population"
    assert out.read_text().strip().splitlines()[-1] == last
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "nope"])


def test_calls_quick_reports_a_ratio_per_population():
    from hyperscalees.benchmarks import calls
    rep = calls.run(quick=True, log=quiet)
    d = json.loads(rep.to_json())
    assert [r["population"] for r in d["rows"]] == list(calls.configs(True)["populations"])
    assert 0 < d["es_over_inference"] and all(r["es_ms"] > 0 and r["infer_ms"] > 0 for r in d["rows"])


def test_deterministic_cost_quick_compares_both_update_modes():
    import deterministic_cost
    rep = deterministic_cost.run(quick=True)
    row = dict(zip(rep.columns, rep.rows[0]))
    assert row["width"] == 64 and row["det_ms"] > 0 and row["fast_ms"] > 0
    assert 0 < row["det_over_inference"] and 0 < row["fast_over_inference"]


def test_kill_resume_measures_a_write_in_process(tmp_path):
    """The kill bench's in-process part (one of its model runs, its write timing) still runs."""
    import kill_resume
    ms, share = kill_resume.write_timing("xor", tmp_path)
    assert ms > 0 and 0 < share < 1


def test_distributed_quick_measures_wire_and_coordinator_without_ray():
    from hyperscalees.benchmarks import distributed
    d = distributed.run(quick=True, log=quiet).to_dict()
    units = {r["unit"] for r in d["rows"]}
    assert {"result bytes/member", "update bytes/member/worker", "ms CPU/step", "chunk results/s (CPU-bound)"} <= units
    ternary = [r["value"] for r in d["rows"] if r["config"].startswith("ternary")]
    f32 = [r["value"] for r in d["rows"] if r["config"].startswith("float32")]
    assert all(t < f / 5 for t, f in zip(ternary, f32))  # 1.6 bits vs 32 per member, plus headers
    assert d["coordinator_min_results_per_s"] > 0 and "ray1_ms_per_step" not in d


def test_wire_bytes_approach_a_fifth_of_a_byte_per_member_for_ternary():
    from hyperscalees.benchmarks import distributed
    res, upd = distributed.wire_bytes(65536, 16)["ternary"]
    assert 0.2 < res < 0.21 and 0.2 < upd < 0.201


def test_memory_probes_report_working_memory_of_inference_es_and_backprop():
    """Working memory (growth above the post-setup floor) of one cold call of each, fresh processes:
    a backprop step stores activations and gradients and so needs more than inference of the same batch."""
    from hyperscalees.benchmarks import throughput
    from hyperscalees.benchmarks.base import EXACT_RSS_ENV, in_subprocess
    kw = dict(kind="mlp", width=512, seq=16, pop=64, chunk=64, device="cpu")
    got = {w: in_subprocess("hyperscalees.benchmarks.throughput:memory_probe", {**kw, "which": w}, env=EXACT_RSS_ENV)
           for w in ("inference", "eggroll", "backprop")}
    assert all(g["working_mib"] >= 0 and g["peak_mib"] >= g["floor_mib"] > 100 for g in got.values())
    assert got["backprop"]["working_mib"] > got["inference"]["working_mib"] + 4     # > 4 MiB of activations+grads
    assert "es_over_backprop_work" in throughput.COLUMNS
