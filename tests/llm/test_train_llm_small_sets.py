"""``train llm --subspace K / --adapters RANK / --evolve norms``: what evolves is counted, the run
resumes exactly, and the export is plain transformers weights that give the trained model's logits."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
from hyperscalees.cli.main import main  # noqa: E402
from hyperscalees.engine import make_config, run  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py
ARITH = {"task": "arithmetic", "prompts": 2, "max_new_tokens": 6, "eval_prompts": 2}
SELECTIONS = {"subspace": {"subspace": 8}, "adapters": {"adapters": 2}, "norms": {"evolve": "norms"}}



def config(folder, out, options, reward, steps=3, resume=None):
    return make_config("llm", es={"population": 8, "sigma": 0.05, "lr": 0.05},
                       engine={"steps": steps, "out": None if resume else str(out), "resume": resume,
                               "eval_every": 3, "json": True, "chunk": 4, "eval_at_start": False},
                       options={"model": folder, "reward": reward, **ARITH, **options})


def logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


@pytest.mark.parametrize("kind", list(SELECTIONS))
def test_a_small_set_trains_resumes_exactly_and_exports_plain_weights(kind, folder, variety, tmp_path, no_plot):
    from transformers import AutoModelForCausalLM
    options = SELECTIONS[kind]
    full = run(config(folder, tmp_path / "full", options, variety, steps=3))
    start = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).eval()
    if kind == "subspace":
        assert full["evolved_numbers"] == 8
    elif kind == "adapters":  # A (2 x in) and B (out x 2) on every block matrix
        mats = [m for n, m in start.named_modules() if isinstance(m, torch.nn.Linear) and n.startswith("model.layers")]
        assert full["evolved_numbers"] == sum(2 * (m.in_features + m.out_features) for m in mats)
    else:
        norms = sum(p.numel() for n, p in start.named_parameters() if "norm" in n)
        assert full["evolved_numbers"] == norms
    exported = AutoModelForCausalLM.from_pretrained(full["paths"]["export"], local_files_only=True).eval()
    assert set(exported.state_dict()) == set(start.state_dict())  # plain weights: no adapter or z left
    ids = torch.arange(3, 11).view(1, 8)
    assert not torch.equal(logits(exported, ids), logits(start, ids))  # three steps moved it
    run(config(folder, tmp_path / "part", options, variety, steps=2))
    resumed = run(config(folder, None, options, variety, steps=3, resume=str(tmp_path / "part")))
    again = AutoModelForCausalLM.from_pretrained(resumed["paths"]["export"], local_files_only=True).state_dict()
    assert all(torch.equal(again[k], v) for k, v in exported.state_dict().items())  # resume = uninterrupted


def test_two_selections_at_once_are_refused_by_name(folder, tmp_path, capsys):
    code = main(["train", "llm", "--model", folder, "--subspace", "8", "--adapters", "2", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2 and "--subspace and --adapters" in err and not (tmp_path / "x").exists()
    code = main(["train", "llm", "--model", folder, "--subspace", "-1"])
    assert code == 2 and "subspace must be a whole number >= 0" in capsys.readouterr().err
    code = main(["train", "llm", "--model", folder, "--subspace", "8", "--subspace-cache-mib", "-1"])
    assert code == 2 and "--subspace-cache-mib must be a whole number >= 0" in capsys.readouterr().err


def test_the_subspace_cache_changes_the_cost_never_the_weights(folder, variety, tmp_path, no_plot, monkeypatch):
    """--subspace-cache-mib 0 projects every member's weights again on every token: the same trained
    weights as the default cache, bit for bit (the same projection of the same z_i)."""
    from safetensors.torch import load_file

    from hyperscalees.nn.fastfood import Fastfood
    calls = []
    project = Fastfood.project
    monkeypatch.setattr(Fastfood, "project", lambda self, z, f: calls.append(1) or project(self, z, f))
    cached = run(config(folder, tmp_path / "cached", {"subspace": 8}, variety, steps=2))
    n = len(calls)
    bare = run(config(folder, tmp_path / "bare", {"subspace": 8, "subspace_cache_mib": 0}, variety, steps=2))
    assert len(calls) - n > 2 * n                                  # a token each, not a generation each
    x, y = (load_file(f"{r['paths']['export']}/model.safetensors") for r in (cached, bare))
    assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
