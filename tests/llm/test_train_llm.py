"""``hyperscalees train llm`` end to end on a tiny Llama folder: held-out metrics, export, exact resume."""
from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")
from hyperscalees.cli.main import main  # noqa: E402
from hyperscalees.engine import make_config, run  # noqa: E402
from hyperscalees.tasks.llm import LLM_TASKS  # noqa: E402
from tiny import save  # noqa: E402

ARITH = {"task": "arithmetic", "prompts": 2, "max_new_tokens": 8, "eval_prompts": 4}


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return str(save("llama", tmp_path_factory.mktemp("m") / "llama"))


@pytest.fixture(scope="module")
def variety(tmp_path_factory):
    """A user reward file: distinct characters written (a random model's answers all score 0 on the task)."""
    path = tmp_path_factory.mktemp("r") / "variety.py"
    path.write_text("def variety(prompt, completion):\n    return float(len(set(completion)))\n")
    return f"{path}:variety"


def config(folder, out, steps=3, resume=None, reward="", **engine):
    return make_config("llm", es={"population": 8, "sigma": 0.05, "lr": 0.01},
                       engine={"steps": steps, "out": None if resume else str(out), "resume": resume,
                               "eval_every": 2, "json": True, "chunk": 4, **engine},
                       options={"model": folder, "reward": reward, **ARITH})


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


def test_the_cli_refuses_a_missing_model_and_bad_task_options(tmp_path, capsys):
    assert main(["train", "llm", "--steps", "1"]) == 2
    assert "model must name a local model folder" in capsys.readouterr().err
    assert main(["train", "llm", "--model", str(tmp_path), "--task-options", "[1]"]) == 2
    assert "--task-options must be a JSON object" in capsys.readouterr().err
    assert main(["train", "llm", "--model", str(tmp_path / "nope"), "--steps", "1"]) == 2
    assert "no model at" in capsys.readouterr().err


def test_training_prompts_depend_on_the_step_only(folder):
    from hyperscalees.tasks.llm.finetune import LLMTask
    a = LLMTask(seed=1, options={"model": folder, **ARITH})
    b = LLMTask(seed=1, options={"model": folder, **ARITH})
    assert a.step_prompts(5) == b.step_prompts(5) != a.step_prompts(6)
    assert set(a.step_prompts(0)).isdisjoint(LLM_TASKS["arithmetic"]().prompts("test", 0, 200))
