"""A run's data is recorded by path (issue 19): ``generate`` needs none of it (the vocabulary is in
the run), and once the data has moved, eval, generate and --resume say so in one line and take
``--data NEW``. Runs saved before checkpoints kept the vocabulary still load, from their data."""
import json
import shutil

import pytest

from hyperscalees.cli.main import main
from hyperscalees.engine import load_checkpoint, saved_config
from hyperscalees.engine.relocate import check_data_present
from hyperscalees.tasks import LMTask
from hyperscalees.tasks.lm.data import write_token_data

from cli_helpers import invoke

SMALL = ["--model", "float-gru", "--hidden", "8", "--layers", "1", "--window", "8", "--streams", "2",
         "--eval-tokens", "128", "--eval-streams", "1", "--population", "8", "--sample-every", "0"]
GENERATE = ["--tokens", "12", "--seed", "5", "--json"]


def train(tmp_path, capsys, data, name="run") -> str:
    out = tmp_path / name
    code, _, err = invoke(["train", "lm", *SMALL, "--data", str(data), "--steps", "2", "--out", str(out), "--json"],
                          capsys)
    assert code == 0, err
    return str(out)


@pytest.fixture
def text(tmp_path):
    p = tmp_path / "data" / "text.txt"
    p.parent.mkdir()
    p.write_bytes(b"the quick brown fox jumps over the lazy dog. " * 150)
    return p


@pytest.fixture
def old_format(monkeypatch):
    """Runs saved as before this change: no vocabulary in the task state."""
    real = LMTask.state_dict
    monkeypatch.setattr(LMTask, "state_dict", lambda task: {k: v for k, v in real(task).items() if k != "vocabulary"})


def nothing_reads_data(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the data was read")
    monkeypatch.setattr("hyperscalees.tasks.lm.task.load_corpus", refuse)


def generated(run_dir, capsys, *more) -> list[int]:
    code, out, err = invoke(["generate", run_dir, *GENERATE, *more], capsys)
    assert code == 0, err
    return json.loads(out)["tokens"]


def one_line_error(argv, capsys, *expected) -> str:
    code, out, err = invoke(argv, capsys)
    assert code == 2 and out == "", err
    assert len(err.strip().splitlines()) == 1, err
    for text in expected:
        assert text in err, err
    return err


def test_generate_needs_only_the_run_directory(tmp_path, text, capsys, monkeypatch):
    run_dir = train(tmp_path, capsys, text)
    before = generated(run_dir, capsys)
    assert load_checkpoint(run_dir).task["vocabulary"] == {"kind": "bytes"}
    shutil.rmtree(text.parent)                                   # the data is gone
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    nothing_reads_data(monkeypatch)
    assert generated(run_dir, capsys) == before


def test_a_token_vocabulary_travels_with_the_run(tmp_path, capsys, monkeypatch):
    pieces = [b"the ", b"fox", b" ", b"\xc3\xa9t\xc3\xa9", b"", b"jumps"]
    tokens = tmp_path / "tokens"
    write_token_data(tokens, [0, 1, 2, 3, 5, 2] * 400, pieces)
    run_dir = train(tmp_path, capsys, tokens)
    prompt = ["--prompt", "the fox été"]
    code, out, err = invoke(["generate", run_dir, *prompt, *GENERATE], capsys)
    assert code == 0, err
    before = json.loads(out)
    shutil.rmtree(tokens)
    nothing_reads_data(monkeypatch)
    code, out, err = invoke(["generate", run_dir, *prompt, *GENERATE], capsys)
    assert code == 0, err
    after = json.loads(out)
    assert after["tokens"] == before["tokens"] and after["text"] == before["text"]
    assert after["text"] == "".join(pieces[t].decode() for t in after["tokens"])


def test_moved_data_is_named_by_eval_and_resume_which_take_its_new_place(tmp_path, text, capsys):
    run_dir = train(tmp_path, capsys, text)
    code, out, _ = invoke(["eval", run_dir, "--json"], capsys)
    metrics = json.loads(out)["metrics"]
    moved = tmp_path / "moved.txt"
    text.rename(moved)
    message = f"data has moved: {str(text)!r}"
    one_line_error(["eval", run_dir], capsys, message, "no longer exists; pass --data NEW")
    one_line_error(["train", "lm", "--resume", run_dir, "--steps", "3"], capsys, message, "pass --data NEW")
    code, out, err = invoke(["eval", run_dir, "--data", str(moved), "--json"], capsys)
    assert code == 0 and json.loads(out)["metrics"] == metrics, err
    code, _, err = invoke(["train", "lm", "--resume", run_dir, "--steps", "3", "--data", str(moved)], capsys)
    assert code == 0, err
    assert load_checkpoint(run_dir).step == 3 and saved_config(run_dir).options["data"] == str(moved)


def test_other_data_at_the_new_place_is_refused(tmp_path, text, capsys):
    run_dir = train(tmp_path, capsys, text)
    other = tmp_path / "other.txt"
    other.write_bytes(b"not the same bytes at all. " * 300)
    one_line_error(["eval", run_dir, "--data", str(other)], capsys, "the data differs from the run's")
    one_line_error(["train", "lm", "--resume", run_dir, "--steps", "3", "--data", str(other)], capsys,
                   "the data differs from the run's")


def test_a_run_saved_before_the_vocabulary_was_kept_reads_its_data(tmp_path, text, capsys, monkeypatch, old_format):
    run_dir = train(tmp_path, capsys, text)
    monkeypatch.undo()                                           # today's code reads the old run
    assert "vocabulary" not in load_checkpoint(run_dir).task
    before = generated(run_dir, capsys)                          # from its data
    moved = tmp_path / "moved.txt"
    text.rename(moved)
    one_line_error(["generate", run_dir, *GENERATE], capsys, f"data has moved: {str(text)!r}", "pass --data NEW")
    assert generated(run_dir, capsys, "--data", str(moved)) == before


def test_data_flags_are_refused_where_no_data_is_read(tmp_path, capsys):
    out = tmp_path / "xor"
    assert invoke(["train", "xor", "--steps", "2", "--out", str(out)], capsys)[0] == 0
    one_line_error(["eval", str(out), "--data", "x.txt"], capsys, "--data: task 'xor' reads no data from a path")


def test_a_relative_path_recorded_by_an_older_run_is_named_as_recorded(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"data has moved: 'notes.txt' \(recorded relative to where the run "
                                                r"started; from here '/nowhere/notes.txt'\)"):
        check_data_present(LMTask, {"data": "/nowhere/notes.txt"}, tmp_path, {"data": "notes.txt"})
