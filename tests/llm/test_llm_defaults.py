"""The Python path for "my model, my prompts, my reward": ``llm.EGGROLL``'s defaults, a reward's
fields and batched form, ``RewardFitness.population`` and a step in which every reward failed."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
import hyperscalees as hs  # noqa: E402
from hyperscalees import llm  # noqa: E402
from tiny import build, char_tokenizer  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py
SAMPLING = llm.Sampling(max_new_tokens=4)
PROMPTS = ["1+1=", "2+2="]
FIELDS = {"1+1=": {"answer": "2"}, "2+2=": {"answer": "4"}}


def tokenizer():
    tok = char_tokenizer()
    tok.padding_side = "left"
    return tok


def test_llm_eggroll_evolves_the_block_matrices_and_normalises_per_prompt():
    model = build("llama")
    es = llm.EGGROLL(model, population=4)
    plain = hs.EGGROLL(model, population=4)
    assert es.config.group_fitness == "per_group" and plain.config.group_fitness == "mean"
    assert evolved(es) == {n for n, m in llm.evolving(model).items() if m == "lowrank"} != evolved(plain)
    assert "lm_head.weight" in evolved(plain) and not any("embed" in n or "lm_head" in n for n in evolved(es))
    assert es.config.sigma == es.config.lr == 1e-3
    explicit = llm.EGGROLL(model, population=4, group_fitness="mean", es_map=llm.evolving(model, include=["*q_proj*"]))
    assert explicit.config.group_fitness == "mean" and evolved(explicit) and all("q_proj" in n for n in evolved(explicit))


def evolved(es) -> set[str]:
    return {n for n, spec in es.specs.items() if spec.mode.name != "EXCLUDED"}


def answer_reward(prompt, completion, answer):
    return float(answer in completion) + len(set(completion)) / 10


def test_a_rewards_fields_reach_it_per_answer_and_batched_alike():
    model = build("llama")
    es = llm.EGGROLL(model, population=4, sigma=0.05)
    seen = []

    def batched(prompts, completions, answer):
        seen.append((list(prompts), list(answer)))
        return [answer_reward(p, c, a) for p, c, a in zip(prompts, completions, answer)]

    tok = tokenizer()
    one = llm.RewardFitness(tok, PROMPTS, answer_reward, SAMPLING, fields=FIELDS).population(es)
    many = llm.RewardFitness(tok, PROMPTS, batched, SAMPLING, fields=FIELDS, batched=True).population(es, chunk=2)
    assert one.shape == (4, 2) and torch.equal(one, many)
    assert seen[0] == (PROMPTS * 2, ["2", "4"] * 2)  # member-major rows, each with its own prompt's field
    es.tell(one)
    assert es.step == 1


def test_safe_reward_passes_fields_to_its_worker():
    with llm.SafeReward(answer_reward, timeout=5.0) as safe:
        assert safe.batch(["1+1="], ["=2"], [{"answer": "2"}]) == [1.2]
        assert safe("1+1=", "x", answer="2") == 0.1


def broken(prompt, completion):
    raise ValueError("broken reward")


def test_a_step_in_which_every_reward_failed_raises_naming_the_last_error():
    model = build("llama")
    es = llm.EGGROLL(model, population=2)
    with llm.SafeReward(broken, timeout=5.0) as safe:
        fitness = llm.RewardFitness(tokenizer(), PROMPTS, safe, SAMPLING)
        scores = fitness.population(es)
        assert torch.equal(scores, torch.full((2, 2), -1.0))
        with pytest.raises(llm.RewardFailedError, match=r"every reward call of step 1 failed \(4 of 4; last error: "
                                                        r"ValueError: broken reward\)"):
            fitness.check()
    half = llm.RewardFitness(tokenizer(), PROMPTS, lambda p, c: 1.0, SAMPLING)
    half.population(es)
    half.check()  # a reward that never fails is never refused
