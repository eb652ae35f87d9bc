"""Small evolving sets on a tiny Llama: adapters, a random subspace, norms only.

Each starts from the unchanged model, generates under its population exactly as the
materialised members do (KV cache and all), and exports, merged, as plain transformers weights
that reload with the same logits."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
import hyperscalees as hs  # noqa: E402
from hyperscalees import llm  # noqa: E402
from hyperscalees.nn.adapters import add_adapters, merge_adapters  # noqa: E402
from hyperscalees.nn.select import evolved_numbers, merged_copy, norms_and_biases  # noqa: E402
from hyperscalees.nn.subspace import install_subspace, merge_subspace  # noqa: E402
from tiny import build, char_tokenizer  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py
PROMPTS = ["12+3=", "ab"]
GREEDY = llm.Sampling(max_new_tokens=6)
P = 4

SELECT = {"adapters": lambda m: add_adapters(m, 2),
          "subspace": lambda m: install_subspace(m, 8),
          "norms": norms_and_biases}
MERGE = {"adapters": merge_adapters, "subspace": merge_subspace, "norms": lambda m: m}
# hidden 32, intermediate 64, 2 layers: q,o (32x32), k,v (16x32), gate,up (64x32), down (32x64)
NUMBERS = {"adapters": 2 * 2 * (2 * 64 + 2 * 48 + 3 * 96), "subspace": 8, "norms": 5 * 32}


def ids(members: int) -> torch.Tensor:
    return torch.arange(3, 13).view(2, 5).repeat(members, 1)  # (members·2, 5) member-major


@torch.no_grad()
def fitness(model, lo, hi, step=0):
    logits = model(ids(hi - lo)).logits[:, -1].float()        # (members·2, V)
    return logits[:, 7].view(hi - lo, 2).mean(dim=1)


@pytest.mark.parametrize("arch,kind", [("llama", k) for k in SELECT] + [("gpt2", k) for k in SELECT])
def test_small_set_members_generation_and_export(arch, kind, tmp_path):
    """GPT-2 stores its matrices (in, out) in Conv1D (adapters and P follow that orientation) and has
    biases in every layer (norms_and_biases evolves them too)."""
    from transformers import AutoModelForCausalLM
    model, tok = build(arch), char_tokenizer()
    with torch.no_grad():
        before = model(ids(1)).logits
        es_map = SELECT[kind](model)
        assert torch.equal(model(ids(1)).logits, before)                 # unchanged at the start
    es = hs.EGGROLL(model, population=P, sigma=0.05, lr=0.05, seed=2, es_map=es_map)
    if arch == "llama":
        assert evolved_numbers(es) == NUMBERS[kind]
    es.tell(hs.evaluate(es, fitness))
    with torch.no_grad(), es.perturbed():
        logits = model(ids(P)).logits.view(P, 2, 5, -1)
    gen = llm.generate(es, tok, PROMPTS, GREEDY)
    for i in range(P):
        with torch.no_grad(), es.materialized(i):
            torch.testing.assert_close(logits[i], model(ids(1)).logits, rtol=1e-5, atol=1e-5)
            assert llm.complete(model, tok, PROMPTS, GREEDY)[0] == gen.texts[i], f"member {i}"
    with torch.no_grad():
        trained = model(ids(1)).logits
        assert not torch.equal(trained, before)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    out = llm.save_pretrained(merged_copy(model), tok, tmp_path / "merged")   # mid-run: the model stays as is
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items()) and state.keys() == \
        model.state_dict().keys()
    plain = AutoModelForCausalLM.from_pretrained(out, local_files_only=True).eval()
    assert set(plain.state_dict()) == set(build(arch).state_dict())
    with torch.no_grad():
        torch.testing.assert_close(plain(ids(1)).logits, trained, rtol=1e-5, atol=1e-5)
        MERGE[kind](model)                                                 # in place, at the end of a run
        assert torch.equal(plain(ids(1)).logits, model(ids(1)).logits)
