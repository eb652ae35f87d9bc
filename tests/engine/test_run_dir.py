"""A run directory never loses a file it did not write, and --overwrite is all or nothing (issue 19, items 3-4)."""
import pytest

from hyperscalees.distributed import LocalBackend
from hyperscalees.engine import load_checkpoint, make_config, read_rows, remove_orphans, run
from hyperscalees.tasks import XorTask

pytestmark = pytest.mark.usefixtures("no_plot")
ES = {"population": 16, "seed": 2}
USER_FILES = ("model.safetensors", "strategy.pt", "model-000007.safetensors", "notes.txt")


def config(**engine):
    return make_config("xor", es=ES, engine={"steps": 3, **engine})


def snapshot(directory):
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.name != ".lock"}


def user_dir(directory):
    directory.mkdir()
    for name in USER_FILES:
        (directory / name).write_bytes(b"the user's " + name.encode())
    return snapshot(directory)


def test_out_on_a_directory_of_other_files_is_refused_and_deletes_nothing(tmp_path):
    before = user_dir(tmp_path / "mine")
    with pytest.raises(ValueError, match=r"is not empty and holds no run \(model-000007.*--overwrite"):
        run(config(out=str(tmp_path / "mine")), LocalBackend)
    assert snapshot(tmp_path / "mine") == before


def test_orphan_cleanup_touches_nothing_in_a_directory_without_a_pointer(tmp_path):
    before = user_dir(tmp_path / "mine")
    assert remove_orphans(tmp_path / "mine") == []
    assert snapshot(tmp_path / "mine") == before


def test_a_failed_start_leaves_no_directory_behind(tmp_path, monkeypatch):
    fail_at_first_step(monkeypatch)
    with pytest.raises(RuntimeError, match="boom"):
        run(config(out=str(tmp_path / "new")), LocalBackend)
    assert not (tmp_path / "new").exists()       # not a directory holding only .lock


def fail_at_first_step(monkeypatch):
    def fitness(self, model, lo, hi, step=0):
        raise RuntimeError("boom")
    monkeypatch.setattr(XorTask, "fitness", fitness)


def test_an_overwrite_that_fails_before_its_first_checkpoint_leaves_the_old_run_whole(tmp_path, monkeypatch):
    out = tmp_path / "run"
    run(config(out=str(out), steps=4), LocalBackend)
    before = snapshot(out)
    fail_at_first_step(monkeypatch)
    with pytest.raises(RuntimeError, match="boom"):
        run(config(out=str(out), steps=2, overwrite=True), LocalBackend)
    assert snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]       # no staging directory left
    monkeypatch.undo()
    run(config(resume=str(out), steps=5), LocalBackend)               # the old history is all there
    assert [r["step"] for r in read_rows(out / "metrics.jsonl")] == [1, 2, 3, 4, 5]


def test_an_overwrite_swaps_the_new_run_in_at_its_first_checkpoint(tmp_path):
    out = tmp_path / "run"
    run(config(out=str(out), steps=4), LocalBackend)
    (out / "notes.txt").write_text("mine")
    summary = run(config(out=str(out), steps=6, checkpoint_every=2, overwrite=True), LocalBackend)
    assert load_checkpoint(out).step == 6 and [r["step"] for r in read_rows(out / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]
    assert summary["paths"]["out"] == str(out) and summary["paths"]["model"].startswith(str(out))
    kept = [p for p in tmp_path.iterdir() if p.name != "run"]
    assert len(kept) == 1 and (kept[0] / "notes.txt").read_text() == "mine"   # the user's file, not deleted
    assert any(str(kept[0]) in n for n in summary["notes"])
    assert sorted(p.name for p in kept[0].iterdir()) == ["notes.txt"]
