"""bench/prereg_result.py: a pre-registered comparison's result file holds the promised keys, the
registered prediction and rule, and refuses runs without a held-out curve."""
from __future__ import annotations

import json

import pytest

import prereg_result  # noqa: E402


def run(method, seed, acc, curve=True):
    return {"method": method, "seed": seed, "status": "ok", "steps": 5,
            "after": {"accuracy": acc, "formatted": 0.9, "reward": 0.2},
            "held_out_curve": [[300.0, acc / 2, 0.9, 2], [600.0, acc, 0.9, 5]] if curve else None}


def reported(es=(0.05, 0.07, 0.06), grpo=(0.06, 0.04, 0.05), curve=True):
    return {"budget_s": 600.0, "task": "countdown", "task_options": {"max_numbers": 4}, "tuned": "chosen",
            "before": {"accuracy": 0.04, "formatted": 0.7, "reward": 0.1, "problems": 1958},
            "runs": {"es": [run("es", 401 + i, a, curve) for i, a in enumerate(es)],
                     "grpo": [run("grpo", 401 + i, a, curve) for i, a in enumerate(grpo)]}}


def test_the_result_holds_the_promised_keys_and_the_registered_decision(tmp_path):
    r = prereg_result.build("sparse", reported(), {"tuning": {"seeds": [1]}}, {"max_target": 199})
    assert r["es_median"] == 0.06 and r["grpo_median"] == 0.05 and r["es_wins"] is True
    assert r["start"] == 0.04 and r["seeds"] == [401, 402, 403] and r["held_out_problems"] == 1958
    assert r["budget_s"] == 600.0 and r["curve"]["es"]["402"] == [[0.0, 0.04], [300.0, 0.035], [600.0, 0.07]]
    assert r["tuning"] == {"seeds": [1]} and r["start_check"] == {"max_target": 199}
    assert r["prediction"].startswith("**ES ≥ GRPO on the median, by tying**")
    assert r["prereg"] == "bench/prereg/llm_prereg_sparse.md"
    assert prereg_result.build("sparse", reported(es=(0.01, 0.02, 0.03)))["es_wins"] is False
    path = prereg_result.plot(r, tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 1000 and path.endswith("p.png")


def test_runs_without_a_curve_or_a_tuning_only_file_are_refused(tmp_path):
    with pytest.raises(ValueError, match="no held-out curve for es seed 401"):
        prereg_result.build("sparse", reported(curve=False))
    with pytest.raises(ValueError, match="holds no runs"):
        prereg_result.build("sparse", {**reported(), "runs": {}})
    bad = tmp_path / "x.txt"
    bad.write_text("table only\n")
    assert prereg_result.main(["--name", "sparse", "--reported", str(bad)]) == 2


def test_the_last_json_line_of_a_study_file_is_read(tmp_path):
    f = tmp_path / "r.txt"
    f.write_text("a table\n" + json.dumps({"x": 1}) + "\n" + json.dumps({"x": 2}) + "\nnote\n")
    assert prereg_result.last_json(f) == {"x": 2}


def k_arm(arm, k, accs, seeds=(201, 202, 203)):
    return {arm: [{**run("es", s, a), "settings": {"subspace": k}} for s, a in zip(seeds, accs)]}


def test_reports_of_one_registration_merge_and_es_arms_get_medians_by_k(tmp_path):
    first = {**reported(), "runs": {**k_arm("es", 1024, (0.3, 0.32, 0.31)), "grpo": reported()["runs"]["grpo"]}}
    arms = {**reported(), "runs": {**k_arm("es_k256", 256, (0.2, 0.25, 0.3)), **k_arm("es_k4096", 4096, (0.1,) * 3)},
            "tuned": "given"}
    merged = prereg_result.merge([first, arms])
    assert sorted(merged["runs"]) == ["es", "es_k256", "es_k4096", "grpo"] and merged["tuned"] == ["chosen", "given"]
    r = prereg_result.build("mechanism", merged)
    assert r["es_median"] == 0.31 and r["grpo_median"] == 0.05 and r["es_wins"] is True  # the headline arm decides
    assert r["es_median_by_k"] == {"1024": 0.31, "256": 0.25, "4096": 0.1}
    assert r["es_median_by_arm"] == {"es": 0.31, "es_k256": 0.25, "es_k4096": 0.1}
    assert "grpo" not in r["es_median_by_arm"] and set(r["curve"]) == {"es", "es_k256", "es_k4096", "grpo"}
    prereg_result.plot(r, tmp_path / "m.png")
    assert (tmp_path / "m.png").stat().st_size > 1000
    one = prereg_result.build("sparse", prereg_result.merge([reported()]))
    assert "es_median_by_arm" not in one and "es_median_by_k" not in one  # one ES arm, no subspace: as before


def test_reports_that_are_not_one_registration_are_refused():
    with pytest.raises(ValueError, match="differs from the first in budget_s"):
        prereg_result.merge([reported(), {**reported(), "budget_s": 1200.0}])
    with pytest.raises(ValueError, match="differs from the first in before"):
        prereg_result.merge([reported(), {**reported(), "before": {"accuracy": 0.5}}])
    with pytest.raises(ValueError, match="es seed 401 is in two reported files"):
        prereg_result.merge([reported(), reported()])
    with pytest.raises(ValueError, match="no reported file"):
        prereg_result.merge([])


def test_a_studys_last_json_object_line_is_what_is_read_back():
    import study_cli
    assert study_cli.last_json('table\n{"a": 1}\n[1, 2]\nnot json\n') == {"a": 1}  # a list line is skipped
    assert study_cli.last_json("") is None and study_cli.last_json(None) is None


def signal(k, b, steps):
    return {"bench": "llm-signal", "subspace": k, "es_b_simple": b, "es_b_simple_lo": b / 2, "es_b_simple_hi": None,
            "es_b_simple_at_least": b / 3, "es_b_simple_floor": 8 * (k - 1), "es_b_simple_over_floor": b / (8 * (k - 1)),
            "es_b_crit": None, "rows": [{"method": "es", "b_simple": b}],
            "critical": {"settings": {"gain": 0.02}, "rows": [{"population": p, "steps": s} for p, s in steps.items()]}}


def test_the_signal_step_is_kept_per_subspace_size_as_measured(tmp_path):
    merged = prereg_result.merge([{**reported(), "runs": {**k_arm("es", 1024, (0.3, 0.32, 0.31)),
                                                          "grpo": reported()["runs"]["grpo"]}}])
    r = prereg_result.build("mechanism", merged, signals=[signal(256, 2.3e5, {8: 300.0, 32: None}),
                                                          signal(1024, 4e5, {8: None})])
    assert set(r["signal_by_k"]) == {"256", "1024"}
    s = r["signal_by_k"]["256"]
    assert s["b_simple"] == 2.3e5 and s["b_simple_floor"] == 2040 and s["b_simple_hi"] is None
    assert s["critical_steps"] == {"8": 300.0, "32": None} and s["critical_settings"] == {"gain": 0.02}
    with pytest.raises(ValueError, match="two --signal files measured k = 256"):
        prereg_result.build("mechanism", merged, signals=[signal(256, 1.0, {}), signal(256, 2.0, {})])
    with pytest.raises(ValueError, match="measured no subspace"):
        prereg_result.build("mechanism", merged, signals=[{**signal(256, 1.0, {}), "subspace": None}])
    assert "signal_by_k" not in prereg_result.build("mechanism", merged)
    f = tmp_path / "s.txt"
    f.write_text("table\n" + json.dumps(signal(4096, 1e6, {8: None})) + "\n")
    rep = tmp_path / "r.txt"
    rep.write_text(json.dumps(merged) + "\n")
    out = tmp_path / "m.json"
    assert prereg_result.main(["--name", "mechanism", "--reported", str(rep), "--signal", str(f), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["signal_by_k"]["4096"]["b_simple"] == 1e6


def test_the_rule_reads_the_es_arm_the_registration_chose_on_tuning(tmp_path):
    """The anchors' amendment 1: two ES arms, the headline the one that scored higher on the tuning seed."""
    runs = {**k_arm("es_full", None, (0.30, 0.31, 0.29)), **k_arm("es_sub", 4096, (0.27, 0.26, 0.28)),
            "grpo": [run("grpo", s, a) for s, a in zip((201, 202, 203), (0.28, 0.30, 0.29))]}
    rep = {**reported(), "runs": runs}
    with pytest.raises(ValueError, match="several ES arms.*--headline ARM"):
        prereg_result.build("anchors", rep)
    with pytest.raises(ValueError, match="--headline 'grpo' is not an ES arm"):
        prereg_result.build("anchors", rep, headline="grpo")
    full = prereg_result.build("anchors", rep, headline="es_full")
    assert (full["es_arm"], full["es_median"], full["grpo_median"], full["es_wins"]) == ("es_full", 0.30, 0.29, True)
    sub = prereg_result.build("anchors", rep, headline="es_sub")
    assert (sub["es_median"], sub["es_wins"]) == (0.27, False)
    assert sub["es_median_by_arm"] == {"es_full": 0.30, "es_sub": 0.27}
    prereg_result.plot(sub, tmp_path / "a.png")
    assert (tmp_path / "a.png").stat().st_size > 1000
