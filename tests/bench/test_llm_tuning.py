"""bench/llm_vs_grpo.py --tune: the selection on tuning seeds by validation accuracy, with fake runs (no training)."""
from __future__ import annotations

import importlib.util
import json

import pytest

import llm_vs_grpo as bench_llm
import llm_runs
import llm_tuning
from hyperscalees.benchmarks.base import BenchSetupError

GRIDS = {"es": ({"lr": 1}, {"lr": 2}, {"lr": 3}), "grpo": ({"learning_rate": 1}, {"learning_rate": 2},
                                                           {"learning_rate": 3})}


def test_the_best_mean_validation_accuracy_wins_and_every_cell_is_recorded():
    scores = {("es", 1): [0.1, 0.2], ("es", 2): [0.4, 0.2], ("es", 3): [0.3, 0.2],
              ("grpo", 1): [0.5, 0.5], ("grpo", 2): [0.1, 0.0], ("grpo", 3): [0.2, 0.2]}
    calls = []

    def train(method, seed, settings):
        calls.append((method, seed, settings))
        return scores[method, next(iter(settings.values()))][seed]

    out = llm_tuning.tune(GRIDS, (0, 1), train)
    assert len(calls) == 12 and {s for _, s, _ in calls} == {0, 1}   # every setting on every tuning seed
    assert out["es"]["chosen"] == {"lr": 2} and out["es"]["chosen_index"] == 1
    assert out["grpo"]["chosen"] == {"learning_rate": 1}               # the default kept when it is best
    assert [c["validation"] for c in out["es"]["grid"]] == [[0.1, 0.2], [0.4, 0.2], [0.3, 0.2]]
    assert out["es"]["grid"][1]["mean"] == pytest.approx(0.3)


def test_ties_go_to_the_earlier_setting_and_a_failed_seed_disqualifies_it():
    scores = {1: [0.2, 0.2], 2: [0.2, 0.2], 3: [0.9, None]}
    out = llm_tuning.tune({"es": GRIDS["es"]}, (0, 1), lambda m, seed, s: scores[s["lr"]][seed])
    assert out["es"]["chosen"] == {"lr": 1} and out["es"]["grid"][2]["mean"] is None
    failed = llm_tuning.tune({"es": GRIDS["es"]}, (0,), lambda m, seed, s: None)
    assert failed["es"]["chosen_index"] == 0                           # nothing ran: the default


def test_both_methods_get_the_same_tuning_budget():
    llm_tuning.check_grids(llm_tuning.GRIDS)
    with pytest.raises(ValueError, match="same size"):
        llm_tuning.check_grids({"es": GRIDS["es"], "grpo": GRIDS["grpo"][:2]})
    with pytest.raises(ValueError, match="tuning seed"):
        llm_tuning.tune(GRIDS, (), lambda *a: 0.0)


def test_bench_llm_tune_reports_seeds_with_the_chosen_settings(fake_runs, capsys):
    assert bench_llm.main(["--model", "m", "--tune", "--tuning-seeds", "7", "--seeds", "100", "101",
                 "--budget", "5", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # the fakes score ES by its largest lr, GRPO by its smallest learning rate
    chosen = {"es": max(llm_tuning.ES_GRID, key=lambda s: s["lr"]),
              "grpo": min(llm_tuning.GRPO_GRID, key=lambda s: s["learning_rate"])}
    tuning = rep["tuning"]
    assert tuning["seeds"] == [7] and "validation split" in tuning["validation"]
    assert {m: t["chosen"] for m, t in tuning["methods"].items()} == chosen
    assert [c["settings"] for c in tuning["methods"]["es"]["grid"]] == list(llm_tuning.ES_GRID)
    assert "chosen by mean validation accuracy" in rep["tuned"]
    tuned_calls = [c for c in fake_runs if c[3]]
    assert len(tuned_calls) == len(llm_tuning.ES_GRID) + len(llm_tuning.GRPO_GRID)   # every setting, 1 seed
    assert {c[1] for c in tuned_calls} == {7}
    reported = [c for c in fake_runs if not c[3]]
    assert sorted((m, s) for m, s, *_ in reported) == [("es", 100), ("es", 101), ("grpo", 100), ("grpo", 101)]
    assert all(t == chosen[m] for m, _, t, *_ in reported)


def test_without_tune_nothing_is_tuned_and_tuning_seeds_are_refused_as_reported_seeds(fake_runs, capsys):
    assert bench_llm.main(["--model", "m", "--seeds", "100", "--budget", "5", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert "tuning" not in rep and rep["tuned"].startswith("nothing")
    assert all(t is None and not v for _, _, t, v, *_ in fake_runs)
    with pytest.raises(BenchSetupError, match="tuning seeds"):
        bench_llm.run(model="m", seeds=(0, 100), tune=True, log=lambda *_: None)
    with pytest.raises(BenchSetupError, match="needs --tune"):
        bench_llm.run(model="m", tuning_seeds=(5,), log=lambda *_: None)


def test_the_task_and_its_options_are_flags(fake_runs, capsys):
    opts = '{"min_numbers": 2, "max_numbers": 2}'
    assert bench_llm.main(["--model", "m", "--seeds", "100", "--budget", "5", "--json", "--task", "countdown",
                 "--task-options", opts]) == 0
    rep = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rep["task"] == "countdown" and rep["task_options"] == json.loads(opts)
    assert bench_llm.main(["--model", "m", "--task", "countdown", "--task-options", '{"max_numbers": 1}']) == 1
    assert "min_numbers <= max_numbers" in capsys.readouterr().err


@pytest.mark.parametrize("method", ["es", "grpo"])
def test_every_grid_setting_becomes_a_command_line_its_runner_accepts(method, tmp_path):
    """Each setting reaches its runner: the ES one parsed by train llm's parser, GRPO's by grpo_run's."""
    import grpo_run
    from hyperscalees.cli.main import build_parser, parse
    c = bench_llm.configs(quick=False)
    for settings in llm_tuning.GRIDS[method]:
        if method == "es":
            argv = llm_runs.es_invocation("m", 5, 60.0, tmp_path / "run", c, settings)
            a = vars(parse(build_parser(), argv[2:]))
            got = {k: a[f"es.{k}"] for k in ("lr", "sigma", "population", "optimizer")}
            got["prompts"], got["seed"] = a["options.prompts"], a["es.seed"]
            got["temperature"] = a["options.temperature"]
        else:
            a = grpo_run.parse(llm_runs.grpo_invocation("m", 5, 60.0, c, 1, settings)[2:])
            got = {"learning_rate": a.learning_rate, "generations": a.generations, "prompts": a.prompts,
                   "seed": a.seed}
        assert {k: got[k] for k in settings} == settings
        assert got["prompts"] == settings.get("prompts", c["prompts"]) and got["seed"] == 5


def test_a_settings_optimizer_and_prompts_reach_train_llm_and_what_it_leaves_out_stays_default():
    from hyperscalees.cli.main import build_parser, parse
    argv = llm_runs.es_invocation("m", 1, 9.0, "out", bench_llm.configs(quick=True),
                                   {"lr": 1e-3, "optimizer": "sgd", "prompts": 16, "temperature": 0.5})
    assert argv[argv.index("--prompts") + 1] == "16" and argv[argv.index("--optimizer") + 1] == "sgd"
    assert vars(parse(build_parser(), argv[2:]))["options.temperature"] == 0.5  # members sample
    assert "--sigma" not in argv   # what a setting leaves out stays train llm's default
    plain = llm_runs.es_invocation("m", 1, 9.0, "out", bench_llm.configs(quick=True), {"lr": 1e-3})
    assert "--temperature" not in plain  # greedy unless a setting says otherwise


@pytest.fixture
def paired_runs(fake_runs, monkeypatch):
    """The fake runs, each waiting at a two-party barrier: run one after the other they would time out,
    so a passing run proves each ES run had a GRPO run beside it (and the reverse)."""
    import threading
    barrier = threading.Barrier(2, timeout=10)
    for name in ("run_es", "run_grpo"):
        inner = getattr(bench_llm, name)

        def waiting(*a, inner=inner, **k):
            barrier.wait()
            return inner(*a, **k)
        monkeypatch.setattr(bench_llm, name, waiting)
    monkeypatch.setattr(bench_llm.os, "cpu_count", lambda: 2)
    return fake_runs


def test_side_by_side_runs_each_pair_together_and_chooses_and_reports_as_one_at_a_time(paired_runs, capsys):
    argv = ["--model", "m", "--tune", "--tuning-seeds", "7", "--seeds", "100", "101",
            "--budget", "5", "--json"]
    assert bench_llm.main(argv + ["--side-by-side"]) == 0
    rep = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rep["side_by_side"] is True
    assert any("side by side (started together, one per core)" in n for n in rep["notes"])
    assert all(r["side_by_side"] for rs in rep["runs"].values() for r in rs)
    chosen = {m: t["chosen"] for m, t in rep["tuning"]["methods"].items()}
    tuned = [c for c in paired_runs if c[3]]
    # every grid setting ran once on the tuning seed, ES's i-th beside GRPO's i-th
    assert sorted(str(c[:4]) for c in tuned) == sorted(map(str, [(m, 7, dict(st), True) for m in ("es", "grpo")
                                                       for st in llm_tuning.GRIDS[m]]))
    assert chosen == {"es": max(llm_tuning.ES_GRID, key=lambda s: s["lr"]),
                      "grpo": min(llm_tuning.GRPO_GRID, key=lambda s: s["learning_rate"])}
    assert sorted((m, s) for m, s, t, v, *_ in paired_runs if not v) == [("es", 100), ("es", 101), ("grpo", 100),
                                                                    ("grpo", 101)]
    assert {m: rep["acc_after_median"][m] for m in ("es", "grpo")} == {"es": 0.5, "grpo": 0.5}


def test_side_by_side_needs_both_methods_and_a_core_per_run(fake_runs, monkeypatch, capsys):
    with pytest.raises(BenchSetupError, match=r"needs two, got \['es'\]"):
        llm_runs.check_side_by_side(("es",), threads=1, cpus=8)
    with pytest.raises(BenchSetupError, match="2 runs x 2 threads = 4 CPUs, this machine has 3"):
        llm_runs.check_side_by_side(("es", "grpo"), threads=2, cpus=3)
    llm_runs.check_side_by_side(("es", "grpo"), threads=1, cpus=2)
    monkeypatch.setattr(bench_llm.os, "cpu_count", lambda: 1)
    assert bench_llm.main(["--model", "m", "--seeds", "100", "--budget", "5", "--side-by-side"]) == 1
    assert "this machine has 1" in capsys.readouterr().err
    assert not fake_runs   # refused before any run


def test_given_settings_run_on_the_reported_seeds_untuned(fake_runs, capsys):
    """--settings: settings a tuning chose earlier, on fresh seeds; a method not named runs its defaults."""
    given = {"es": {"lr": 1e-4, "sigma": 1e-2, "optimizer": "sgd", "population": 512}}
    assert bench_llm.main(["--model", "m", "--seeds", "100", "101", "--budget", "5", "--json",
                 "--settings", json.dumps(given)]) == 0
    rep = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert "tuning" not in rep and rep["tuned"].startswith("nothing here: the settings were given")
    assert not any(c.validate for c in fake_runs)   # nothing validated: nothing tuned
    assert sorted((m, s, json.dumps(t)) for m, s, t, *_ in fake_runs) == [
        ("es", 100, json.dumps(given["es"])), ("es", 101, json.dumps(given["es"])),
        ("grpo", 100, "null"), ("grpo", 101, "null")]


@pytest.mark.parametrize("settings, message", [
    ('{"es": {"popultion": 8}}', "es setting 'popultion' is not one of"),
    ('{"es": {"population": 7}}', "even whole number >= 2"),
    ('{"es": {"lr": -1}}', "'lr' must be a number > 0, got -1"),
    ('{"es": {"optimizer": "rmsprop"}}', "one of sgd, adam"),
    ('{"grpo": {"generations": 1}}', "'generations' must be a whole number >= 2"),
    ('{"grpo": {"prompts": true}}', "'prompts' must be a whole number >= 1, got True"),
    ('{"ppo": {}}', "'ppo', which is not a method run here"),
    ('{"es": [1]}', "es settings must be a JSON object"),
    ("[1]", "--settings must be a JSON object"),
    ("{oops", "--settings must be a JSON object"),
])
def test_bad_settings_are_refused_naming_the_value_before_any_run(fake_runs, settings, message):
    with pytest.raises(BenchSetupError, match=message):
        bench_llm.run(model="m", settings=settings, log=lambda *_: None)
    assert not fake_runs


def test_settings_and_tune_are_one_or_the_other(fake_runs, capsys):
    assert bench_llm.main(["--model", "m", "--tune", "--settings", '{"es": {"lr": 1e-4}}']) == 1
    assert "use one" in capsys.readouterr().err and not fake_runs


def test_every_grid_setting_passes_the_settings_check():
    for method, grid in llm_tuning.GRIDS.items():
        for settings in grid:
            assert llm_tuning.check_settings(method, settings) == settings
    with pytest.raises(ValueError, match="grpo setting 'lr' is not one of"):
        llm_tuning.check_grids({"es": ({"lr": 1e-3},), "grpo": ({"lr": 1e-3},)})  # ES's key in GRPO's grid


def test_the_device_reaches_both_runners_and_every_scorer(monkeypatch, tmp_path):
    """--device cuda: train llm and grpo_run get --device cuda (and --device cpu on the CPU), every
    run and scorer sees the device; runs go one at a time (two would share the one GPU)."""
    import grpo_run
    from hyperscalees.cli.main import build_parser, parse
    c = {**bench_llm.configs(quick=False), "device": "cuda"}
    es = llm_runs.es_invocation("m", 5, 60.0, tmp_path / "run", c, llm_tuning.ES_GRID[2])
    assert vars(parse(build_parser(), es[2:]))["engine.device"] == "cuda"
    assert grpo_run.parse(llm_runs.grpo_invocation("m", 5, 60.0, c, 1)[2:]).device == "cuda"
    # on the CPU too: train llm's own default is cuda where there is one
    cpu = bench_llm.configs(quick=False)
    assert vars(parse(build_parser(), llm_runs.es_invocation("m", 5, 60.0, tmp_path / "run", cpu)[2:]))[
        "engine.device"] == "cpu"
    assert grpo_run.parse(llm_runs.grpo_invocation("m", 5, 60.0, cpu, 1)[2:]).device == "cpu"

    seen = []
    for name, method in (("run_es", "es"), ("run_grpo", "grpo")):
        monkeypatch.setattr(bench_llm, name, lambda model, seed, budget, threads, c, tuned=None, validate=False,
                            method=method: seen.append((method, c["device"])) or {
                                "method": method, "seed": seed, "status": "ok", "curve": [],
                                "after": {"accuracy": 0.5, "formatted": 1.0, "reward": 0.5}})
    monkeypatch.setattr(bench_llm, "before_accuracy", lambda model, c: seen.append(("before", c["device"])) or {
        "accuracy": 0.1, "formatted": 1.0, "reward": 0.2})
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    rep = bench_llm.run(model="m", device="cuda", seeds=(100,), log=lambda *_: None)
    assert sorted(seen) == [("before", "cuda"), ("es", "cuda"), ("grpo", "cuda")]
    assert rep.summary["device"].startswith("cuda")
    with pytest.raises(BenchSetupError, match="would share the one GPU"):
        bench_llm.run(model="m", device="cuda", side_by_side=True, log=lambda *_: None)
    with pytest.raises(BenchSetupError, match="cpu or cuda, got --device 'mps'"):
        bench_llm.run(model="m", device="mps", log=lambda *_: None)


def test_the_anchors_protocol_and_small_sets_reach_train_llm_as_flags(tmp_path):
    """Issue 40's pre-registrations name these ES settings: each is checked, then passed to train llm."""
    from llm_runs import es_invocation
    from llm_tuning import check_settings
    tuned = check_settings("es", {"subspace": 1024, "train_problems": 64, "prompts": 64, "shaping": "z_score",
                                  "group_fitness": "mean", "population": 30, "lr": 5e-4, "sigma": 1e-3})
    c = {"task": "countdown", "task_options": {}, "prompts": 4, "max_new_tokens": 8, "eval_prompts": 4,
         "population": 8}
    argv = es_invocation("MODEL", 3, 10.0, tmp_path, c, tuned)
    pairs = dict(zip(argv, argv[1:]))
    assert pairs["--subspace"] == "1024" and pairs["--train-problems"] == "64" and pairs["--shaping"] == "z_score"
    assert pairs["--group-fitness"] == "mean" and pairs["--prompts"] == "64" and pairs["--population"] == "30"
    with pytest.raises(ValueError, match="subspace"):
        check_settings("es", {"subspace": 0})
    tuned = check_settings("es", {"preset": "qiu", "strategy": "eggroll", "chunk": 30, "subspace_cache_mib": 1024,
                                  "noise_cache_mib": 7000})
    argv = es_invocation("MODEL", 3, 10.0, tmp_path, c, tuned)
    pairs = dict(zip(argv, argv[1:]))
    assert (pairs["--preset"], pairs["--strategy"], pairs["--chunk"]) == ("qiu", "eggroll", "30")
    assert (pairs["--subspace-cache-mib"], pairs["--noise-cache-mib"]) == ("1024", "7000")
    for bad in ({"strategy": "cma"}, {"chunk": 3}, {"subspace_cache_mib": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            check_settings("es", bad)
    with pytest.raises(ValueError, match="optimizer"):
        check_settings("es", {"optimizer": "lion"})  # read from the optimizer registry, which has no lion
