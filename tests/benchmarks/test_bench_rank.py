"""``bench rank`` (issue 42): the quick run's shape from the CLI, and the estimate cosines behaving as theory says."""
import json

import pytest
import torch

from hyperscalees.benchmarks import rank
from hyperscalees.benchmarks.base import BenchSetupError
from hyperscalees.cli.main import main

torch.set_num_threads(1)
quiet = lambda *_: None


def test_quick_from_the_cli_reports_every_task_method_noise_and_population(capsys, tmp_path):
    png, out = tmp_path / "rank.png", tmp_path / "res" / "rank.txt"
    assert main(["bench", "rank", "--quick", "--json", "--plot", str(png), "--out", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    d = json.loads(lines[-1])
    c = rank.configs(True)
    train = [r for r in d["rows"] if r["part"] == "train"]
    methods = [f"r={r}" for r in c["ranks"]] + ["OpenES"]
    assert {(r["task"], r["method"], r["noise"]) for r in train} == {
        (t, m, n) for t in c["tasks"] for m in methods for n in ("antithetic", "independent")}
    assert all(r["seeds"] == 1 and r["s_per_step"] > 0 and r["mean"] is not None for r in train)
    cos = [r for r in d["rows"] if r["part"] == "cosine"]
    assert len(cos) == len(methods) * 2 * len(c["cos_populations"]) * 2       # methods x noise x N x (true, ref)
    assert all(-1 <= r["mean"] <= 1 and r["seeds"] == c["cos_seeds"] for r in cos)
    for noise in ("antithetic", "independent"):
        s = d["by_noise"][noise]
        assert set(s["gap_by_rank"]) == {str(r) for r in c["ranks"]} and "gap_exponent" in s
    # curves: one per seed, each (step, seconds, metric) at the evaluations
    curve = d["curves"]["digits|r=1|antithetic"][0]
    assert [p[0] for p in curve] == [2, 4] and curve[0][1] < curve[1][1]
    assert png.stat().st_size > 1000 and out.read_text().strip().splitlines()[-1] == lines[-1]


def test_the_egg_runs_only_ranks_whose_root_is_a_power_of_two():
    methods, skipped = rank.methods_for("egg", [1, 2, 4, 8, 16])
    assert methods == [("eggroll", 1), ("eggroll", 4), ("eggroll", 16), ("openes", 1)] and skipped == [2, 8]
    assert rank.methods_for("digits", [1, 2, 8])[1] == []


@pytest.fixture(scope="module")
def problem():
    c = {**rank.configs(True), "cos_hidden": 4, "cos_batch": 16}   # 310 parameters: cheap large populations
    return rank.fixed_problem(c, "cpu")


def mean_cos(problem, method, r, pop, anti=True, seeds=3):
    model, fitness, names, truth = problem
    return sum(rank.cosine(rank.estimate(model, fitness, names, method, r, pop, anti, s, 0.01, 1024), truth)
               for s in range(seeds)) / seeds


def test_a_full_rank_estimate_at_a_huge_population_is_the_true_gradient(problem):
    assert mean_cos(problem, "openes", 1, 16384, seeds=1) > 0.95
    assert mean_cos(problem, "openes", 1, 16384, anti=False, seeds=1) > 0.9


@pytest.mark.parametrize("method,r,anti", [("eggroll", 1, True), ("eggroll", 4, False), ("openes", 1, True)])
def test_the_cosine_rises_with_the_population(problem, method, r, anti):
    small, mid, big = (mean_cos(problem, method, r, n, anti) for n in (16, 256, 4096))
    assert small < mid < big and big > 0.8


def test_cosine_of_a_vector_with_itself_and_its_negative():
    v = torch.randn(50, dtype=torch.float64)
    assert rank.cosine(v, 3 * v) == pytest.approx(1.0) and rank.cosine(v, -v) == pytest.approx(-1.0)


def test_an_unknown_settings_key_or_task_is_refused_by_name(capsys):
    with pytest.raises(BenchSetupError, match="'rankz'"):
        rank.run(quick=True, log=quiet, settings={"rankz": [1]})
    with pytest.raises(BenchSetupError, match="'mnist'"):
        rank.run(quick=True, log=quiet, settings='{"tasks": ["mnist"]}')
    assert main(["bench", "rank", "--quick", "--budget", "5"]) == 2   # not a flag of rank
    assert "--budget applies to" in capsys.readouterr().err
