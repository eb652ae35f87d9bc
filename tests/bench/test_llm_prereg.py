"""What the issue-40 pre-registrations need of bench/llm_vs_grpo.py: a pre-registered grid (``--grid``),
tuning alone (``--tune-only``, ``--tuning-budget``), the pooled held-out set (``--held-out pooled``)
and held-out curves from snapshots (``--snapshot-every``) on both sides."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

pytest.importorskip("transformers")
import grpo_run  # noqa: E402
import llm_runs  # noqa: E402
import llm_vs_grpo as bench_llm  # noqa: E402
from hyperscalees.benchmarks.base import BenchSetupError  # noqa: E402
from hyperscalees.engine.snapshots import read_snapshots  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py
GRID = {"es": [{"lr": 1e-4, "subspace": 64}, {"lr": 1e-3, "subspace": 64}],
        "grpo": [{"learning_rate": 1e-4}, {"learning_rate": 1e-3}]}


def test_a_given_grid_is_tuned_alone_on_its_own_budget(fake_runs, capsys):
    assert bench_llm.main(["--model", "m", "--tune", "--tune-only", "--tuning-seeds", "1", "--tuning-budget", "6",
                           "--budget", "20", "--seeds", "401", "--grid", json.dumps(GRID), "--held-out", "pooled",
                           "--json"]) == 0
    rep = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [c.validate for c in fake_runs] == [True] * 4 and {c.budget for c in fake_runs} == {6.0}
    assert {c.seed for c in fake_runs} == {1}  # no reported seed ran
    assert rep["tuning"]["budget_s"] == 6.0 and "for 6 s per setting" in rep["tuned"]
    assert rep["tuning"]["methods"]["es"]["chosen"] == GRID["es"][1]  # the fakes: ES's larger lr,
    assert rep["tuning"]["methods"]["grpo"]["chosen"] == GRID["grpo"][0]  # GRPO's smaller
    assert any("pooled (7 problems)" in n for n in rep["notes"])


@pytest.mark.parametrize("kwargs, message", [
    ({"grid": json.dumps(GRID)}, "--grid gives the settings --tune chooses from"),
    ({"tune_only": True}, "need --tune"),
    ({"tune": True, "grid": json.dumps({"es": GRID["es"]})}, "a list of settings for each method"),
    ({"tune": True, "grid": json.dumps({**GRID, "grpo": GRID["grpo"][:1]})}, "the same size"),
    ({"tune": True, "grid": json.dumps({**GRID, "es": [{"lr": -1}] * 2})}, "'lr' must be a number > 0, got -1"),
    ({"held_out": "train"}, "--held-out must be one of"),
])
def test_bad_prereg_flags_are_refused_naming_the_value(fake_runs, kwargs, message):
    with pytest.raises(BenchSetupError, match=message):
        bench_llm.run(model="m", seeds=(401,), log=lambda *_: None, **kwargs)
    assert not fake_runs


ARMS = {"es_k256": {"method": "es", "settings": {"subspace": 256, "lr": 3e-5}},
        "es_k4096": {"method": "es", "settings": {"subspace": 4096, "lr": 3e-5}}}


def test_arms_run_two_settings_of_one_method_side_by_side_under_their_names(fake_runs, capsys, tmp_path,
                                                                           monkeypatch):
    monkeypatch.setattr(bench_llm.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(llm_runs.os, "cpu_count", lambda: 2)
    assert bench_llm.main(["--model", "m", "--budget", "20", "--seeds", "201", "202", "--arms", json.dumps(ARMS),
                           "--side-by-side", "--runs-dir", str(tmp_path), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [c.method for c in fake_runs] == ["es"] * 4  # both arms are ES runs, no GRPO run
    assert sorted((c.seed, c.tuned["subspace"]) for c in fake_runs) == [(201, 256), (201, 4096), (202, 256),
                                                                               (202, 4096)]
    assert set(rep["acc_after_median"]) == {"es_k256", "es_k4096"}
    assert rep["tuned"].startswith("nothing here: every arm's method and settings were given (--arms)")
    assert any("a seed's es_k256 and es_k4096 runs side by side" in n for n in rep["notes"])
    assert any("each arm's given setting (--arms)" in n for n in rep["notes"])
    saved = json.loads((tmp_path / "es_k4096_seed202.json").read_text())
    assert saved["arm"] == "es_k4096" and saved["method"] == "es" and saved["seed"] == 202


@pytest.mark.parametrize("kwargs, message", [
    ({"arms": json.dumps(ARMS), "tune": True}, "leave out --tune and --settings"),
    ({"arms": json.dumps(ARMS), "settings": "{}"}, "leave out --tune and --settings"),
    ({"arms": json.dumps({"k 1": ARMS["es_k256"]})}, "letters, digits and _"),
    ({"arms": json.dumps({"a": {"method": "sgd"}})}, "must be"),
    ({"arms": json.dumps({"a": {"method": "es", "settings": {"subspace": 0}}})}, "a: es setting 'subspace'"),
    ({"arms": "{}"}, "at least one arm"),
])
def test_bad_arms_are_refused_naming_the_value(fake_runs, kwargs, message):
    with pytest.raises(BenchSetupError, match=message):
        bench_llm.run(model="m", seeds=(401,), log=lambda *_: None, **kwargs)
    assert not fake_runs


def test_snapshots_reach_both_runners():
    c = {**bench_llm.configs(quick=True), "snapshot_s": 30.0}
    es = llm_runs.es_invocation("m", 5, 60.0, "out", c)
    assert es[es.index("--snapshot-minutes") + 1] == "0.5"
    assert "--snapshot-minutes" not in llm_runs.es_invocation("m", 5, 60.0, "out", bench_llm.configs(quick=True))


def test_the_pooled_held_out_set_is_every_distinct_validation_and_test_problem(monkeypatch):
    from hyperscalees.tasks.problems import PROBLEM_SETS
    c = {**bench_llm.configs(quick=True), "held_out": "pooled"}
    task = PROBLEM_SETS[c["task"]](seed=0, options=c["task_options"])
    sizes = {s: task.distinct_size(s) for s in ("validation", "test")}
    seen = {}

    def fake_split(model, cc, split):  # each split all right but one
        seen[split] = cc["eval_prompts"]
        return {"accuracy": 1 - 1 / cc["eval_prompts"], "formatted": 1.0, "reward": 0.0}
    monkeypatch.setattr(llm_runs, "split_accuracy", fake_split)
    got = llm_runs.before_accuracy("m", c)
    assert seen == sizes and got["problems"] == sum(sizes.values())
    assert got["accuracy"] == pytest.approx(1 - 2 / sum(sizes.values()))


def test_the_end_replaces_a_snapshot_of_the_same_step():
    curve = [[10.0, 0.1, 0.9, 4], [20.0, 0.2, 0.9, 9]]
    assert llm_runs.with_end(curve, [20.5, 0.3, 1.0, 9]) == [[10.0, 0.1, 0.9, 4], [20.5, 0.3, 1.0, 9]]
    assert llm_runs.with_end(curve, [25.0, 0.3, 1.0, 11])[-1] == [25.0, 0.3, 1.0, 11]


def test_the_grpo_callback_snapshots_every_interval(monkeypatch, tmp_path):
    from hyperscalees import llm
    now, written = [0.0], []
    monkeypatch.setattr(grpo_run.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(llm, "save_pretrained", lambda model, tok, folder, overwrite: (
        folder.mkdir(parents=True), written.append(model), folder)[-1])
    a = SimpleNamespace(snapshot_every=10.0, snapshot_dir=str(tmp_path))
    cb, control = grpo_run.BudgetStop(100.0, grpo_run.snapshotter(a, "tok")), SimpleNamespace(should_training_stop=False)
    cb.on_train_begin(None, None, control)
    for step, t in enumerate((4.0, 9.0, 12.0, 17.0, 35.0), start=1):
        cb.on_step_begin(None, None, control)
        now[0] = t
        cb.on_step_end(None, SimpleNamespace(global_step=step), control, model=f"model@{step}")
    assert written == ["model@3", "model@5"]  # past 10 s, then past 20 (and 30) s at once
    assert [(s["step"], s["time"]) for s in read_snapshots(tmp_path)] == [(3, 12.0), (5, 35.0)]
    assert grpo_run.snapshotter(SimpleNamespace(snapshot_every=None, snapshot_dir=None), "tok") is None


def test_grpos_step_cap_never_ends_a_run_before_its_budget():
    c = bench_llm.configs(quick=True)
    for budget in (3.0, 600.0, 1200.0):
        argv = llm_runs.grpo_invocation("m", 1, budget, c, threads=1)
        cap = int(argv[argv.index("--max-steps") + 1])
        assert cap == llm_runs.grpo_max_steps(budget) and cap >= budget * 20  # 20 steps a second: never reached
    assert llm_runs.grpo_max_steps(1200.0) == 2 * llm_runs.grpo_max_steps(600.0)  # the same share of the decay


def test_a_run_that_stops_before_its_budget_is_named():
    grpo = {"method": "grpo", "seed": 5, "status": "ok", "stopped": "max_steps", "train_s": 361.2,
            "settings": {"budget_s": 600.0}}
    assert llm_runs.stopped_early(grpo) == ("grpo seed 5 stopped by max_steps after 361.2 s of its 600.0 s budget: "
                                            "not equal wall clock")
    assert llm_runs.stopped_early({**grpo, "stopped": "budget"}) is None
    assert llm_runs.stopped_early({**grpo, "method": "es", "stopped": "time_budget"}) is None
    assert llm_runs.stopped_early({**grpo, "status": "failed (exit 1)"}) is None  # a failure is reported as one
    rep = bench_llm.build_report("m", {"accuracy": 0.1, "formatted": 1.0, "reward": 0.2}, {"grpo": [
        {**grpo, "after": {"accuracy": 0.2, "formatted": 1.0, "reward": 0.3}, "steps": 1000}]}, 600.0, 1,
        bench_llm.configs(quick=True))
    assert any("stopped by max_steps" in n for n in rep.notes)


def test_a_study_run_again_on_its_runs_dir_reads_back_every_finished_run(fake_runs, capsys, tmp_path, monkeypatch):
    """A study longer than a session: the same command on the same --runs-dir trains nothing it finished."""
    monkeypatch.setattr(bench_llm.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(llm_runs.os, "cpu_count", lambda: 2)
    argv = ["--model", "m", "--tune", "--tuning-seeds", "1", "--tuning-budget", "6", "--budget", "20", "--seeds",
            "401", "402", "--grid", json.dumps(GRID), "--side-by-side", "--runs-dir", str(tmp_path), "--json"]
    assert bench_llm.main(argv) == 0
    first = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert len(fake_runs) == 4 + 4  # 2 tuning pairs, 2 reported pairs
    assert sorted(p.name for p in (tmp_path / "tuning").iterdir()) == [
        f"{m}_seed1_setting{i}.json" for m in ("es", "grpo") for i in (0, 1)]
    (tmp_path / "es_seed402.json").unlink()  # as if the session ended during seed 402's pair
    fake_runs.clear()
    assert bench_llm.main(argv) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert sorted((c.method, c.seed) for c in fake_runs) == [("es", 402), ("grpo", 402)]  # the pair, whole
    assert again["tuning"] == first["tuning"] and again["acc_after_median"] == first["acc_after_median"]
    fake_runs.clear()
    assert bench_llm.main(argv) == 0 and fake_runs == []  # all finished: nothing runs


def test_a_runs_dir_holding_another_studys_run_is_refused_not_overwritten(fake_runs, tmp_path):
    bench_llm.run(model="m", seeds=(401,), budget=20, runs_dir=tmp_path, log=lambda *_: None)
    saved = (tmp_path / "es_seed401.json").read_text()
    with pytest.raises(BenchSetupError, match="holds a different run.*--runs-dir of its own"):
        bench_llm.run(model="m", seeds=(401,), budget=30, runs_dir=tmp_path, log=lambda *_: None)
    assert (tmp_path / "es_seed401.json").read_text() == saved
    (tmp_path / "es_seed401.json").write_text("{torn")
    with pytest.raises(BenchSetupError, match="es_seed401.json: not a run record"):
        bench_llm.run(model="m", seeds=(401,), budget=20, runs_dir=tmp_path, log=lambda *_: None)


def test_the_model_before_training_is_scored_once_per_runs_dir(fake_runs, tmp_path, monkeypatch):
    scored = []
    monkeypatch.setattr(bench_llm, "before_accuracy", lambda model, c: scored.append(model) or {
        "accuracy": 0.25, "formatted": 1.0, "reward": 0.2, "problems": 7})
    for _ in range(2):
        bench_llm.run(model="m", seeds=(401,), budget=20, runs_dir=tmp_path, log=lambda *_: None)
    assert scored == ["m"]
    bench_llm.run(model="m", seeds=(401,), budget=20, log=lambda *_: None)  # no --runs-dir: nothing kept
    assert scored == ["m", "m"]
