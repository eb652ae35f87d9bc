"""``train llm --dataset FILE.jsonl --reward FILE.py:FN``: your prompts, your reward, from the command line.

The acceptance: a JSONL of prompts with extra fields and a reward file train a local Hugging Face
model for a few steps, the reward receives the fields, the export loads in plain transformers; a
broken file or a raising reward exits 2 with one line and leaves no run directory.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")
from hyperscalees.cli.main import main  # noqa: E402
from hyperscalees.tasks.problems import PromptFile  # noqa: E402
from tiny import save  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py
FAST = ["--population", "4", "--sigma", "0.05", "--lr", "0.01", "--prompts", "2", "--max-new-tokens", "4",
        "--eval-prompts", "2", "--eval-every", "1", "--chunk", "4", "--json"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return str(save("llama", tmp_path_factory.mktemp("m") / "llama"))


def write_dataset(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def rows(n: int = 24, **extra) -> list[dict]:
    return [{"prompt": f"{i} + {i} =", "answer": str(2 * i), "level": i % 3, **extra} for i in range(n)]


def reward_file(tmp_path: Path, body: str) -> str:
    path = tmp_path / "my_reward.py"
    path.write_text(body)
    return f"{path}:reward"


RECORDING = """import json
def reward(prompt, completion, answer, level):
    with open({log!r}, "a") as f:
        f.write(json.dumps({{"prompt": prompt, "answer": answer, "level": level}}) + "\\n")
    return float(len(set(completion))) + (1.0 if answer in completion else 0.0)
"""


def test_own_prompts_and_reward_train_with_the_fields_and_export_for_transformers(folder, tmp_path, capsys,
                                                                                  no_plot):
    from transformers import AutoModelForCausalLM
    data = rows()
    dataset = write_dataset(tmp_path / "prompts.jsonl", data)
    log = tmp_path / "calls.jsonl"
    spec = reward_file(tmp_path, RECORDING.format(log=str(log)))
    out = tmp_path / "run"
    assert main(["train", "llm", "--model", folder, "--dataset", dataset, "--reward", spec, "--steps", "2",
                 "--out", str(out), *FAST]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["metric"] == "reward" and summary["metrics"]["reward_errors"] == 0
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    by_prompt = {r["prompt"]: {"answer": r["answer"], "level": r["level"]} for r in data}
    assert len(calls) > 8 and all(by_prompt[c["prompt"]] == {"answer": c["answer"], "level": c["level"]}
                                  for c in calls)  # every call got its own line's fields
    held_out = set(PromptFile(dataset).splits["test"])
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 1, 2] and all("reward" in m for m in metrics)  # before, during, after
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert samples and all(s["prompt"] in held_out for s in samples)
    model = AutoModelForCausalLM.from_pretrained(summary["paths"]["export"], local_files_only=True)
    assert model.config.vocab_size > 0


@pytest.mark.parametrize("content, message", [
    ('{"prompt": "1 + 1 ="}\nnot json\n', "line 2 is not JSON"),
    ('{"question": "1 + 1 ="}\n', "line 1 has no \"prompt\" string"),
    ("", "holds no prompts"),
    ("[1, 2]\n", "line 1 is not a JSON object"),
])
def test_a_broken_dataset_exits_2_with_one_line_and_writes_nothing(folder, tmp_path, capsys, content, message):
    dataset = tmp_path / "bad.jsonl"
    dataset.write_text(content)
    spec = reward_file(tmp_path, "def reward(prompt, completion, **fields):\n    return 1.0\n")
    out = tmp_path / "run"
    assert main(["train", "llm", "--model", folder, "--dataset", str(dataset), "--reward", spec, "--steps", "1",
                 "--out", str(out), *FAST]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and err[0].startswith("hyperscalees train llm: error: --dataset")
    assert not out.exists()


@pytest.mark.parametrize("body, message", [
    ("def reward(prompt, completion, **fields):\n    raise RuntimeError('my reward is broken')\n",
     "RuntimeError: my reward is broken"),
    ("def reward(prompt, completion, **fields):\n    return 'good'\n", "not a number"),
    ("def reward(prompt, completion):\n    return 1.0\n", "unexpected keyword argument"),
])
def test_a_failing_reward_exits_2_with_one_line_and_leaves_no_run_directory(folder, tmp_path, capsys, body,
                                                                             message):
    dataset = write_dataset(tmp_path / "prompts.jsonl", rows())
    out = tmp_path / "run"
    assert main(["train", "llm", "--model", folder, "--dataset", dataset, "--reward", reward_file(tmp_path, body),
                 "--steps", "1", "--out", str(out), *FAST]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "failed on a trial call" in err[0] and message in err[0], err
    assert not out.exists()


@pytest.mark.parametrize("body, options, message", [
    ("def reward(prompt, completion, **fields):\n    if completion:\n        raise ValueError('boom')\n"
     "    return 0.0\n", [], "ValueError: boom"),
    ("import time\ndef reward(prompt, completion, **fields):\n    if completion:\n        time.sleep(30)\n"
     "    return 0.0\n", ["--reward-timeout", "0.3"], "timeout"),
])
def test_a_step_in_which_every_reward_failed_ends_the_run_with_exit_2(folder, tmp_path, capsys, no_plot, body,
                                                                      options, message):
    """Defect 1: a reward failing on every real answer used to train on nothing, exit 0, in silence."""
    dataset = write_dataset(tmp_path / "prompts.jsonl", rows())
    out = tmp_path / "run"
    assert main(["train", "llm", "--model", folder, "--dataset", dataset, "--reward", reward_file(tmp_path, body),
                 "--steps", "3", "--out", str(out), "--no-eval-at-start", *FAST, "--eval-every", "10", *options]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "every reward call of step 1 failed" in err[0] and message in err[0], err
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert logged[-1]["step"] == 1  # stopped after the first step, which the log keeps


def test_reward_failures_are_counted_in_the_log_and_the_summary(folder, tmp_path, capsys, no_plot):
    dataset = write_dataset(tmp_path / "prompts.jsonl", rows(24) + [{"prompt": f"bad {i} =", "answer": "0",
                                                                     "level": -1} for i in range(24)])
    body = ("def reward(prompt, completion, answer, level):\n    if level < 0 and completion:\n"
            "        raise KeyError('no such level')\n    return float(len(completion))\n")
    out = tmp_path / "run"
    assert main(["train", "llm", "--model", folder, "--dataset", dataset, "--reward", reward_file(tmp_path, body),
                 "--steps", "2", "--out", str(out), "--no-export", *FAST, "--prompts", "24"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["metrics"]["reward_errors"] > 0 and "KeyError" in summary["metrics"]["reward_last_error"]
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["reward_errors"] for r in logged] == sorted(r["reward_errors"] for r in logged) and \
        logged[-1]["reward_errors"] == summary["metrics"]["reward_errors"]
    assert "export" not in summary["paths"] and not (out / "export").exists()  # --no-export


def test_dataset_and_reward_flags_are_checked_and_say_what_they_do(folder, tmp_path, capsys, no_plot):
    dataset = write_dataset(tmp_path / "prompts.jsonl", rows())
    assert main(["train", "llm", "--model", folder, "--dataset", dataset, "--steps", "1"]) == 2
    assert "--dataset needs --reward" in capsys.readouterr().err
    assert main(["train", "llm", "--model", folder, "--task", "countdown", "--eval-prompts", "100000000",
                 "--steps", "1"]) == 2
    assert "--eval-prompts 100000000" in capsys.readouterr().err
    spec = reward_file(tmp_path, "def reward(prompt, completion):\n    return float(len(completion))\n")
    assert main(["train", "llm", "--model", folder, "--task", "arithmetic", "--reward", spec, "--steps", "1",
                 *FAST]) == 0
    assert "--reward without --dataset scores the arithmetic problem set's prompts" in capsys.readouterr().err


def test_a_model_folder_without_a_tokenizer_is_named_as_such(tmp_path, capsys):
    from tiny import build
    build("llama").save_pretrained(tmp_path / "bare")
    assert main(["train", "llm", "--model", str(tmp_path / "bare"), "--task", "arithmetic", "--steps", "1",
                 *FAST]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has no tokenizer" in err[0]


def test_a_prompt_file_splits_by_content_and_keeps_each_lines_fields(tmp_path):
    data = rows(40)
    first = PromptFile(write_dataset(tmp_path / "a.jsonl", data))
    second = PromptFile(write_dataset(tmp_path / "b.jsonl", data[::-1] + rows(60)[40:]))
    assert set(first.splits["test"]) <= set(second.splits["test"])  # reordering, growing: held out stays held out
    assert set(first.splits["train"]).isdisjoint(first.splits["test"]) and len(first) == 40
    assert first.fields("3 + 3 =") == {"answer": "6", "level": 0}
    with pytest.raises(ValueError, match="'completion' would clash"):
        PromptFile(write_dataset(tmp_path / "c.jsonl", rows(4, completion="x")))
    with pytest.raises(ValueError, match="repeats an earlier prompt with other fields"):
        PromptFile(write_dataset(tmp_path / "d.jsonl", rows(4) + [{"prompt": "1 + 1 =", "answer": "3"}]))
