"""Checkpoints are written atomically: a failed write never damages the previous checkpoint."""
import json

import pytest
import torch

import hyperscalees as hs

from hyperscalees.engine import atomic_write, build, load_checkpoint, make_config, save_checkpoint
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
            es.tell(hs.evaluate(es, lambda m, lo, hi: task.fitness(m, lo, hi, step=es.step)))
    return cfg, model, es


def test_failed_save_leaves_the_previous_checkpoint_loadable(tmp_path, monkeypatch):
    cfg, model, es = trained(2)
    save_checkpoint(tmp_path, es, cfg.to_dict())
    good = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        es.tell(hs.evaluate(es, lambda m, lo, hi: m(torch.ones(hi - lo, 2)).view(-1) + torch.arange(lo, hi)))

    def broken_save(obj, path):
        with open(path, "wb") as f:
            f.write(b"partial")
        raise OSError("killed mid-write")

    monkeypatch.setattr(ckpt_mod.torch, "save", broken_save)
    with pytest.raises(OSError, match="killed mid-write"):
        save_checkpoint(tmp_path, es, cfg.to_dict())
    assert leftovers(tmp_path) == []
    # the model file was already replaced, but the metadata was not: the set is detected as torn
    with pytest.raises(RuntimeError, match="different steps"):
        load_checkpoint(tmp_path)
    monkeypatch.undo()
    save_checkpoint(tmp_path, es, cfg.to_dict())
    ck = load_checkpoint(tmp_path)
    assert ck.step == 3 and not all(torch.equal(ck.model[k], good[k]) for k in good)


def test_failure_before_any_rename_keeps_everything(tmp_path, monkeypatch):
    cfg, model, es = trained(2)
    save_checkpoint(tmp_path, es, cfg.to_dict())
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def broken_save_file(tensors, path, metadata=None):
        with open(path, "wb") as f:
            f.write(b"\x00" * 10)
        raise OSError("no space")

    monkeypatch.setattr(ckpt_mod, "save_file", broken_save_file)
    with pytest.raises(OSError):
        save_checkpoint(tmp_path, es, cfg.to_dict())
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    assert load_checkpoint(tmp_path).step == 2


def test_checkpoint_contents(tmp_path):
    cfg, model, es = trained(2)
    save_checkpoint(tmp_path, es, cfg.to_dict())
    meta = json.loads((tmp_path / "checkpoint.json").read_text())
    assert meta["step"] == 2 and meta["config"] == cfg.to_dict()
    from safetensors.torch import load_file
    weights = load_file(str(tmp_path / "model.safetensors"))
    for k, v in model.state_dict().items():
        assert torch.equal(weights[k], v)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_checkpoint(tmp_path / "nothing")
