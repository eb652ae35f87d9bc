"""bench/llm_vs_grpo.py: the GRPO runner's record, the warm start, the CLI flags, and ``--quick`` end to end."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("transformers")
import grpo_run  # noqa: E402
import llm_runs  # noqa: E402
import llm_vs_grpo as bench_llm  # noqa: E402
from hyperscalees.cli.main import main  # noqa: E402

# trl/transformers/datasets warnings that say nothing about this code (the suite runs with filterwarnings=error)
TRL_WARNINGS = [pytest.mark.filterwarnings("ignore:.*gradient_checkpointing.* is deprecated:FutureWarning"),
                pytest.mark.filterwarnings("ignore::DeprecationWarning:trl.*"),
                pytest.mark.filterwarnings("ignore::DeprecationWarning:datasets.*"),
                pytest.mark.filterwarnings("ignore::DeprecationWarning:multiprocess.*"),
                pytest.mark.filterwarnings("ignore::UserWarning:transformers.*"),
                pytest.mark.filterwarnings("ignore::UserWarning:trl.*")]


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from hyperscalees import llm
    from warm_start import char_llama
    model, tok = char_llama(hidden=32, layers=2, heads=4, seed=0)
    return str(llm.save_pretrained(model, tok, tmp_path_factory.mktemp("m") / "tiny"))


def test_the_grpo_reward_reads_the_completion_up_to_the_stop_string():
    assert grpo_run.cut("x <answer>3</answer> <answer>4</answer>") == "x <answer>3</answer>"
    assert grpo_run.cut("no tag") == "no tag"


def test_the_budget_callback_stops_before_the_next_step_would_pass_the_budget(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(grpo_run.time, "perf_counter", lambda: now[0])
    cb, control = grpo_run.BudgetStop(10.0), SimpleNamespace(should_training_stop=False)
    cb.on_train_begin(None, None, control)
    cb.on_init_end(None, None, control)  # any other event is a no-op
    for t in (3.0, 6.0):
        cb.on_step_begin(None, None, control)
        now[0] = t
        cb.on_step_end(None, None, control)
        cb.on_log(None, None, control, logs={"reward": t / 10})
        assert not control.should_training_stop
    cb.on_step_begin(None, None, control)
    now[0] = 8.5  # a 2.5 s step ends at 8.5 s: the next would end past 10 s
    cb.on_step_end(None, None, control)
    assert control.should_training_stop and cb.stopped == "budget"
    assert cb.curve == [[3.0, 0.3], [6.0, 0.6]]


@pytest.mark.slow
@pytest.mark.parametrize("marks", [0], ids=[""])
def test_the_grpo_runner_trains_and_writes_its_record(folder, capsys, marks):
    pytest.importorskip("trl")
    rc = grpo_run.main(["--model", folder, "--task", "arithmetic", "--seed", "3", "--prompts", "2",
                        "--generations", "2", "--max-new-tokens", "6", "--eval-prompts", "2", "--budget", "600",
                        "--max-steps", "2", "--learning-rate", "1e-3"])
    assert rc == 0
    rec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rec["method"] == "grpo" and rec["seed"] == 3 and rec["steps"] == 2 and rec["stopped"] == "max_steps"
    assert set(rec["before"]) == set(rec["after"]) == {"accuracy", "formatted", "reward"}
    assert rec["settings"]["temperature"] == 1.0 and rec["settings"]["beta"] == 0.0
    assert rec["settings"]["learning_rate"] == 1e-3 and rec["generations"] == 2 * 2 * 2
    assert len(rec["curve"]) == 2 and rec["curve"][0][0] <= rec["curve"][1][0] <= rec["train_s"]


for _m in TRL_WARNINGS:
    test_the_grpo_runner_trains_and_writes_its_record = _m(test_the_grpo_runner_trains_and_writes_its_record)


def test_the_warm_start_trains_saves_and_loads_in_plain_transformers(tmp_path):
    from transformers import AutoModelForCausalLM
    import llm_vs_grpo as bench_llm
    c = dict(bench_llm.configs(quick=True), eval_prompts=2, max_new_tokens=4)
    info = bench_llm.warm_start(tmp_path / "warm", 3 / 60, c, log=lambda *_: None,
                                size={"hidden": 32, "layers": 1, "heads": 2}, batch=4, lr=3e-3)
    assert info["steps"] >= 1 and info["loss"] == info["loss"] and info["before"]["accuracy"] == 0.0
    model = AutoModelForCausalLM.from_pretrained(info["folder"], local_files_only=True)
    assert sum(p.numel() for p in model.parameters()) == info["params"]


def test_supervise_lowers_the_loss_on_the_completion():
    from warm_start import _batch, char_llama, supervise
    model, tok = char_llama(hidden=32, layers=1, heads=2, seed=0)
    pairs = [("2+3=", "5"), ("4+4=", "8")]
    ids, mask, lab = _batch(tok, pairs, "cpu")
    assert (lab[0, :4] == -100).all() and lab[0, 4] == tok.convert_tokens_to_ids("5") and lab[0, 5] == tok.eos_token_id
    def loss():
        with torch.no_grad():
            return model(input_ids=ids, attention_mask=mask, labels=lab).loss.item()
    before = loss()
    supervise(model, tok, lambda s: pairs, seconds=2.0, lr=1e-2, warmup=1)
    assert loss() < before


@pytest.mark.parametrize("argv", [["bench", "throughput", "--side-by-side"], ["bench", "int8", "--warm-start-minutes", "1"],
                                  ["bench", "throughput", "--eval-prompts", "512"]])  # (--runs-dir: rank's own now)
def test_the_studys_flags_are_not_the_installed_benchmarks(argv, capsys):
    """The study's flags left hyperscalees bench with it: there they are unknown flags."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "unrecognized argument" in err and argv[2] in err


@pytest.mark.slow
def test_bench_llm_quick_runs_both_methods_end_to_end(tmp_path, capsys):
    pytest.importorskip("trl")
    assert bench_llm.main(["--quick", "--json", "--runs-dir", str(tmp_path / "runs"),
                 "--plot", str(tmp_path / "curve.png")]) == 0
    rep = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rep["bench"] == "llm" and set(rep["acc_after_median"]) == {"es", "grpo"}
    for m in ("es", "grpo"):
        (run,) = rep["runs"][m]
        assert run["status"] == "ok" and run["steps"] >= 1 and run["curve"], run
        assert (tmp_path / "runs" / f"{m}_seed100.json").exists()
    assert (tmp_path / "curve.png").stat().st_size > 0


def test_warm_start_options_change_the_warm_starts_problems_only(tmp_path, monkeypatch):
    """``{"train_size": 3}``: the warm start sees 3 distinct problems (ES and GRPO keep the task's own)."""
    import llm_vs_grpo as bench_llm
    import warm_start as warm
    seen = []

    def fake_supervise(model, tok, pairs, seconds, lr, log):
        for step in range(6):
            seen.extend(p for p, _ in pairs(step))
        return {"steps": 6, "seconds": 0.0, "loss": 1.0}

    monkeypatch.setattr(warm, "supervise", fake_supervise)
    c = dict(bench_llm.configs(quick=True), eval_prompts=1, max_new_tokens=2)
    info = bench_llm.warm_start(tmp_path / "warm", 1 / 60, c, log=lambda *_: None, options={"train_size": 3},
                                size={"hidden": 16, "layers": 1, "heads": 2}, batch=4)
    assert len(seen) == 24 and len(set(seen)) == 3
    assert info["task_options"] == {**c["task_options"], "train_size": 3} and "train_size" not in c["task_options"]


@pytest.mark.parametrize("kwargs, message", [
    (dict(warm_start_options='{"train_size": 64}'), "needs --warm-start-minutes"),
    (dict(warm_start_minutes=1.0, warm_start_options="[1]"), "must be a JSON object"),
    (dict(warm_start_minutes=1.0, warm_start_options="{oops"), "must be a JSON object"),
    (dict(warm_start_minutes=1.0, warm_start_options='{"train_size": 0}'), "train_size"),
])
def test_bad_warm_start_options_are_refused_before_anything_runs(kwargs, message):
    import llm_vs_grpo as bench_llm
    from hyperscalees.benchmarks.base import BenchSetupError
    with pytest.raises(BenchSetupError, match=message):
        bench_llm.run(methods=("es",), log=lambda *_: None, **kwargs)


@pytest.mark.parametrize("count, message", [(0, "whole number >= 1, got 0"), (2.5, "got 2.5"),
                                            (10**6, r"holds 941 distinct test \(or validation\) problems")])
def test_bad_eval_prompts_are_refused_naming_the_value(count, message):
    import llm_vs_grpo as bench_llm
    from hyperscalees.benchmarks.base import BenchSetupError
    with pytest.raises(BenchSetupError, match=message):
        bench_llm.run(methods=("es",), log=lambda *_: None, eval_prompts=count)


def test_eval_prompts_reach_both_runners_and_the_scorers(tmp_path):
    """One count for every score (GRPO's own evaluations, the test/validation scoring); ES's own closing
    evaluation, inside its clock and never the score, answers a few problems only."""
    import grpo_run
    import llm_vs_grpo as bench_llm
    from hyperscalees.cli.main import build_parser, parse
    c = bench_llm.with_eval_prompts(bench_llm.configs(quick=False), 512)
    assert c["eval_prompts"] == 512 and bench_llm.configs(quick=False)["eval_prompts"] == 128
    es = llm_runs.es_invocation("m", 5, 60.0, tmp_path / "run", c)
    parsed = vars(parse(build_parser(), es[2:]))
    assert parsed["options.eval_prompts"] == llm_runs.ES_RUN_EVAL_PROMPTS < 512
    # the benchmark scores the start itself, outside the clock: ES's budget buys training only
    assert parsed["engine.eval_at_start"] is False
    assert grpo_run.parse(llm_runs.grpo_invocation("m", 5, 60.0, c, 1)[2:]).eval_prompts == 512
    # scored here (the pooled held-out set, snapshots): GRPO's own closing evaluation is not the score,
    # so it answers as few as ES's, not 512 problems past its budget
    for scored in ({"held_out": "pooled"}, {"snapshot_s": 300.0}):
        argv = llm_runs.grpo_invocation("m", 5, 60.0, {**c, **scored}, 1)
        assert grpo_run.parse(argv[2:]).eval_prompts == llm_runs.ES_RUN_EVAL_PROMPTS, scored


def test_running_mean_averages_the_last_window_values():
    from llm_vs_grpo import running_mean
    assert running_mean([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]
    assert running_mean([2.0, 4.0], 10) == [2.0, 3.0]  # fewer values than the window: the mean so far
    assert running_mean([], 3) == []
    with pytest.raises(ValueError, match="window must be a whole number >= 1, got 0"):
        running_mean([1.0], 0)


def test_plot_draws_curves_and_held_out_accuracy(tmp_path):
    pytest.importorskip("matplotlib")
    from llm_vs_grpo import plot_curves
    runs = {m: [{"curve": [[t, (t % 3) / 2] for t in range(1, 40)], "after": {"accuracy": a}}, {"curve": [],
                 "after": None}] for m, a in (("es", 0.3), ("grpo", 0.4))}  # a failed run has neither
    note = plot_curves(runs, tmp_path / "p.png", "t", before=0.35)
    assert note.startswith(f"plot: {tmp_path / 'p.png'}") and (tmp_path / "p.png").stat().st_size > 0


def test_max_new_tokens_is_one_number_for_both_sides_and_bad_ones_are_refused(tmp_path):
    """A chat model's one-step answers need fewer tokens than the char Llama's default 64: the study's
    --max-new-tokens reaches ES's and GRPO's command lines alike."""
    import grpo_run
    import llm_vs_grpo as bench_llm
    from hyperscalees.benchmarks.base import BenchSetupError
    from hyperscalees.cli.main import build_parser, parse
    from study_cli import parser
    p = parser("llm_vs_grpo.py", "")
    bench_llm.flags(p)
    assert vars(p.parse_args(["--max-new-tokens", "48"]))["max_new_tokens"] == 48
    for bad in (0, -3, 2.5, True):
        with pytest.raises(BenchSetupError, match=f"--max-new-tokens must be a whole number >= 1, got {bad!r}"):
            bench_llm.run(methods=("es",), log=lambda *_: None, max_new_tokens=bad)
    c = {**bench_llm.configs(quick=False), "max_new_tokens": 48}
    es = vars(parse(build_parser(), llm_runs.es_invocation("m", 5, 60.0, tmp_path / "run", c)[2:]))
    assert es["options.max_new_tokens"] == 48
    assert grpo_run.parse(llm_runs.grpo_invocation("m", 5, 60.0, c, 1)[2:]).max_new_tokens == 48
