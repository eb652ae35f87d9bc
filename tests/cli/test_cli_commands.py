"""End-to-end CLI: exit codes, error messages, the --json line, eval and env."""
import json
import subprocess
import sys

import pytest
import torch

from hyperscalees.cli import main as main_mod
from hyperscalees.engine.checkpoint import load_checkpoint_config

from cli_helpers import invoke


@pytest.mark.parametrize("argv,bad", [
    (["train", "nosuchtask"], "nosuchtask"),
    (["train", "xor", "--optimizer", "lbfgs"], "lbfgs"),
    (["train", "xor", "--sigma", "-0.5"], "-0.5"),
    (["train", "xor", "--sigma", "abc"], "abc"),
    (["train", "xor", "--population", "7"], "7"),
    (["train", "xor", "--strategy", "cma"], "cma"),
    (["train", "xor", "--activation", "sine", "--steps", "1"], "sine"),
    (["train", "xor", "--resume", "{tmp}/nonexistent/run", "--steps", "1"], "{tmp}/nonexistent/run"),
    (["eval", "{tmp}/nonexistent/run"], "{tmp}/nonexistent/run"),
    (["train", "xor", "--device", "bogus"], "bogus"),
])
def test_user_errors_exit_2_naming_the_bad_value(argv, bad, capsys, tmp_path):
    argv, bad = [a.format(tmp=tmp_path) for a in argv], bad.format(tmp=tmp_path)  # tests write only in tmp_path
    code, out, err = invoke(argv, capsys)
    assert code == 2
    assert bad in err and "Traceback" not in err
    assert not (tmp_path / "nonexistent").exists()  # issue 19, item 7: --resume created it (at / in make test)


def test_choices_are_listed_for_unknown_task_and_optimizer(capsys):
    _, _, err = invoke(["train", "nosuchtask"], capsys)
    assert all(t in err for t in ("xor", "predict2", "poly", "digits"))
    _, _, err = invoke(["train", "xor", "--optimizer", "lbfgs"], capsys)
    assert "adam" in err and "sgd" in err


def test_json_summary_is_the_last_line_and_eval_agrees(tmp_path, capsys):
    code, out, _ = invoke(["train", "xor", "--population", "32", "--steps", "3", "--out", str(tmp_path),
                           "--json"], capsys)
    assert code == 0
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["task"] == "xor" and summary["steps"] == 3 and summary["wall_time"] > 0
    assert set(summary["paths"]) >= {"checkpoint", "metrics_jsonl", "metrics_csv", "plot"}
    assert len(out.strip().splitlines()) == 1  # no progress bar or chatter on stdout
    code, out, _ = invoke(["eval", str(tmp_path), "--json"], capsys)
    assert code == 0
    ev = json.loads(out.strip().splitlines()[-1])
    assert ev["step"] == 3 and ev["metrics"] == summary["metrics"]
    code, out, _ = invoke(["eval", str(tmp_path)], capsys)
    assert code == 0 and "mse" in out


def test_human_summary_and_resume(tmp_path, capsys):
    code, out, _ = invoke(["train", "predict2", "--population", "16", "--steps", "2", "--out", str(tmp_path)], capsys)
    assert code == 0 and "2/2 steps" in out and "abs_error" in out
    # flags not typed again come from the saved run (population 16, not the task default)
    code, out, _ = invoke(["train", "predict2", "--steps", "4", "--resume", str(tmp_path), "--json"], capsys)
    assert code == 0 and json.loads(out.splitlines()[-1])["steps"] == 4
    assert load_checkpoint_config(tmp_path)["es"]["population"] == 16
    code, out, _ = invoke(["train", "predict2", "--resume", str(tmp_path), "--json"], capsys)  # already at 4
    assert code == 0 and json.loads(out.splitlines()[-1])["steps"] == 4
    code, _, err = invoke(["train", "predict2", "--population", "18", "--steps", "4", "--resume", str(tmp_path)],
                          capsys)
    assert code == 2 and "es.population" in err
    code, _, err = invoke(["train", "predict2", "--strategy", "open_es", "--resume", str(tmp_path)], capsys)
    assert code == 2 and "strategy" in err and "open_es" in err


def test_env_reports_versions(capsys):
    code, out, _ = invoke(["env", "--json"], capsys)
    info = json.loads(out)
    assert code == 0 and info["torch"] and info["torch_threads"] >= 1 and "default_device" in info
    from hyperscalees.noise import native
    assert info["native_noise_kernel"] is native.available()


def test_python_dash_m_runs_the_cli():
    res = subprocess.run([sys.executable, "-m", "hyperscalees", "train", "--help"], capture_output=True, text=True)
    assert res.returncode == 0 and "digits" in res.stdout
    res = subprocess.run([sys.executable, "-m", "hyperscalees", "train", "bogus"], capture_output=True, text=True)
    assert res.returncode == 2 and "bogus" in res.stderr


def test_a_command_that_fails_to_import_does_not_break_the_others(monkeypatch, capsys):
    real = main_mod.importlib.import_module

    def fake(name, *args, **kwargs):
        if name == "hyperscalees.cli.env":
            raise ImportError("env is broken")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(main_mod.importlib, "import_module", fake)
    code, out, _ = invoke(["train", "xor", "--population", "8", "--steps", "1", "--json"], capsys)
    assert code == 0 and json.loads(out)["steps"] == 1
    code, _, err = invoke(["env"], capsys)
    assert code == 1 and "env is broken" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_unavailable_device_is_a_clear_error(capsys):
    code, _, err = invoke(["train", "xor", "--device", "cuda", "--steps", "1"], capsys)
    assert code == 2 and "'cuda' is not available" in err
