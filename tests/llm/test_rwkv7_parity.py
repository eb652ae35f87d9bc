"""RWKV-7 through rwkv7-hf equals BlinkDL's ``rwkv`` package (``RWKV_x070``) on random weights,
and its population generation equals its materialized members.

A random checkpoint in the official ``.pth`` layout (what BlinkDL publishes) is converted by
``rwkv7_hf.converter`` into a Hugging Face folder and loaded by ``llm.load_causal_lm``; the
reference reads the ``.pth`` itself. The reference runs in a subprocess: ``rwkv.model``
defines ``RWKV_x070`` only when ``RWKV_V7_ON=1`` is set at its first import (a module imported
earlier without it would lack the class), it prints a banner, and it switches TorchScript and
cuDNN flags process-wide; none of that reaches this process.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("rwkv")
pytest.importorskip("rwkv7_hf")

C, LAYERS, VOCAB, HEAD = 128, 2, 256, 64  # two heads of 64 (the official head size)
LORA = dict(w=32, a=32, v=16, g=32)
SEQS = {"a": [5, 77, 3, 200, 41, 41, 9, 130, 255, 0, 64, 17, 88, 101, 6, 250, 33, 2, 190, 47],
        "b": [11, 4, 160, 98, 7, 222, 51, 39, 140, 12, 3]}
PROMPT, NEW = [9, 31, 120, 4, 77, 200, 18], 10  # greedy decoding: prefill, then one token at a time


def official_state_dict(seed: int = 0) -> dict[str, torch.Tensor]:
    """A random RWKV-7 checkpoint in BlinkDL's .pth layout, scaled so activations stay O(1).

    Token-shift mixes in [0, 1), decay logits around -1 (per-step decay ~0.75: the state carries
    several tokens back), matrices ~ 1/sqrt(fan_in), norms' weights near 1. Block 0 has no
    v0/v1/v2 (the value residual starts at block 1; RWKV_x070 ignores them there).
    """
    g = torch.Generator().manual_seed(seed)

    def randn(*shape, scale=1.0, mean=0.0):
        return mean + scale * torch.randn(*shape, generator=g)

    def rand(*shape):
        return torch.rand(*shape, generator=g)

    def norm(prefix):
        return {prefix + ".weight": randn(C, scale=0.2, mean=1.0), prefix + ".bias": randn(C, scale=0.1)}

    sd = {"emb.weight": randn(VOCAB, C), **norm("blocks.0.ln0"), **norm("ln_out"),
          "head.weight": randn(VOCAB, C, scale=C ** -0.5)}
    for i in range(LAYERS):
        b, att, ffn = f"blocks.{i}.", f"blocks.{i}.att.", f"blocks.{i}.ffn."
        sd.update(norm(b + "ln1"), **norm(b + "ln2"), **norm(att + "ln_x"))
        for x in ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g"):
            sd[att + x] = rand(1, 1, C)
        sd[att + "w0"] = randn(1, 1, C, mean=-1.0)
        sd[att + "a0"] = randn(1, 1, C, scale=0.5)
        sd[att + "k_k"] = randn(1, 1, C, scale=0.2, mean=0.8)
        sd[att + "k_a"] = randn(1, 1, C, scale=0.2, mean=1.0)
        for name, rank in LORA.items():
            if name == "v" and i == 0:
                continue
            sd[att + name + "1"] = randn(C, rank, scale=C ** -0.5)
            sd[att + name + "2"] = randn(rank, C, scale=rank ** -0.5)
        if i:
            sd[att + "v0"] = randn(1, 1, C, scale=0.5)
        sd[att + "r_k"] = randn(C // HEAD, HEAD, scale=0.5)
        for proj in ("receptance", "key", "value", "output"):
            sd[att + proj + ".weight"] = randn(C, C, scale=C ** -0.5)
        sd[ffn + "x_k"] = rand(1, 1, C)
        sd[ffn + "key.weight"] = randn(4 * C, C, scale=C ** -0.5)
        sd[ffn + "value.weight"] = randn(C, 4 * C, scale=(4 * C) ** -0.5)
    return sd


# Runs in a fresh interpreter: argv[1] = the checkpoint path without ".pth", argv[2] = JSON job,
# argv[3] = where to torch.save the results.
REFERENCE = r"""
import json, sys, torch
from rwkv.model import RWKV_x070
model = RWKV_x070(sys.argv[1], "cpu fp32")
job = json.loads(sys.argv[2])
out = {}
for name, seq in job["seqs"].items():
    out[name + "/last"] = model.forward(seq, None)[0]
    out[name + "/all"] = model.forward(seq, None, full_output=True)[0]
logits, state = model.forward(job["prompt"], None)
tokens, steps = [], []
for _ in range(job["new"]):
    steps.append(logits.clone())
    tokens.append(int(logits.argmax()))
    logits, state = model.forward([tokens[-1]], state)
out["greedy/tokens"] = torch.tensor(tokens)
out["greedy/logits"] = torch.stack(steps)
torch.save(out, sys.argv[3])
"""


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny matrices gain nothing from intra-op threads, and on a busy machine each parallel region
    can wait a scheduler tick for a descheduled partner thread (measured on a loaded 2-core box:
    the population test took 41-150 s with 2 threads, 2.4 s with 1)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def rwkv7(one_thread, tmp_path_factory):
    """(model, tokenizer, reference outputs): the converted model loaded by load_causal_lm."""
    from rwkv7_hf import converter

    from hyperscalees import llm

    root = tmp_path_factory.mktemp("rwkv7")
    pth, hf, ref = root / "x.pth", root / "hf", root / "ref.pt"
    torch.save(official_state_dict(), pth)
    assert converter.main(["--input", str(pth), "--output", str(hf), "--precision", "fp32"]) == 0
    job = json.dumps({"seqs": SEQS, "prompt": PROMPT, "new": NEW})
    env = dict(os.environ, RWKV_V7_ON="1", RWKV_CUDA_ON="0", RWKV_JIT_ON="1", CUDA_VISIBLE_DEVICES="",
               OMP_NUM_THREADS="1")  # one thread, as in this process (see one_thread)
    run = subprocess.run([sys.executable, "-c", REFERENCE, str(pth.with_suffix("")), job, str(ref)],
                         env=env, cwd=root, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"RWKV_x070 reference failed:\n{run.stdout}\n{run.stderr}"
    # The converter copies rwkv7-hf's modeling code into the folder (with an auto_map); the loader
    # must build the installed classes and never run that code: booby-trap it.
    planted = sorted(hf.glob("*.py"))
    assert planted, "the converter no longer writes code into the folder; drop this trap"
    for code in planted:
        code.write_text(f"raise RuntimeError('load_causal_lm executed {code.name} from the model folder')\n")
    model, tokenizer = llm.load_causal_lm(hf)
    # No tokenizer.json nor vocabulary in the folder: the rwkv package's world vocabulary stands in.
    assert type(tokenizer).__name__ == "RWKV7Tokenizer"
    return model, tokenizer, torch.load(ref)


def check_close(ours: torch.Tensor, ref: torch.Tensor, what: str) -> float:
    """max |Δ| <= 1e-4 of the logits' scale (max |logit|); returns max |Δ|."""
    assert ours.shape == ref.shape, (what, ours.shape, ref.shape)
    scale = ref.abs().max().item()
    delta = (ours - ref).abs().max().item()
    assert delta <= 1e-4 * scale, f"{what}: max |Δ| = {delta:.3g} with max |logit| = {scale:.3g}"
    return delta


@pytest.mark.slow
def test_rwkv7_forward_matches_rwkv_x070(rwkv7):
    model, _, ref = rwkv7
    # The random weights are not degenerate: logits spread, and the recurrence matters
    # (the last token's logits after a whole sequence differ from those of that token alone).
    assert ref["a/all"].std() > 0.3 and ref["a/all"].abs().max() > 1.5
    deltas = {}
    with torch.no_grad():
        for name, seq in SEQS.items():
            logits = model(torch.tensor([seq])).logits[0]
            deltas[name + "/last"] = check_close(logits[-1], ref[name + "/last"], f"sequence {name}, last token")
            deltas[name + "/all"] = check_close(logits, ref[name + "/all"], f"sequence {name}, every position")
        alone = model(torch.tensor([SEQS["a"][-1:]])).logits[0, -1]
        assert (alone - ref["a/last"]).abs().max() > 0.1, "the state had no effect on the last token"

        # Greedy decoding with the recurrent state (generate's cache) against RWKV_x070's one-token steps.
        out = model.generate(torch.tensor([PROMPT]), attention_mask=torch.ones(1, len(PROMPT), dtype=torch.long),
                             max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False, pad_token_id=0,
                             output_logits=True, return_dict_in_generate=True)
    assert out.sequences[0, len(PROMPT):].tolist() == ref["greedy/tokens"].tolist()
    deltas["greedy"] = check_close(torch.cat(out.logits), ref["greedy/logits"], "greedy decoding steps")
    print("max |Δ| vs RWKV_x070:", {k: f"{v:.2g}" for k, v in deltas.items()})


@pytest.mark.slow
def test_rwkv7_population_generation_equals_materialized_members(rwkv7):
    """Member i's row of the batched population generate equals generation with W + E_i written in."""
    from tiny import char_tokenizer  # tests/llm/tiny.py: its 56 ids fit the 256-token vocabulary

    import hyperscalees as hs
    from hyperscalees import llm

    model, _, _ = rwkv7
    tokenizer = char_tokenizer()
    prompts, sampling = ["2+3=", "hi, w"], llm.Sampling(max_new_tokens=5)  # two lengths: left padding
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    es = hs.EGGROLL(model, population=4, sigma=0.05, es_map=llm.evolving(model), seed=3)
    gen = llm.generate(es, tokenizer, prompts, sampling, chunk=2)  # two batched generates of 2 members × 2 prompts
    for i in range(es.population):
        with es.materialized(i):
            _, tokens, lengths = llm.complete(model, tokenizer, prompts, sampling)
        width = tokens.shape[1]
        assert gen.lengths[i].tolist() == lengths.tolist(), f"member {i}"
        assert gen.tokens[i, :, :width].tolist() == tokens.tolist(), f"member {i}"
        assert (gen.tokens[i, :, width:] == gen.pad_id).all()
    assert gen.lengths.min() >= 2, f"completions too short to compare: {gen.lengths.tolist()}"
    distinct = {tuple(map(tuple, gen.tokens[i].tolist())) for i in range(es.population)}
    assert len(distinct) > 1, "every member wrote the same tokens: sigma too small for a meaningful check"
    after = {name: p.detach().clone() for name, p in model.named_parameters()}
    assert all(torch.equal(before[name], after[name]) for name in before), "W was not restored"
    print("members' tokens:", gen.tokens.tolist(), "lengths:", gen.lengths.tolist())
