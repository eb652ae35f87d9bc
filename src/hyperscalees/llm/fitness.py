"""A population-generation fitness for any backend: members answer the step's prompts, a reward scores.

``RewardFitness(tokenizer, prompts, reward)`` is the ``fitness(model, lo, hi, step)`` of the
recipe protocol (``hyperscalees.distributed.recipe``): inside ``es.perturbed((lo, hi))`` it
generates the chunk's completions in one batched ``generate`` and returns their scores
(hi - lo, P), one column per prompt, which the strategy's (P, G) shaping normalises per
prompt (``group_fitness="per_group"``) or averages (``"mean"``). Prompts depend on the step
only, never on which worker asks, so any chunking on any backend gives the same scores. A reward
with a ``batch(prompts, completions) -> list[float]`` method (``tasks.llm.SafeReward``) is called
once per chunk through it.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import Tensor, nn

from .generate import Sampling, complete_chunk

Reward = Callable[[str, str], float]


class RewardFitness:
    """``reward(prompt, completion) -> float`` of every member on ``prompts`` (a list, or step -> list)."""

    def __init__(self, tokenizer, prompts: Sequence[str] | Callable[[int], Sequence[str]], reward: Reward,
                 sampling: Sampling = Sampling()):
        if not callable(reward):
            raise TypeError(f"reward must be callable (prompt, completion) -> float, got {type(reward).__name__}")
        self.tokenizer, self.prompts, self.reward, self.sampling = tokenizer, prompts, reward, sampling
        self.last_texts: list[str] = []

    def prompts_at(self, step: int) -> list[str]:
        prompts = list(self.prompts(step) if callable(self.prompts) else self.prompts)
        if not prompts:
            raise ValueError(f"no prompts for step {step}")
        return prompts

    def __call__(self, model: nn.Module, lo: int, hi: int, step: int) -> Tensor:
        prompts = self.prompts_at(step)
        texts, _, _ = complete_chunk(model, self.tokenizer, prompts, self.sampling, (lo, hi), step)
        self.last_texts = texts
        rows = [prompts[r % len(prompts)] for r in range(len(texts))]
        batch = getattr(self.reward, "batch", None)  # e.g. SafeReward: one message to its worker
        scores = batch(rows, texts) if callable(batch) else [float(self.reward(p, t)) for p, t in zip(rows, texts)]
        return torch.tensor(scores, dtype=torch.float32).view(hi - lo, len(prompts))
