"""Bad settings and damaged files: one line on stderr naming the value or file, exit 2, never a traceback."""
import argparse
import json
import os
import shutil

import pytest

from hyperscalees.cli.main import build_parser, main
from hyperscalees.engine import load_checkpoint, read_rows
from hyperscalees.tasks import XorTask

from cli_helpers import invoke


def error_lines(err):
    return [line for line in err.splitlines() if "error:" in line]


@pytest.mark.parametrize("argv,says", [
    (["--lr", "inf"], "--lr must be a finite number > 0, got inf"),
    (["--lr", "nan"], "--lr must be a finite number > 0, got nan"),
    (["--momentum", "2"], "--momentum must be in [0, 1), got 2.0"),
    (["--momentum", "-0.5"], "--momentum must be in [0, 1), got -0.5"),
    (["--weight-decay", "inf"], "--weight-decay must be a finite number >= 0, got inf"),
    (["--weight-decay", "nan"], "--weight-decay must be a finite number >= 0, got nan"),
    (["--noise-cache-mib", "inf"], "--noise-cache-mib must be a finite number >= 0, got inf"),
    (["--lr-decay", "0"], "--lr-decay must be in (0, 1], got 0.0"),
    (["--sigma-decay", "nan"], "--sigma-decay must be in (0, 1], got nan"),
    (["--time-budget", "inf"], "--time-budget must be a finite number of seconds > 0, got inf"),
    (["--hidden", "0"], "--hidden must be an integer >= 1, got 0"),
    (["--hidden", "-3"], "--hidden must be an integer >= 1, got -3"),
])
def test_bad_settings_are_refused_where_parsed(argv, says, capsys):
    code, out, err = invoke(["train", "xor", "--steps", "1", *argv], capsys)
    assert code == 2 and out == ""
    assert error_lines(err) == [f"hyperscalees train xor: error: {says}"], err


@pytest.mark.parametrize("task,argv,says", [
    ("digits", ["--batch", "0"], "--batch must be an integer >= 1, got 0"),
    ("digits", ["--holdout", "nan"], "--holdout must be in (0, 1), got nan"),
    ("predict2", ["--batch", "0"], "--batch must be an integer >= 1, got 0"),
    ("poly", ["--points", "1"], "--points must be an integer >= 2, got 1"),
])
def test_bad_task_options_are_refused_where_parsed(task, argv, says, capsys):
    code, _, err = invoke(["train", task, "--steps", "1", *argv], capsys)
    assert code == 2 and error_lines(err) == [f"hyperscalees train {task}: error: {says}"], err


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("finished") / "run"
    assert main(["train", "xor", "--population", "16", "--steps", "2", "--out", str(out), "--json"]) == 0
    return out


@pytest.fixture
def saved(finished, tmp_path, no_plot):
    """A copy of a finished 2-step run directory, and the names of its committed files."""
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    return out, json.loads((out / "checkpoint.json").read_text())["files"]


def damage(path, how):
    if how == "garbage":
        path.write_bytes(os.urandom(100))
    elif how == "truncated":
        path.write_bytes(path.read_bytes()[:40])
    elif how == "deleted":
        path.unlink()


@pytest.mark.parametrize("part", ["model", "strategy", "task", "pointer"])
@pytest.mark.parametrize("how", ["garbage", "truncated", "deleted"])
@pytest.mark.parametrize("command", ["resume", "eval"])
def test_damaged_checkpoint_files_give_one_line_naming_the_file(saved, capsys, part, how, command):
    out, files = saved
    name = "checkpoint.json" if part == "pointer" else files[part]
    damage(out / name, how)
    argv = (["train", "xor", "--steps", "3", "--resume", str(out)] if command == "resume" else ["eval", str(out)])
    code, stdout, err = invoke(argv, capsys)
    if command == "eval" and part == "strategy":  # evaluation does not read the optimizer state
        assert code == 0 and "mse" in stdout
        return
    assert code == 2, err
    assert len(error_lines(err)) == 1 and name in error_lines(err)[0], err
    assert "Traceback" not in err


@pytest.mark.parametrize("command", ["resume", "out", "eval"])
def test_a_file_where_a_run_directory_should_be(tmp_path, capsys, command):
    f = tmp_path / "file"
    f.write_text("x")
    argv = {"resume": ["train", "xor", "--resume", str(f)], "out": ["train", "xor", "--out", str(f)],
            "eval": ["eval", str(f)]}[command]
    code, _, err = invoke(argv, capsys)
    assert code == 2 and len(error_lines(err)) == 1 and "is a file, not a run directory" in err, err


def test_a_torn_metrics_line_does_not_block_resume(saved, capsys):
    out, _ = saved
    with open(out / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "fitness_me')
    code, _, err = invoke(["train", "xor", "--steps", "3", "--resume", str(out)], capsys)
    assert code == 0, err
    assert [r["step"] for r in read_rows(out / "metrics.jsonl")] == [1, 2, 3]


def test_out_refuses_a_finished_run_unless_overwrite(saved, capsys):
    out, _ = saved
    code, _, err = invoke(["train", "xor", "--population", "16", "--steps", "1", "--out", str(out)], capsys)
    assert code == 2 and "already holds a run (checkpoint at step 2)" in err and "--overwrite" in err
    assert load_checkpoint(out).step == 2
    code, _, err = invoke(["train", "xor", "--population", "16", "--steps", "1", "--out", str(out), "--overwrite"],
                          capsys)
    assert code == 0 and load_checkpoint(out).step == 1


def test_resume_below_the_checkpoint_step_says_so(saved, capsys):
    out, _ = saved
    code, _, err = invoke(["train", "xor", "--steps", "1", "--resume", str(out)], capsys)
    assert code == 2 and "already at step 2, past --steps 1; give --steps 2 or more" in err


def test_diverging_weights_stop_with_exit_2_and_nothing_saved(tmp_path, capsys):
    code, _, err = invoke(["train", "xor", "--population", "16", "--steps", "3", "--lr", "1e300",
                           "--out", str(tmp_path)], capsys)
    assert code == 2 and "non-finite at step 1" in err and "no checkpoint had been written" in err
    assert not (tmp_path / "checkpoint.json").exists()


def test_json_line_is_strict_even_with_nan_metrics(monkeypatch, capsys):
    monkeypatch.setattr(XorTask, "evaluate", lambda self, model: {"mse": float("nan"), "converged": 0.0})
    code, out, _ = invoke(["train", "xor", "--population", "16", "--steps", "1", "--json"], capsys)

    def refuse(constant):
        raise ValueError(f"non-strict JSON constant {constant}")

    summary = json.loads(out.strip().splitlines()[-1], parse_constant=refuse)
    assert code == 0 and summary["metrics"]["mse"] is None
    assert any("non-finite values written as null: metrics.mse" in n for n in summary["notes"])


def test_notes_for_no_out_and_int_noise(capsys):
    code, _, err = invoke(["train", "xor", "--population", "16", "--steps", "1", "--distribution", "int"], capsys)
    assert code == 0
    assert "note: no --out given: nothing will be saved" in err
    assert "--distribution int draws values of std ≈ 16" in err and "--sigma 0.00625" in err


def parsers(parser, path=("hyperscalees",)):
    """(command path, parser) for the main parser and every sub-command, recursively."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from parsers(sub, (*path, name))


def test_every_flag_of_every_command_has_help():
    missing = []
    for path, parser in parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                continue
            text = (action.help or "").split("(default:")[0].strip()
            if not text or action.help == argparse.SUPPRESS:
                missing.append(f"{' '.join(path)} {'/'.join(action.option_strings) or action.dest}")
    assert not missing, missing


def test_a_misspelt_flag_is_reported_by_the_command_it_follows(capsys):
    code, _, err = invoke(["train", "xor", "--stpes", "3"], capsys)
    assert code == 2 and "hyperscalees train xor: error: unrecognized arguments --stpes 3; did you mean --steps?" in err
    assert "usage:" not in err  # one line, not a page of usage first


def test_resume_of_a_run_killed_before_its_first_checkpoint_says_what_to_do(tmp_path, capsys):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "fitness_mean": 0.0}\n')
    code, _, err = invoke(["train", "xor", "--resume", str(tmp_path)], capsys)
    assert code == 2 and "stopped before its first checkpoint" in err and f"--out {tmp_path} --overwrite" in err
