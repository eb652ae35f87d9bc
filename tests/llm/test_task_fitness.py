"""The SFT fitness against a direct per-row computation (tiny Llama and GPT-2, and a plain
module), member rows against materialised members; task and SafeReward rewards through
RewardFitness's batched path."""
from __future__ import annotations

import pytest
import torch
from torch import nn

pytest.importorskip("transformers")
import hyperscalees as hs  # noqa: E402
from hyperscalees import llm  # noqa: E402
from hyperscalees.llm import SafeReward  # noqa: E402
from hyperscalees.tasks.problems import ArithmeticProblems, SFTFitness, completion_loglik  # noqa: E402
from tiny import build, char_tokenizer  # noqa: E402

PROMPTS = ["12+3=", "ab", "hello world, "]
COMPLETIONS = ["15", "cdefg", "<answer>7</answer>"]


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@torch.no_grad()
def direct(model, tok, prompt, completion, reduction="mean"):
    """One unpadded sequence, log_softmax, the completion tokens' log-probabilities."""
    ids_p = tok(prompt, add_special_tokens=False)["input_ids"]
    ids_c = tok(completion, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([ids_p + ids_c])
    out = model(ids)
    logits = (out.logits if hasattr(out, "logits") else out)[0].double()
    logp = torch.log_softmax(logits, -1)
    total = sum(logp[len(ids_p) - 1 + k, t] for k, t in enumerate(ids_c))
    return float(total / len(ids_c) if reduction == "mean" else total)


@pytest.mark.parametrize("kind", ["llama", "gpt2", "rwkv7"])
def test_loglik_equals_a_direct_computation(kind):
    if kind == "rwkv7":
        pytest.importorskip("rwkv7_hf")
    model, tok = build(kind), char_tokenizer()
    got = completion_loglik(model, tok, PROMPTS, COMPLETIONS)
    assert got.shape == (1, 3) and got.dtype == torch.float32
    want = torch.tensor([[direct(model, tok, p, c) for p, c in zip(PROMPTS, COMPLETIONS)]])
    torch.testing.assert_close(got, want.float(), atol=1e-5, rtol=1e-5)
    summed = completion_loglik(model, tok, PROMPTS, COMPLETIONS, repeats=2, reduction="sum")
    want_sum = torch.tensor([direct(model, tok, p, c, "sum") for p, c in zip(PROMPTS, COMPLETIONS)])
    torch.testing.assert_close(summed, want_sum.float().repeat(2, 1), atol=1e-4, rtol=1e-5)


class PlainLM(nn.Module):
    """A causal toy without a config: embedding -> running mean -> head."""

    def __init__(self, vocab):
        super().__init__()
        self.emb, self.head = nn.Embedding(vocab, 16), nn.Linear(16, vocab)

    def forward(self, ids):
        h = self.emb(ids).cumsum(1) / torch.arange(1, ids.shape[1] + 1).view(1, -1, 1)
        return self.head(h)


def test_plain_module_and_errors():
    tok = char_tokenizer()
    torch.manual_seed(0)
    model = PlainLM(len(tok))
    got = completion_loglik(model, tok, PROMPTS, COMPLETIONS)
    want = torch.tensor([[direct(model, tok, p, c) for p, c in zip(PROMPTS, COMPLETIONS)]])
    torch.testing.assert_close(got, want.float(), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="one completion per prompt"):
        completion_loglik(model, tok, PROMPTS, COMPLETIONS[:2])
    with pytest.raises(ValueError, match="pair 1: the completion has no tokens"):
        completion_loglik(model, tok, ["a", "b"], ["c", ""])
    with pytest.raises(ValueError, match="reduction"):
        SFTFitness(tok, list(zip(PROMPTS, COMPLETIONS)), reduction="max")


def test_member_rows_equal_materialized_members():
    model, tok = build("llama"), char_tokenizer()
    es = hs.EGGROLL(model, population=6, sigma=0.1, es_map=llm.evolving(model), seed=2)
    es.ask()
    fitness = SFTFitness(tok, lambda step: list(zip(PROMPTS, COMPLETIONS)))
    with es.perturbed((2, 6)):
        scores = fitness(model, 2, 6, step=0)
    assert scores.shape == (4, 3)
    for i in range(2, 6):
        with es.materialized(i):
            member = completion_loglik(model, tok, PROMPTS, COMPLETIONS)
        torch.testing.assert_close(scores[i - 2], member[0], atol=1e-4, rtol=1e-4)
    assert not torch.allclose(scores[0], scores[1])  # twins differ


def test_reward_fitness_with_task_and_safe_reward(tmp_path):
    model, tok = build("llama"), char_tokenizer()
    task = ArithmeticProblems(seed=0)
    prompts = task.prompts("train", 0, 2)  # capitals read as <unk> by the tiny tokenizer: fine
    es = hs.EGGROLL(model, population=4, sigma=0.1, es_map=llm.evolving(model), seed=1)
    es.ask()
    sampling = llm.Sampling(max_new_tokens=6)
    with es.perturbed((0, 4)):
        scores = llm.RewardFitness(tok, prompts, task.reward, sampling)(model, 0, 4, step=0)
    assert scores.shape == (4, 2) and set(scores.flatten().tolist()) <= {0.0, 0.1, 1.0}

    (tmp_path / "length_reward.py").write_text("def reward(prompt, completion):\n"
                                               "    return float(len(completion))\n")
    with SafeReward(f"{tmp_path / 'length_reward.py'}:reward", timeout=5.0) as safe:
        calls, batch = [], safe.batch
        safe.batch = lambda ps, cs: calls.append(len(cs)) or batch(ps, cs)
        fitness = llm.RewardFitness(tok, prompts, safe, sampling)
        with es.perturbed((0, 4)):
            scores = fitness(model, 0, 4, step=0)
    assert calls == [8]  # one batch for the chunk's 4 members x 2 prompts
    assert scores.flatten().tolist() == [float(len(t)) for t in fitness.last_texts]
