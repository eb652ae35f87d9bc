"""``hyperscalees train llm`` end to end on a tiny Llama folder: held-out metrics, export, exact resume."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
from hyperscalees.cli.main import main  # noqa: E402
from hyperscalees.engine import make_config, run  # noqa: E402
from hyperscalees.tasks.problems import PROBLEM_SETS  # noqa: E402

ARITH = {"task": "arithmetic", "prompts": 2, "max_new_tokens": 8, "eval_prompts": 4}


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py



def config(folder, out, steps=3, resume=None, reward="", options=(), **engine):
    return make_config("llm", es={"population": 8, "sigma": 0.05, "lr": 0.01},
                       engine={"steps": steps, "out": None if resume else str(out), "resume": resume,
                               "eval_every": 2, "json": True, "chunk": 4, **engine},
                       options={"model": folder, "reward": reward, **ARITH, **dict(options)})


def test_train_llm_scores_held_out_problems_exports_and_resumes_exactly(folder, variety, tmp_path, no_plot):
    from transformers import AutoModelForCausalLM
    full = run(config(folder, tmp_path / "full", steps=4, reward=variety))
    assert set(full["metrics"]) >= {"accuracy", "formatted", "reward"} and 0 <= full["metrics"]["accuracy"] <= 1
    exported = AutoModelForCausalLM.from_pretrained(full["paths"]["export"], local_files_only=True)
    run(config(folder, tmp_path / "part", steps=2, reward=variety))
    resumed = run(config(folder, None, steps=4, resume=str(tmp_path / "part"), reward=variety))
    assert resumed["steps"] == 4
    a = AutoModelForCausalLM.from_pretrained(resumed["paths"]["export"], local_files_only=True).state_dict()
    b = exported.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # resume = uninterrupted run
    start = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).state_dict()
    assert any(not torch.equal(start[k], b[k]) for k in b)  # four steps moved the model
    assert _lines(tmp_path / "part" / "samples.jsonl") == _lines(full["paths"]["samples"])  # resumed samples too


def test_the_export_reloaded_in_plain_transformers_reproduces_the_held_out_score(folder, variety, tmp_path, no_plot):
    """The acceptance's last line: what ``train llm`` exports, loaded by transformers alone and scored by
    the shared evaluator, gives the run's final held-out metrics and the same answers it logged."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from hyperscalees import llm
    from hyperscalees.tasks.problems.evaluate import held_out
    from hyperscalees.tasks.finetune import SAMPLES
    summary = run(config(folder, tmp_path / "run", steps=3, reward=variety))  # evaluations at steps 2 and 3
    export = summary["paths"]["export"]
    plain = AutoModelForCausalLM.from_pretrained(export, local_files_only=True).eval()
    tok = AutoTokenizer.from_pretrained(export, local_files_only=True)
    tok.padding_side = "left"
    records = []
    metrics = held_out(PROBLEM_SETS["arithmetic"](), plain, tok, llm.Sampling(max_new_tokens=ARITH["max_new_tokens"]),
                       ARITH["eval_prompts"], samples=records)
    assert metrics == {k: summary["metrics"][k] for k in metrics}
    logged = [r for r in _lines(summary["paths"]["samples"]) if r["step"] == 3]
    assert len(logged) == SAMPLES and [r["completion"] for r in records[:SAMPLES]] == [r["completion"] for r in logged]
    start = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).eval()
    first, _, _ = llm.complete(start, tok, [r["prompt"] for r in logged], llm.Sampling(max_new_tokens=8))
    assert first != [r["completion"] for r in logged]  # the trained answers are not the starting model's


def _lines(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def test_each_evaluation_writes_held_out_samples_and_logs_one(folder, tmp_path, no_plot, capsys):
    from hyperscalees.tasks.finetune import SAMPLES
    summary = run(config(folder, tmp_path / "run", steps=3))  # evaluations at the start, steps 2 and 3
    rows = _lines(summary["paths"]["samples"])
    assert [r["step"] for r in rows] == [0] * SAMPLES + [2] * SAMPLES + [3] * SAMPLES
    test = PROBLEM_SETS["arithmetic"]()
    assert [r["prompt"] for r in rows[:SAMPLES]] == test.prompts("test", 0, SAMPLES)
    for r in rows:
        assert set(r) == {"step", "prompt", "completion", "reward", "correct"}
        assert r["reward"] == test.reward(r["prompt"], r["completion"])  # the verifier's verdict on that answer
    err = capsys.readouterr().err
    assert err.count("sample at step ") == 3 and "completion=" in err and "reward=" in err


def test_held_out_accuracy_before_training_is_step_0_and_the_summarys_before(folder, variety, tmp_path, no_plot):
    """Before, during and after: a fresh run scores its starting model first (train llm's default), as
    the shared evaluator scores the model folder; a resumed run does not score it again;
    ``eval_at_start=False`` (bench llm's ES runs, which score the start themselves) skips it."""
    from hyperscalees import llm
    from hyperscalees.tasks.problems.evaluate import held_out
    summary = run(config(folder, tmp_path / "run", steps=2, reward=variety))
    start, tok = llm.load_causal_lm(folder)
    expected = held_out(PROBLEM_SETS["arithmetic"](), start, tok, llm.Sampling(max_new_tokens=ARITH["max_new_tokens"]),
                        ARITH["eval_prompts"])
    assert {k: summary["before"][k] for k in expected} == expected
    assert summary["before"]["reward_errors"] == summary["before"]["reward_timeouts"] == 0  # --reward's counters
    rows = _lines(summary["paths"]["metrics_jsonl"])
    assert rows[0]["step"] == 0 and {k: rows[0][k] for k in expected} == expected and "fitness_mean" not in rows[0]
    assert [r["step"] for r in rows[1:]] == [1, 2]
    resumed = run(config(folder, None, steps=3, resume=str(tmp_path / "run"), reward=variety))
    assert resumed["before"] is None and [r["step"] for r in _lines(resumed["paths"]["metrics_jsonl"])] == [0, 1, 2, 3]
    skipped = run(config(folder, tmp_path / "skip", steps=2, reward=variety, eval_at_start=False))
    assert skipped["before"] is None and _lines(skipped["paths"]["metrics_jsonl"])[0]["step"] == 1


def test_the_cli_refuses_a_missing_model_and_bad_task_options(tmp_path, capsys):
    assert main(["train", "llm", "--steps", "1"]) == 2
    assert "model must name a local model folder" in capsys.readouterr().err
    assert main(["train", "llm", "--model", str(tmp_path), "--task-options", "[1]"]) == 2
    assert "--task-options must be a JSON object" in capsys.readouterr().err
    assert main(["train", "llm", "--model", str(tmp_path / "nope"), "--steps", "1"]) == 2
    assert "no model at" in capsys.readouterr().err
    easy = '{"min_numbers": 3, "max_numbers": 3, "max_value": 9, "min_target": 10, "max_target": 50}'
    assert main(["train", "llm", "--model", str(tmp_path), "--task", "countdown", "--task-options", easy,
                 "--eval-prompts", "900", "--steps", "1"]) == 2   # before any model is loaded or step run
    assert "the test split holds 429 distinct problems, fewer than the 900 asked" in capsys.readouterr().err


def test_training_prompts_depend_on_the_step_only(folder):
    from hyperscalees.tasks.finetune import FinetuneTask
    a = FinetuneTask(seed=1, options={"model": folder, **ARITH})
    b = FinetuneTask(seed=1, options={"model": folder, **ARITH})
    assert a.step_prompts(5) == b.step_prompts(5) != a.step_prompts(6)
    assert set(a.step_prompts(0)).isdisjoint(PROBLEM_SETS["arithmetic"]().prompts("test", 0, 200))


def test_a_stop_request_during_held_out_evaluation_ends_it_within_one_chunk(folder, monkeypatch):
    from hyperscalees import llm
    from hyperscalees.engine.evaluations import Evaluations
    from hyperscalees.tasks.problems import evaluate
    from hyperscalees.tasks.finetune import FinetuneTask
    monkeypatch.setattr(evaluate, "EVAL_CHUNK", 2)
    chunks, real, signal = [], llm.complete, []

    def complete(model, tokenizer, prompts, *args, **kwargs):
        chunks.append(len(prompts))
        if len(chunks) == 1 and signal:
            signal.append("SIGINT")  # Ctrl-C arrives while the first chunk generates
        return real(model, tokenizer, prompts, *args, **kwargs)

    monkeypatch.setattr(llm, "complete", complete)
    task = FinetuneTask(options={"model": folder, **ARITH, "eval_prompts": 6})
    evals = Evaluations(task, task.build_model(), signalled=lambda: signal[-1] if len(signal) > 1 else None)
    assert evals.run(1) and chunks == [2, 2, 2]  # a whole pass: three chunks
    kept, metrics = task.samples(), evals.metrics
    chunks.clear()
    signal.append("armed")
    assert not evals.run(2)
    assert chunks == [2]  # stopped before the second chunk
    assert evals.cut == (2, "SIGINT") and evals.step == 1 and evals.metrics == metrics
    assert task.samples() == kept and task.stop_check is None  # the cut pass changed nothing the task keeps


def test_members_sampling_at_a_temperature_resume_exactly_and_differ_from_greedy(folder, variety, tmp_path, no_plot):
    from transformers import AutoModelForCausalLM

    def weights(summary):
        return AutoModelForCausalLM.from_pretrained(summary["paths"]["export"], local_files_only=True).state_dict()

    def hot(out, steps, resume=None):
        return run(config(folder, out, steps=steps, resume=resume, reward=variety, options={"temperature": 1.5}))

    full = weights(hot(tmp_path / "full", 3))
    hot(tmp_path / "part", 1)
    resumed = weights(hot(None, 3, resume=str(tmp_path / "part")))
    assert all(torch.equal(full[k], resumed[k]) for k in full)  # the sampled draws are resumed too
    greedy = weights(run(config(folder, tmp_path / "greedy", steps=3, reward=variety)))
    assert any(not torch.equal(full[k], greedy[k]) for k in full)  # sampling changed what members wrote


def test_the_temperature_must_be_a_non_negative_number(folder, capsys):
    assert main(["train", "llm", "--model", folder, "--temperature", "-1", "--steps", "1"]) == 2
    assert "temperature must be >= 0 (0: greedy), got -1.0" in capsys.readouterr().err
