"""A checkpoint is committed by one rename: a failed save never damages the committed one."""
import json
import os
import stat

import pytest
import torch

import hyperscalees as hs

from hyperscalees.engine import (BadFileError, atomic_write, build, load_checkpoint, make_config, remove_orphans,
                                 save_checkpoint)
from hyperscalees.engine import checkpoint as ckpt_mod


def leftovers(directory):
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def write_text(path, text):
    with open(path, "w") as f:
        f.write(text)


def test_atomic_write_keeps_old_content_on_failure(tmp_path):
    target = tmp_path / "file.txt"
    atomic_write(target, lambda tmp: write_text(tmp, "good"))

    def torn(tmp):
        with open(tmp, "w") as f:
            f.write("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, torn)
    assert target.read_text() == "good"
    assert leftovers(tmp_path) == []
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    assert target.stat().st_mode == plain.stat().st_mode  # same permissions as any new file (not mkstemp's 0600)


def trained(steps=2):
    cfg = make_config("xor", es={"population": 16}, engine={"steps": steps})
    task, model, es = build(cfg)
    with torch.no_grad():
        for _ in range(steps):
            step_once(es, task)
    return cfg, model, es


def step_once(es, task):
    with torch.no_grad():
        es.tell(hs.evaluate(es, lambda m, lo, hi, step: task.fitness(m, lo, hi, step=step)))


def snapshot(model):
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}  # checkpoints load to the CPU


def step_files(directory):
    return sorted(p.name for p in directory.iterdir() if ckpt_mod.STEP_FILE.match(p.name))


@pytest.mark.parametrize("broken", ["save_file", "strategy", "task", "pointer"])
def test_a_save_that_fails_anywhere_keeps_the_previous_checkpoint(tmp_path, monkeypatch, broken):
    cfg, model, es = trained(2)
    save_checkpoint(tmp_path, es, cfg.to_dict())
    good = snapshot(model)
    task = build(cfg)[0]
    step_once(es, task)
    real_write, saves = ckpt_mod.write_flat, []

    def failing(*args, **kwargs):
        raise OSError("killed mid-write")

    def write_flat(path, *args):  # strategy first, then task
        saves.append(path)
        if (broken == "strategy") == (len(saves) == 1):
            raise OSError("killed mid-write")
        real_write(path, *args)

    if broken == "save_file":
        monkeypatch.setattr(ckpt_mod, "save_file", failing)
    elif broken == "pointer":
        monkeypatch.setattr(ckpt_mod, "json_safe", failing)
    else:
        monkeypatch.setattr(ckpt_mod, "write_flat", write_flat)
    with pytest.raises(OSError, match="killed mid-write"):
        save_checkpoint(tmp_path, es, cfg.to_dict())
    monkeypatch.undo()
    assert leftovers(tmp_path) == []
    ck = load_checkpoint(tmp_path)
    assert ck.step == 2 and all(torch.equal(ck.model[k], good[k]) for k in good)
    remove_orphans(tmp_path)  # what the next run does first: files of the failed save go
    assert step_files(tmp_path) == ["model-000002.safetensors", "strategy-000002.safetensors", "task-000002.safetensors"]
    save_checkpoint(tmp_path, es, cfg.to_dict())
    assert load_checkpoint(tmp_path).step == 3
    assert step_files(tmp_path) == ["model-000003.safetensors", "strategy-000003.safetensors", "task-000003.safetensors"]


def test_checkpoint_contents_and_layout(tmp_path):
    cfg, model, es = trained(2)
    files = save_checkpoint(tmp_path, es, cfg.to_dict(), task_state={"count": 7})
    meta = json.loads((tmp_path / "checkpoint.json").read_text())
    assert meta["step"] == 2 and meta["config"] == cfg.to_dict()
    assert meta["files"] == {"model": "model-000002.safetensors", "strategy": "strategy-000002.safetensors",
                             "task": "task-000002.safetensors"}
    assert files["model"] == tmp_path / "model-000002.safetensors"
    from safetensors.torch import load_file  # the model file is plain safetensors, readable without this library
    weights = load_file(str(files["model"]))
    for k, v in model.state_dict().items():
        assert torch.equal(weights[k], v.cpu())  # safetensors loads to the CPU; the model may be on CUDA
    assert load_checkpoint(tmp_path).task == {"count": 7}
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(files["model"].stat().st_mode) == 0o666 & ~umask  # not safetensors' 0600
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_checkpoint(tmp_path / "nothing")


def test_saving_a_committed_step_again_never_overwrites_its_files(tmp_path):
    """A resumed run with nothing left to do, or --overwrite reaching the same step, saves step 2 twice."""
    cfg, model, es = trained(2)
    save_checkpoint(tmp_path, es, cfg.to_dict())
    save_checkpoint(tmp_path, es, cfg.to_dict(), extra={"metrics": {"mse": 1.0}})
    assert step_files(tmp_path) == ["model-000002-1.safetensors", "strategy-000002-1.safetensors", "task-000002-1.safetensors"]
    save_checkpoint(tmp_path, es, cfg.to_dict())
    assert step_files(tmp_path) == ["model-000002.safetensors", "strategy-000002.safetensors", "task-000002.safetensors"]
    assert load_checkpoint(tmp_path).step == 2


def forbid_unpickling(monkeypatch):
    """Any attempt to unpickle fails the test: old checkpoints must be refused, not read."""
    import pickle

    def refuse(*args, **kwargs):
        raise AssertionError("a pickle was read from disk")

    for owner, name in ((torch, "load"), (pickle, "load"), (pickle, "loads"), (pickle, "Unpickler")):
        monkeypatch.setattr(owner, name, refuse)


@pytest.mark.parametrize("layout", ["format 1", "format 2"])
def test_earlier_pickled_checkpoints_are_refused_and_replaced(tmp_path, layout, monkeypatch):
    """Format 1 (model.safetensors + strategy.pt) and 2 (step-named, strategy and task .pt) are not unpickled."""
    cfg, model, es = trained(2)
    from safetensors.torch import save_file
    sd = es.state_dict()
    files = ({"model": "model.safetensors", "strategy": "strategy.pt"} if layout == "format 1" else
             {"model": "model-000002.safetensors", "strategy": "strategy-000002.pt", "task": "task-000002.pt"})
    save_file(sd["model"], str(tmp_path / files["model"]), metadata={"step": "2"})
    torch.save({"step": 2, "strategy": sd["strategy"]}, tmp_path / files["strategy"])
    if "task" in files:
        torch.save({"step": 2, "task": {}}, tmp_path / files["task"])
    pointer = {"step": 2, "config": cfg.to_dict(), "files": files} | ({"format": 2} if "task" in files else {})
    (tmp_path / "checkpoint.json").write_text(json.dumps(pointer))
    forbid_unpickling(monkeypatch)
    with pytest.raises(BadFileError, match=r"earlier hyperscalees in the torch.save format .*strategy(-000002)?\.pt"
                                           r".*no longer reads \(no pickle is loaded from disk\)") as e:
        load_checkpoint(tmp_path)
    assert "\n" not in str(e.value)
    if layout == "format 1":  # the model alone is safetensors: evaluation still reads it
        ck = load_checkpoint(tmp_path, strategy=False)
        assert ck.step == 2 and all(torch.equal(ck.model[k], v.cpu()) for k, v in sd["model"].items())
    else:                     # evaluation needs the task state, which is a pickle
        with pytest.raises(BadFileError, match=r"task-000002\.pt"):
            load_checkpoint(tmp_path, strategy=False)
    save_checkpoint(tmp_path, es, cfg.to_dict())  # what --overwrite does: the old files go
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint.json", "model-000002-1.safetensors" if layout == "format 2" else "model-000002.safetensors",
        *(["strategy-000002-1.safetensors", "task-000002-1.safetensors"] if layout == "format 2" else
          ["strategy-000002.safetensors", "task-000002.safetensors"])]
    assert load_checkpoint(tmp_path).step == 2


def test_a_newer_format_is_refused(tmp_path):
    cfg, model, es = trained(2)
    save_checkpoint(tmp_path, es, cfg.to_dict())
    meta = json.loads((tmp_path / "checkpoint.json").read_text())
    (tmp_path / "checkpoint.json").write_text(json.dumps(meta | {"format": ckpt_mod.FORMAT + 1}))
    with pytest.raises(BadFileError, match=f"format {ckpt_mod.FORMAT + 1}, newer than this version reads"):
        load_checkpoint(tmp_path)


def test_orphans_are_removed_but_never_with_an_unreadable_pointer(tmp_path):
    cfg, model, es = trained(2)
    save_checkpoint(tmp_path, es, cfg.to_dict())
    for name in ("model-000003.safetensors", "strategy-000003.safetensors", ".model-000003.safetensors.1.ab.tmp",
                 ".tmpX7aQ2z"):  # the last: safetensors' own temporary name
        (tmp_path / name).write_bytes(b"partial")
    (tmp_path / "notes.txt").write_text("mine")
    assert sorted(remove_orphans(tmp_path)) == [".model-000003.safetensors.1.ab.tmp", ".tmpX7aQ2z",
                                                "model-000003.safetensors", "strategy-000003.safetensors"]
    assert (tmp_path / "notes.txt").exists() and load_checkpoint(tmp_path).step == 2
    (tmp_path / "checkpoint.json").write_text("{torn")
    (tmp_path / ".x.tmp").write_bytes(b"")
    assert remove_orphans(tmp_path) == [".x.tmp"]  # the step files may be all that is left of the run
    assert len(step_files(tmp_path)) == 3


def corrupt(directory, name, how):
    path = directory / name
    data = path.read_bytes()
    if how == "garbage":
        path.write_bytes(os.urandom(64) * 4)
    elif how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "directory":
        path.unlink()
        path.mkdir()
    elif how == "missing":
        path.unlink()


@pytest.mark.parametrize("part", ["model", "strategy", "task"])
@pytest.mark.parametrize("how", ["garbage", "truncated", "empty", "directory", "missing"])
def test_a_damaged_file_is_one_clear_error_naming_it(tmp_path, part, how):
    cfg, model, es = trained(2)
    files = save_checkpoint(tmp_path, es, cfg.to_dict())
    corrupt(tmp_path, files[part].name, how)
    with pytest.raises(BadFileError) as e:
        load_checkpoint(tmp_path)
    message = str(e.value)
    assert files[part].name in message and "\n" not in message
    if part == "strategy":  # evaluation does not read the strategy file
        assert load_checkpoint(tmp_path, strategy=False).step == 2


def test_a_state_file_in_the_wrong_place_is_named(tmp_path):
    cfg, model, es = trained(2)
    files = save_checkpoint(tmp_path, es, cfg.to_dict())
    files["strategy"].write_bytes(files["task"].read_bytes())
    with pytest.raises(BadFileError, match=r"strategy file .*strategy-000002\.safetensors' holds the 'task' state"):
        load_checkpoint(tmp_path)
    files["strategy"].write_bytes(files["model"].read_bytes())   # plain safetensors without a tree
    with pytest.raises(BadFileError, match=r"strategy-000002\.safetensors' is unusable: not a state file"):
        load_checkpoint(tmp_path)


@pytest.mark.parametrize("text,why", [
    ("{\"step\": 2, ", "not valid JSON"),
    ("", "empty"),
    ("[1, 2]", "JSON object"),
    ("{\"step\": -1, \"config\": {}, \"files\": {}}", "step"),
    ("{\"step\": 2, \"config\": {}, \"files\": {\"model\": \"../x\", \"strategy\": \"s.pt\"}}", "plain file name"),
    ("{\"step\": 2, \"files\": {\"model\": \"m\", \"strategy\": \"s\"}}", "config"),
])
def test_a_damaged_pointer_is_one_clear_error_naming_it(tmp_path, text, why):
    (tmp_path / "checkpoint.json").write_text(text)
    with pytest.raises(BadFileError, match=why) as e:
        load_checkpoint(tmp_path)
    assert "checkpoint.json" in str(e.value)


def test_a_file_where_the_run_directory_should_be(tmp_path):
    (tmp_path / "run").write_text("not a directory")
    with pytest.raises(BadFileError, match="is a file, not a run directory"):
        load_checkpoint(tmp_path / "run")
