"""``train TASK --mup [BASE]``: muP from the command line where the model has a width, refused by name elsewhere."""
import json

import pytest

from hyperscalees.engine import make_config
from hyperscalees.engine.checkpoint import load_checkpoint_config
from hyperscalees.tasks import TASKS

from cli_helpers import invoke

pytest.importorskip("sklearn")
RUN = ["--steps", "2", "--population", "16", "--json"]


def summary(argv, capsys):
    code, out, err = invoke(["train", "digits", *RUN, *argv], capsys)
    assert code == 0, err
    return json.loads(out.strip().splitlines()[-1]), err


def test_mup_at_the_base_width_is_the_standard_run_and_elsewhere_it_is_not(capsys):
    plain, _ = summary([], capsys)
    at_base, err = summary(["--mup"], capsys)          # digits' default width (64) is the base
    assert at_base["metrics"] == plain["metrics"]
    assert "muP anchored at hidden 64 (this run: 64)" in err
    wide, _ = summary(["--hidden", "256"], capsys)
    wide_mup, err = summary(["--hidden", "256", "--mup"], capsys)
    assert wide_mup["metrics"] != wide["metrics"] and "this run: 256" in err
    other_base, err = summary(["--hidden", "256", "--mup", "32"], capsys)
    assert other_base["metrics"] != wide_mup["metrics"] and "muP anchored at hidden 32" in err


@pytest.mark.parametrize("task", sorted(n for n, t in TASKS.items() if t.width_option is None))
def test_a_task_without_a_width_refuses_mup_by_name(task, capsys):
    code, _, err = invoke(["train", task, "--mup", "--steps", "1"], capsys)
    assert code == 2 and f"--mup does not apply to {task}: its model has no width option" in err
    with pytest.raises(ValueError, match=f"mup_base does not apply to task '{task}'"):
        make_config(task, mup_base=8)


@pytest.mark.parametrize("argv,message", [
    (["--mup", "0"], "--mup must be a positive integer (a hidden), got 0"),
    (["--mup", "--optimizer", "muon"], "--mup does not apply to muon: muP's rules cover the optimizers")])
def test_mup_refusals_name_the_flag(argv, message, capsys):
    code, _, err = invoke(["train", "digits", "--steps", "1", *argv], capsys)
    assert code == 2 and message in err, err


def test_a_resumed_run_keeps_its_mup_base(tmp_path, capsys):
    out = tmp_path / "run"
    first, _ = summary(["--hidden", "128", "--mup", "--out", str(out)], capsys)
    code, stdout, err = invoke(["train", "digits", "--resume", str(out), "--steps", "3", "--json"], capsys)
    assert code == 0 and "muP anchored at hidden 64 (this run: 128)" in err, err
    assert load_checkpoint_config(out)["mup_base"] == 64
