"""bench/rl_vs_ppo.py without network, stable-baselines3 or the ES task: its parsing, medians, report and commands.

The orchestration test stands fake ES and PPO processes in for the real ones (plain Python
scripts that write what the real ones would), so the subprocess handling runs for real.
"""
from __future__ import annotations

import ast
import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import hyperscalees
import rl_vs_ppo as rl
from hyperscalees.benchmarks.base import BenchSetupError
from hyperscalees.cli.main import main

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
quiet = lambda *_: None


def write_rows(path: Path, rows: list[dict], torn: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + torn)
    return path


# -- parsing and time to threshold ---------------------------------------------------------
def test_es_curve_keeps_rows_that_evaluated_and_drops_a_torn_last_line(tmp_path):
    rows = [{"step": 0, "time": 0.5, "eval_return": 20.0, "eval_s": 0.1, "env_steps": 100, "evaluated": 1},
            {"step": 1, "time": 0.9},
            {"step": 2, "time": 1.4, "eval_return": 20.0, "eval_s": 0.1, "env_steps": 200, "evaluated": 0},
            {"step": 3, "time": 2.0, "eval_return": 480, "eval_s": 0.3, "env_steps": 300, "evaluated": 1}]
    path = write_rows(tmp_path / "metrics.jsonl", rows, torn='{"step": 4, "time": 2.')
    assert rl.read_es_curve(path) == [[0.5, 0.4, 100.0, 20.0], [2.0, 1.7, 300.0, 480.0]]
    assert rl.read_es_curve(tmp_path / "missing.jsonl") == []


def test_time_to_threshold_is_the_first_crossing_within_the_budget_on_either_clock():
    curve = [[1.0, 0.5, 10, 100.0], [2.0, 1.0, 20, 474.9], [3.0, 1.5, 30, 475.0], [4.0, 2.0, 40, 500.0]]
    assert rl.time_to_threshold(curve, 475.0) == 3.0
    assert rl.time_to_threshold(curve, 475.0, clock=1) == 1.5          # without the evaluations
    assert rl.time_to_threshold(curve, 501.0) is None
    assert rl.time_to_threshold(curve, 475.0, budget=2.5) is None
    assert rl.time_to_threshold([], 475.0) is None
    assert rl.time_to_threshold([[5.0, 4.0, 10_000, -900.0], [9.0, 7.0, 20_000, -199.5]], -200.0) == 9.0


def test_median_counts_a_missed_seed_as_slower_than_every_reached_one():
    assert rl.median_time([5.0, 1.0, 3.0]) == 3.0
    assert rl.median_time([1.0, 2.0, None, 3.0, None]) == 3.0     # 3 of 5 reached: the 3rd fastest
    assert rl.median_time([1.0, None, None, 2.0, None]) is None    # 2 of 5: the median seed missed
    assert rl.median_time([4.0, None]) is None                    # even count straddling a miss
    assert rl.median_time([2.0, 4.0]) == 3.0
    assert rl.median_time([]) is None


# -- summaries and the report from canned runs ----------------------------------------------
def es_run(seed, time_s, steps_per_s=None, train_s=None):
    curve = [[1.0, 0.8, 1000, 50.0]] + ([[time_s, train_s or time_s, 2000, 500.0]] if time_s is not None
                                       else [[60.0, 50.0, 3000, 200.0]])
    return {"seed": seed, "status": "ok", "reached": time_s is not None, "time_s": time_s,
            "train_s": train_s if time_s is not None else None, "env_steps_per_s": steps_per_s, "curve": curve}


def ppo_run(seed, time_s, train_s, status="ok"):
    return {"seed": seed, "status": status, "reached": time_s is not None, "time_s": time_s, "train_s": train_s,
            "env_steps_per_s": 3000.0 + seed, "versions": {"stable_baselines3": "2.9.2"},
            "curve": [[6.0, 5.0, 10_000, 300.0]] + ([[time_s, train_s, 20_000, 500.0]] if time_s else [])}


def canned_results():
    cart = rl.summarize_env("CartPole-v1", {
        "es": [es_run(0, 4.0, 1e5, 3.0), es_run(1, None), es_run(2, 6.0, 2e5, 5.0)],
        "openes": [es_run(0, 9.0, 5e4, 8.0), es_run(1, 11.0, 5e4, 9.0), es_run(2, None)],
        "ppo": [ppo_run(0, 12.0, 6.0), ppo_run(1, 10.0, 5.0), ppo_run(2, None, None, "failed (exit 1): x")]})
    pend = rl.summarize_env("Pendulum-v1", {"es": [es_run(0, None), es_run(1, None)],
                                            "ppo": [ppo_run(0, 20.0, 15.0), ppo_run(1, 30.0, 20.0)]})
    return {"CartPole-v1": cart, "Pendulum-v1": pend}


def test_summary_medians_with_and_without_evaluation_counts_and_verdict():
    r = canned_results()
    es, openes, ppo = (r["CartPole-v1"]["methods"][m] for m in ("es", "openes", "ppo"))
    assert (es["median_s"], es["train_median_s"], ppo["median_s"], ppo["train_median_s"]) == (6.0, 5.0, 12.0, 6.0)
    assert (openes["median_s"], openes["train_median_s"]) == (11.0, 9.0)
    assert (es["reached"], ppo["reached"], es["seeds"]) == (2, 2, [0, 1, 2])
    assert es["env_steps_per_s"] == 1.5e5 and ppo["env_steps_per_s"] == 3001.0
    assert es["q25_s"] == 5.0 and es["q75_s"] is None                 # the upper quartile lands on the miss
    assert r["CartPole-v1"]["fastest_without_eval"] == "es"
    pend = r["Pendulum-v1"]
    assert pend["methods"]["es"]["median_s"] is None and pend["methods"]["ppo"]["median_s"] == 25.0
    assert pend["fastest_without_eval"] == "ppo"


def test_report_json_has_a_row_per_env_and_method_and_every_curve(tmp_path):
    rep = rl.build_report(canned_results(), budget=60.0, threads=1, notes=["extra note"])
    d = json.loads(rep.to_json())  # strict JSON: no NaN
    assert d["bench"] == "rl" and d["budget_s"] == 60.0 and d["threads"] == 1
    assert d["fastest_without_eval"] == {"CartPole-v1": "es", "Pendulum-v1": "ppo"}
    assert d["tuning_seeds"] == list(rl.TUNING_SEEDS) and d["eval_episodes"] == rl.EVAL_EPISODES
    assert d["ppo_versions"] == {"stable_baselines3": "2.9.2"}
    assert [(row["env"], row["method"]) for row in d["rows"]] == [
        ("CartPole-v1", "es"), ("CartPole-v1", "openes"), ("CartPole-v1", "ppo"), ("Pendulum-v1", "es"),
        ("Pendulum-v1", "ppo")]
    assert d["rows"][3]["median_s"] is None and d["rows"][2]["train_median_s"] == 6.0
    assert all(run["curve"] for run in d["envs"]["CartPole-v1"]["methods"]["ppo"]["runs"][:2])
    assert any("ppo CartPole-v1 seed 2: failed" in n for n in d["notes"]) and "extra note" in d["notes"]
    table = rep.table()
    assert table.startswith("# rl: ") and "Pendulum-v1" in table and "n/a" in table


def test_mean_curve_waits_for_every_seed_and_carries_the_last_value():
    curves = [[[1.0, 10.0], [3.0, 30.0]], [[2.0, 20.0]]]
    assert rl.mean_curve(curves, [0.5, 1.5, 2.0, 3.0, 9.0]) == [None, None, 15.0, 25.0, 25.0]


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    note = rl.plot_curves(canned_results(), tmp_path / "sub" / "rl.png")
    assert (tmp_path / "sub" / "rl.png").read_bytes()[:4] == b"\x89PNG" and "rl.png" in note


# -- the commands it runs ------------------------------------------------------------------
def test_es_invocation_is_train_rl_with_the_shared_evaluator_and_no_per_env_flags(tmp_path):
    argv, env = rl.es_invocation("Pendulum-v1", 3, 120.0, tmp_path / "run", threads=1, strategy="open_es")
    assert argv[:3] == [sys.executable, "-m", "hyperscalees.cli.main"]
    assert argv[3:7] == ["train", "rl", "--env", "Pendulum-v1"]
    rest = [a for a in argv[7:] if a != "--json"]
    flags = dict(zip(rest[::2], rest[1::2]))
    assert "--json" in argv
    assert flags == {"--seed": "3", "--strategy": "open_es", "--time-budget": "120", "--eval-every": "1",
                     "--eval-every-env-steps": str(rl.EVAL_EVERY_ENV_STEPS),
                     "--eval-episodes": str(rl.EVAL_EPISODES), "--steps": str(rl.ES_MAX_STEPS),
                     "--out": str(tmp_path / "run")}       # the env's tuned settings come from train rl itself
    assert env == {"OMP_NUM_THREADS": "1"}


def test_ppo_is_scored_by_the_same_evaluator_as_es():
    """ppo_anchor's --hs-src evaluator on a stand-in SB3 model that acts as an ES policy: the numbers
    equal the ES task's own evaluation of that policy (same env, episodes, starts)."""
    pytest.importorskip("gymnasium")
    import argparse
    import numpy as np
    import torch
    from hyperscalees.tasks.rl import RLTask
    sys.path.insert(0, str(BENCH_DIR))
    try:
        import ppo_anchor
    finally:
        sys.path.remove(str(BENCH_DIR))
    task = RLTask(seed=104, options={"env": "CartPole-v1", "eval_episodes": 8})
    policy = task.build_model()

    class StandIn:                                               # SB3's predict(obs, deterministic) -> (a, state)
        def predict(self, obs, deterministic):
            assert deterministic and isinstance(obs, np.ndarray)
            return policy(torch.from_numpy(obs)).numpy(), None
    args = argparse.Namespace(env="CartPole-v1", seed=104, eval_episodes=8,
                              hs_src=str(Path(hyperscalees.__file__).resolve().parents[1]))
    mean, std = ppo_anchor.shared_evaluator(args)(StandIn())
    want = task.evaluate(policy)
    assert (mean, std) == (want["eval_return"], want["eval_return_std"])


def test_venv_build_failure_says_why_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("HYPERSCALEES_CACHE", str(tmp_path))
    fail = [sys.executable, "-c", "import sys; sys.stderr.write('No matching distribution found'); sys.exit(1)"]
    monkeypatch.setattr(rl, "venv_commands", lambda path: [["mkdir", "-p", str(path)], fail])
    with pytest.raises(BenchSetupError, match="No matching distribution found.*offline"):
        rl.ensure_ppo_venv(log=quiet)
    assert not rl.venv_dir().exists()


def test_a_built_venv_is_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("HYPERSCALEES_CACHE", str(tmp_path))
    py = rl.venv_python(rl.venv_dir())
    py.parent.mkdir(parents=True)
    py.touch()
    (rl.venv_dir() / rl.READY_FILE).write_text(" ".join(rl.PPO_PACKAGES) + "\n")
    monkeypatch.setattr(rl, "venv_commands", lambda path: pytest.fail("rebuilt a venv that was ready"))
    assert rl.ensure_ppo_venv(log=quiet) == py


def test_a_venv_built_for_other_packages_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("HYPERSCALEES_CACHE", str(tmp_path))
    py = rl.venv_python(rl.venv_dir())
    py.parent.mkdir(parents=True)
    py.touch()
    (rl.venv_dir() / rl.READY_FILE).write_text("torch==2.13.0 stable-baselines3 gymnasium==1.4.0\n")
    built = []
    monkeypatch.setattr(rl, "venv_commands", lambda path: built.append(path) or [["mkdir", "-p", str(py.parent)],
                                                                                 ["touch", str(py)]])
    assert rl.ensure_ppo_venv(log=quiet) == py and built == [rl.venv_dir()]
    assert (rl.venv_dir() / rl.READY_FILE).read_text().split() == list(rl.PPO_PACKAGES)


def test_ppo_anchor_parses_flags_without_stable_baselines3():
    p = subprocess.run([sys.executable, str(BENCH_DIR / "ppo_anchor.py"), "--help"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and "--max-seconds" in p.stdout and "--threads" in p.stdout
    sys.path.insert(0, str(BENCH_DIR))
    try:
        import ppo_anchor
    finally:
        sys.path.remove(str(BENCH_DIR))
    tree = ast.parse(Path(ppo_anchor.__file__).read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "hyperscalees" not in imported and "stable_baselines3" in imported    # runs in the PPO venv only
    assert "stable_baselines3" not in sys.modules                               # imported lazily, in run()
    assert set(ppo_anchor.THRESHOLDS) == set(rl.THRESHOLDS)
    assert all(ppo_anchor.THRESHOLDS[e] == rl.THRESHOLDS[e] for e in rl.THRESHOLDS)
    n_envs, steps, kw = ppo_anchor.ppo_kwargs("CartPole-v1")
    assert (n_envs, steps, kw["n_steps"], kw["batch_size"], kw["n_epochs"]) == (8, 100_000, 32, 256, 20)
    assert kw["learning_rate"](1.0) == pytest.approx(1e-3) and kw["clip_range"](0.5) == pytest.approx(0.1)
    assert ppo_anchor.parse_args(["--env", "Pendulum-v1"]).threshold == -200.0


# -- orchestration with stand-in processes -------------------------------------------------
FAKE_ES = textwrap.dedent("""
    import json, signal, sys, time
    out = sys.argv[sys.argv.index("--out") + 1]
    import os; os.makedirs(out)
    f = open(out + "/metrics.jsonl", "w")
    def stop(*a):  # as train rl does: the step whose evaluation SIGTERM cut short has no evaluation fields
        f.write(json.dumps({"step": 999, "time": 99.0}) + "\\n")
        f.close()
        sys.exit(143)
    signal.signal(signal.SIGTERM, stop)
    for step, ret in enumerate([20.0, 200.0, 490.0, 500.0] + [500.0] * 100):
        row = {"step": step, "time": 0.1 * step, "eval_return": ret, "env_steps": 1000 * step,
               "eval_s": 0.02 * step, "evaluated": 1}
        f.write(json.dumps(row) + "\\n")
        f.flush()
        time.sleep(0.05)
    print(json.dumps({"done": True}))
""")
FAKE_PPO = textwrap.dedent("""
    import json, sys
    seed = int(sys.argv[sys.argv.index("--seed") + 1])
    if seed == 1:
        sys.exit("Traceback: boom")
    print("some log line")
    print(json.dumps({"env": "CartPole-v1", "seed": seed, "reached": True, "wall_s": 7.0, "train_s": 3.0,
                      "env_steps_per_s": 3300.0, "versions": {"stable_baselines3": "fake"},
                      "curve": [[3.5, 1.5, 10000, 120.0], [7.0, 3.0, 20000, 500.0]]}))
""")


def test_run_with_stand_in_processes(tmp_path, monkeypatch):
    (tmp_path / "es.py").write_text(FAKE_ES)
    (tmp_path / "ppo.py").write_text(FAKE_PPO)
    monkeypatch.setattr(rl, "POLL_S", 0.05)
    monkeypatch.setattr(rl, "es_invocation", lambda env_id, seed, budget, out, threads, strategy:
                        ([sys.executable, str(tmp_path / "es.py"), "--out", str(out)], {}))
    monkeypatch.setattr(rl, "ensure_ppo_venv", lambda log: Path(sys.executable))
    monkeypatch.setattr(rl, "anchor_script", lambda: tmp_path / "ppo.py")
    rep = rl.run(seeds=[100, 1], envs=["CartPole-v1"], budget=30, log=quiet, tuning_seeds=[0],
                 runs_dir=tmp_path / "runs")
    d = json.loads(rep.to_json())["envs"]["CartPole-v1"]["methods"]
    for m in ("es", "openes"):
        es = d[m]["runs"]
        assert [r["status"] for r in es] == ["ok", "ok"]      # stopped by SIGTERM once past 475: exit 143 is ok
        assert [r["time_s"] for r in es] == [pytest.approx(0.2), pytest.approx(0.2)]
        assert [r["train_s"] for r in es] == [pytest.approx(0.16), pytest.approx(0.16)]   # minus eval_s
        assert all(r["es_steps"] < 50 and r["summary"] is None for r in es)  # stopped early: no summary line
        # env steps/s from the last row that counted them (1000 steps per 0.1 s row, minus 0.02 s of eval)
        assert all(r["env_steps_per_s"] == pytest.approx(1000 / 0.08) for r in es)
    ppo = d["ppo"]["runs"]
    assert ppo[0]["status"] == "ok" and ppo[0]["time_s"] == 7.0 and ppo[0]["train_s"] == 3.0
    assert ppo[1]["status"].startswith("failed (exit 1)") and "boom" in ppo[1]["status"]
    assert (d["es"]["median_s"], d["ppo"]["median_s"], d["es"]["reached"], d["ppo"]["reached"]) == \
        (pytest.approx(0.2), None, 2, 1)
    saved = sorted(p.name for p in (tmp_path / "runs").iterdir())      # every run's record, on disk
    assert len(saved) == 6 and "CartPole-v1_openes_seed100.json" in saved
    rec = json.loads((tmp_path / "runs" / "CartPole-v1_ppo_seed100.json").read_text())
    assert rec["method"] == "ppo" and rec["curve"] and "load_after" in rec


def test_tuning_seeds_are_never_reported(monkeypatch):
    with pytest.raises(BenchSetupError, match=r"seeds \[3\] are tuning seeds"):
        rl.run(seeds=[3, 100], envs=["CartPole-v1"], log=quiet, methods=["es"])


def test_cli_flags_reach_run_and_setup_errors_exit_1(monkeypatch, capsys):
    seen = {}

    def fake_run(**kw):
        seen.update(kw)
        raise BenchSetupError("no network")
    monkeypatch.setattr(rl, "run", fake_run)
    code = rl.main(["--seeds", "102", "103", "--envs", "Pendulum-v1", "--budget", "45", "--plot", "p.png",
                 "--methods", "es", "openes", "--tuning-seeds", "0", "1", "--runs-dir", "runs"])
    assert code == 1 and "python bench/rl_vs_ppo.py: no network" in capsys.readouterr().err
    assert seen["seeds"] == [102, 103] and seen["envs"] == ["Pendulum-v1"] and seen["budget"] == 45.0
    assert seen["methods"] == ["es", "openes"] and seen["tuning_seeds"] == [0, 1] and str(seen["runs_dir"]) == "runs"
    assert str(seen["plot"]) == "p.png" and seen["threads"] == 1 and seen["device"] == "cpu"


@pytest.mark.parametrize("argv", [["--budget", "0"], ["--seeds", "-1"], ["--envs", "Hopper-v5"],
                                  ["bench", "calls", "--seeds", "1"], ["--methods", "a2c"]])
def test_bad_rl_flags_are_refused(argv, capsys):
    try:
        code = main(argv) if argv[0] == "bench" else rl.main(argv)
    except SystemExit as e:
        code = e.code
    assert code == 2 and capsys.readouterr().err.strip()
