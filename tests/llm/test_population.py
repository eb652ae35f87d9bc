"""Pretrained-LM populations: what evolves, batched member generation vs materialised members,
chunking, padding, stop strings, export, exact resume, bf16 masters and update_landed."""
from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")
import hyperscalees as hs  # noqa: E402
from hyperscalees import llm  # noqa: E402
from hyperscalees.distributed import LocalBackend  # noqa: E402
from tiny import build, save  # noqa: E402

KINDS = ["llama", "gpt2", "rwkv7"]
PROMPTS = ["12+3=", "ab", "hello world"]
GREEDY = llm.Sampling(max_new_tokens=10)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {kind: save(kind, root / kind) for kind in KINDS}


def load(folders, kind):
    if kind == "rwkv7":
        pytest.importorskip("rwkv7_hf")
    return llm.load_causal_lm(folders[kind])


# -- what evolves ----------------------------------------------------------------------------
def test_default_evolves_block_matrices_only():
    model = build("llama")
    es_map = llm.evolving(model)
    chosen = {n for n, m in es_map.items() if m == "lowrank"}
    assert es_map["*"] == "excluded"
    assert len(chosen) == 2 * 7 and all(".layers." in n and n.endswith("proj.weight") for n in chosen)
    es = hs.EGGROLL(model, population=4, es_map=es_map)
    assert set(es.strategy.trainable) == chosen  # embeddings, head and norms stay frozen


def test_gpt2_conv1d_weights_evolve_and_biases_stay_frozen():
    es_map = llm.evolving(build("gpt2"))
    chosen = {n for n, m in es_map.items() if m == "lowrank"}
    assert chosen == {f"transformer.h.{i}.{m}.weight" for i in range(2)
                      for m in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")}


def test_rwkv7_skips_the_weight_read_outside_its_module():
    pytest.importorskip("rwkv7_hf")
    chosen = {n for n, m in llm.evolving(build("rwkv7")).items() if m == "lowrank"}
    assert chosen and not any("w_lora.lora.2" in n for n in chosen)
    assert any("w_lora.lora.0" in n for n in chosen) and any("ffn" in n or "mlp" in n for n in chosen)


def test_include_and_exclude_patterns():
    model = build("llama")
    chosen = {n for n, m in llm.evolving(model, include=["*.q_proj.weight", "*.v_proj.weight"],
                                         exclude=["*.layers.1.*"]).items() if m == "lowrank"}
    assert chosen == {"model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.v_proj.weight"}
    with pytest.raises(ValueError, match="match no parameter"):
        llm.evolving(model, include=["*.nope"])
    with pytest.raises(ValueError, match="nothing left"):
        llm.evolving(model, exclude=["*"])


# -- member generation is the materialised member ------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_member_generation_equals_materialized_member(folders, kind):
    model, tok = load(folders, kind)
    es = hs.EGGROLL(model, population=8, sigma=0.1, es_map=llm.evolving(model), seed=3)
    gen = llm.generate(es, tok, PROMPTS, GREEDY)
    assert gen.tokens.shape[:2] == (8, 3) and len(gen.texts) == 8
    base, _, _ = llm.complete(model, tok, PROMPTS, GREEDY)
    assert sum(gen.texts[i] != base for i in range(8)) >= 6  # the noise changes what members write
    assert gen.texts[0] != gen.texts[1]                      # twins differ by their sign
    for i in range(8):
        with es.materialized(i):
            texts, tokens, lengths = llm.complete(model, tok, PROMPTS, GREEDY)
        assert texts == gen.texts[i], f"member {i}"
        assert torch.equal(tokens, gen.tokens[i, :, :tokens.shape[1]]) and torch.equal(lengths, gen.lengths[i])


def test_materialized_restores_every_weight_bit_for_bit():
    model = build("llama")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    es = hs.EGGROLL(model, population=4, sigma=0.5, es_map=llm.evolving(model))
    with es.materialized(3) as m:
        changed = [k for k, v in m.state_dict().items() if not torch.equal(v, before[k])]
    assert set(changed) == set(es.strategy.trainable)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    with pytest.raises(ValueError, match="member must be an index in \\[0, 4\\)"):
        with es.materialized(4):
            pass
    with pytest.raises(RuntimeError), es.materialized(1):  # restored after an error too
        raise RuntimeError
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_chunks_and_member_ranges_give_the_same_generations(folders):
    model, tok = load(folders, "llama")
    es = hs.EGGROLL(model, population=8, sigma=0.1, es_map=llm.evolving(model))
    whole = llm.generate(es, tok, PROMPTS, GREEDY)
    chunked = llm.generate(es, tok, PROMPTS, GREEDY, chunk=2)
    part = llm.generate(es, tok, PROMPTS, GREEDY, members=(4, 8))
    assert chunked.texts == whole.texts and part.texts == whole.texts[4:] and part.members == (4, 8)
    with pytest.raises(ValueError, match="chunk must be an even number"):
        llm.generate(es, tok, PROMPTS, GREEDY, chunk=3)


def test_left_padding_does_not_change_a_prompt_s_completion(folders):
    model, tok = load(folders, "gpt2")
    together, _, _ = llm.complete(model, tok, ["a", "hello there world"], GREEDY)
    alone = [llm.complete(model, tok, [p], GREEDY)[0][0] for p in ["a", "hello there world"]]
    assert together == alone


def test_stop_strings_end_a_completion_after_the_stop(folders):
    model, tok = load(folders, "llama")
    free, _, _ = llm.complete(model, tok, PROMPTS, llm.Sampling(max_new_tokens=12))
    stop = next(c for text in free for c in text[2:] if c.strip())  # a character some completion writes
    texts, _, lengths = llm.complete(model, tok, PROMPTS, llm.Sampling(max_new_tokens=12, stop=(stop,)))
    for t, f, n in zip(texts, free, lengths.tolist()):
        if stop in f:
            assert t == f[:f.index(stop) + 1] and n <= len(tok(f, add_special_tokens=False)["input_ids"])
        else:
            assert t == f


def test_sampling_is_reproducible_and_checked(folders):
    model, tok = load(folders, "llama")
    hot = llm.Sampling(max_new_tokens=10, do_sample=True, temperature=2.0, seed=5)
    assert llm.complete(model, tok, PROMPTS, hot)[0] == llm.complete(model, tok, PROMPTS, hot)[0]
    with pytest.raises(ValueError, match="max_new_tokens"):
        llm.Sampling(max_new_tokens=0)
    with pytest.raises(ValueError, match="temperature"):
        llm.Sampling(temperature=0)
    with pytest.raises(ValueError, match="prompts must be"):
        llm.complete(model, tok, "a string", GREEDY)


# -- loading ---------------------------------------------------------------------------------
def test_load_errors_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="no model at"):
        llm.load_causal_lm(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="has no config.json and no .gguf file"):
        llm.load_causal_lm(tmp_path)
    (tmp_path / "w.bin").write_bytes(b"x")
    with pytest.raises(ValueError, match="not a .gguf file"):
        llm.load_causal_lm(tmp_path / "w.bin")
    with pytest.raises(ValueError, match="unknown dtype"):
        llm.load_causal_lm(save("llama", tmp_path / "m"), dtype="fp8")


def test_loads_from_several_threads_at_once_all_get_the_saved_weights(tmp_path):
    """transformers builds on the meta device through process-wide state: unguarded, a thread loading
    beside another got meta weights ("Cannot copy out of meta tensor", 30 of 30 tries here)."""
    import random
    import time
    from concurrent.futures import ThreadPoolExecutor
    from tiny import char_tokenizer
    model, tok = build("llama"), char_tokenizer()
    folder = llm.save_pretrained(model, tok, tmp_path / "m")
    saved = torch.cat([p.detach().flatten() for p in model.parameters()])

    def load(_):
        time.sleep(random.random() * 0.05)
        m, _ = llm.load_causal_lm(folder)
        return torch.cat([p.detach().flatten() for p in m.parameters()])

    for _ in range(3):
        with ThreadPoolExecutor(4) as pool:
            for got in pool.map(load, range(4)):
                assert torch.equal(got, saved)


# -- export ----------------------------------------------------------------------------------
def test_export_loads_in_plain_transformers_and_generates_the_same_tokens(folders, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    model, tok = load(folders, "llama")
    es = hs.EGGROLL(model, population=8, sigma=0.1, es_map=llm.evolving(model))
    gen = llm.generate(es, tok, PROMPTS, GREEDY)
    out = llm.save_pretrained(model, tok, tmp_path / "best", es=es, member=5)
    info = json.loads((out / "hyperscalees.json").read_text())
    assert info["member"] == 5 and info["step"] == 0 and len(info["evolved"]) == 14
    plain = AutoModelForCausalLM.from_pretrained(out, local_files_only=True).eval()
    plain_tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    plain_tok.padding_side = "left"
    assert llm.complete(plain, plain_tok, PROMPTS, GREEDY)[0] == gen.texts[5]
    with pytest.raises(FileExistsError, match="overwrite=True"):
        llm.save_pretrained(model, tok, out)
    llm.save_pretrained(model, tok, out, overwrite=True)  # the unperturbed model replaces it
    again = AutoModelForCausalLM.from_pretrained(out, local_files_only=True).eval()
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), model.state_dict().values()))
    assert [p.name for p in tmp_path.iterdir()] == ["best"]  # no temporary folder left behind


# -- training through a backend: resume is exact ---------------------------------------------
def letter_a(prompt: str, completion: str) -> float:
    return completion.count("a") - 0.1 * len(completion)


class Recipe:
    def __init__(self, folder):
        self.folder = folder

    def __call__(self):
        model, tok = llm.load_causal_lm(self.folder)
        es = hs.EGGROLL(model, population=8, sigma=0.05, lr=0.02, es_map=llm.evolving(model),
                        group_fitness="per_group")
        prompts = lambda step: [PROMPTS[step % 3], PROMPTS[(step + 1) % 3]]  # noqa: E731
        return es, llm.RewardFitness(tok, prompts, letter_a, GREEDY)


def test_reward_fitness_trains_and_resumes_exactly(folders):
    recipe = Recipe(folders["llama"])
    with LocalBackend(recipe, chunk=4) as run:
        first = run.step()
        assert run.last_fitness.shape == (8, 2)
        saved = run.es.state_dict()
        for _ in range(2):
            run.step()
        final = {k: v.clone() for k, v in run.model.state_dict().items()}
    assert first["grad_norm"] > 0
    with LocalBackend(recipe, chunk=8) as resumed:  # another chunking: the same scores
        resumed.es.load_state_dict(saved)
        for _ in range(2):
            resumed.step()
        assert all(torch.equal(final[k], v) for k, v in resumed.model.state_dict().items())


# -- precision ---------------------------------------------------------------------------------
def bf16_step(masters: bool):
    model = build("llama", dtype=torch.bfloat16)
    es = hs.EGGROLL(model, population=8, sigma=0.02, lr=1e-4, es_map=llm.evolving(model), fp32_masters=masters)
    x = torch.randint(4, 40, (2, 6))
    with es.perturbed():
        logits = model(input_ids=x.repeat(8, 1)).logits.float()
    return es, es.tell(logits[:, -1, 5].view(8, 2))


def test_bf16_with_masters_keeps_the_whole_update():
    es, metrics = bf16_step(masters=True)
    assert metrics["update_landed"] == 1.0
    master = es.strategy.rule.masters["model.layers.0.mlp.up_proj.weight"]
    weight = dict(es.model.named_parameters())["model.layers.0.mlp.up_proj.weight"]
    assert master.dtype == torch.float32 and torch.equal(weight, master.to(torch.bfloat16))


def test_bf16_without_masters_reports_the_update_that_rounded_away():
    _, metrics = bf16_step(masters=False)
    with pytest.warns(RuntimeWarning, match="of the update landed"):
        landed = metrics["update_landed"]
    assert 0 <= landed < 0.2  # Adam's 1e-4 steps are below bf16's resolution at |w| ~ 0.3


def test_fp32_models_report_no_landed_figure():
    model = build("llama")
    es = hs.EGGROLL(model, population=4, es_map=llm.evolving(model))
    with es.perturbed():
        model(input_ids=torch.ones(4, 3, dtype=torch.long))
    assert "update_landed" not in es.tell(torch.arange(4.0))
