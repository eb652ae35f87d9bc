"""The held-out evaluator every LLM fine-tuning method shares (``train llm``, ``bench llm``'s GRPO).

``held_out(task, model, tokenizer, sampling, count)`` answers the first ``count`` problems of
the task's ``"test"`` split with ``llm.complete`` (one batch, the unperturbed model, as
``sampling`` says: greedy by default) and scores each answer with the task's verifier. The test
split is the same for every seed, so numbers from runs with different seeds compare.
"""
from __future__ import annotations

import torch

from ... import llm


@torch.no_grad()
def held_out(task, model, tokenizer, sampling=None, count: int = 32, sample: dict | None = None) -> dict[str, float]:
    """``{"accuracy", "formatted", "reward"}``: means over the first ``count`` held-out problems.

    ``sample``, when given a dict, receives the first prompt and its completion (for logs)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be a whole number >= 1, got {count!r}")
    prompts = task.prompts("test", 0, count)
    texts, _, _ = llm.complete(model, tokenizer, prompts, sampling or llm.Sampling())
    scores = [task.score(p, t) for p, t in zip(prompts, texts)]
    if sample is not None:
        sample.update(prompt=prompts[0], completion=texts[0])
    return {"accuracy": sum(s.correct for s in scores) / len(scores),
            "formatted": sum(s.formatted for s in scores) / len(scores),
            "reward": sum(s.reward for s in scores) / len(scores)}
