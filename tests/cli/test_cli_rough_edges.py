"""Issue 19's rough edges: each one line and the right exit code, never a misleading message."""
import warnings

import pytest
import torch

from hyperscalees.cli.generate import terminal_safe

from cli_helpers import invoke

XOR = ["train", "xor", "--population", "8", "--steps", "2"]


@pytest.fixture
def xor_run(tmp_path, capsys):
    code, _, _ = invoke(XOR + ["--out", str(tmp_path / "run")], capsys)
    assert code == 0
    return tmp_path / "run"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_eval_on_a_missing_device_blames_the_device_not_the_file(xor_run, capsys):
    code, _, err = invoke(["eval", str(xor_run), "--device", "cuda"], capsys)
    assert code == 2 and "device 'cuda' is not available" in err and "damaged" not in err


def test_generate_escapes_control_characters_for_a_terminal():
    assert terminal_safe("ok\n\tline\x1b[2J\x05") == "ok\n\tline\\x1b[2J\\x05"


def test_warnings_are_note_lines_without_a_source_path(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        code, _, err = invoke(["train", "xor", "--lr", "1e38", "--optimizer", "sgd", "--steps", "5"], capsys)
    assert code == 2 and any(line.startswith("note: ") and "non-finite fitness value(s) treated as the worst"
                             in line for line in err.splitlines())
    assert "RuntimeWarning" not in err and ".py:" not in err
    assert "error: every fitness of step" in err


def test_a_seed_beyond_64_bits_is_refused_in_one_line(capsys):
    code, _, err = invoke(XOR + ["--seed", "99999999999999999999"], capsys)
    assert code == 2 and "seed must fit in 64 bits" in err and "Overflow" not in err


def test_rendering_more_episodes_than_evaluated_is_refused(xor_run, capsys, tmp_path):
    code, _, err = invoke(["eval", str(xor_run), "--episodes", "1", "--render", str(tmp_path / "a.gif"),
                           "--render-episodes", "3"], capsys)
    assert code == 2 and "--render-episodes 3 is more than the --episodes 1" in err


def test_gymnasium_module_syntax_imports_a_custom_environment(tmp_path, monkeypatch):
    gym = pytest.importorskip("gymnasium")
    (tmp_path / "hs_custom_envs.py").write_text(
        "import gymnasium as gym\n"
        "gym.register(id='HsCustom-v0', entry_point='gymnasium.envs.classic_control:CartPoleEnv', "
        "max_episode_steps=20)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from hyperscalees.tasks.rl import RLTask
    try:
        task = RLTask(options={"env": "hs_custom_envs:HsCustom-v0", "eval_episodes": 2})
        assert task.evaluate(task.build_model())["eval_return"] > 0
        with pytest.raises(ValueError, match="cannot import module 'no_such_module_hs'"):
            RLTask(options={"env": "no_such_module_hs:X-v0"})
    finally:
        gym.registry.pop("HsCustom-v0", None)


def test_more_threads_than_cores_warns():
    pytest.importorskip("gymnasium")
    import os
    from hyperscalees.tasks.rl import RLTask
    with pytest.warns(RuntimeWarning, match="more than the .* CPU cores"):
        RLTask(options={"env": "CartPole-v1", "threads": (os.cpu_count() or 1) + 1})


@pytest.mark.parametrize("model", ["egg", "int8-transformer", "float-gru"])
def test_arch_defaults_are_train_lms_and_count_from_shapes(model, capsys):
    import json
    import math
    from hyperscalees.models.registry import build_lm
    from hyperscalees.tasks.lm.task import LMOptions, lm_sizes
    o = LMOptions()
    built = build_lm(model, 256, **lm_sizes(model, o.hidden, o.layers, o.window, o.heads))
    code, out, _ = invoke(["arch", model, "--json"], capsys)
    assert code == 0 and json.loads(out)["total"] == sum(math.prod(s) for _, s, _ in built.describe())
    code, out, err = invoke(["arch", model, "--hidden", "10000000", "--json"], capsys)  # never allocated
    assert code == 0 and json.loads(out)["total"] > 10**14 and "Traceback" not in err


def test_a_relative_data_path_is_stored_absolute(tmp_path, monkeypatch):
    from hyperscalees.engine import make_config
    monkeypatch.chdir(tmp_path)
    cfg = make_config("lm", options={"data": "corpus.txt"})
    assert cfg.options["data"] == str(tmp_path / "corpus.txt")   # eval/generate/--resume from anywhere


def test_start_notes_are_not_printed_before_an_error(capsys):
    pytest.importorskip("gymnasium")
    code, _, err = invoke(["train", "rl", "--env", "CartPole-v9", "--steps", "1"], capsys)
    assert code == 2 and "note:" not in err and len(err.strip().splitlines()) == 1
    code, _, err = invoke(XOR, capsys)
    assert code == 0 and "note: no --out given" in err


@pytest.mark.parametrize("argv,flag", [
    (["train", "lm", "--trainer", "backprop", "--sigma", "0.1"], "--sigma does not apply to --trainer backprop"),
    (["train", "lm", "--optimizer", "muon"], "--optimizer muon does not apply: this run's update rule is"),
])
def test_flags_that_would_be_ignored_are_refused(argv, flag, capsys):
    code, _, err = invoke(argv + ["--steps", "1"], capsys)
    assert code == 2 and flag in err and len(err.strip().splitlines()) == 1
