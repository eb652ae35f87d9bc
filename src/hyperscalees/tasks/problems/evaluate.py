"""The held-out evaluator every LLM fine-tuning method shares (``train llm``, ``bench llm``'s GRPO).

``held_out_rewards(prompts, score, model, tokenizer, sampling)`` is its form for a user's own prompts
(``train llm --dataset``): the mean of ``score(prompts, completions)`` over the held-out prompts.

``held_out(task, model, tokenizer, sampling, count)`` answers the first ``count`` distinct problems
of the task's ``"test"`` split (``task.distinct_problems``: a repeated problem would count twice)
with ``llm.complete`` (the unperturbed model, as ``sampling`` says: greedy by default) and scores
each answer with the task's verifier. The test split is the same for every seed, so numbers from
runs with different seeds compare.

The problems go through ``generate`` ``chunk`` at a time (:data:`EVAL_CHUNK` by default), and
``check()`` is called before each chunk: ``train llm`` passes the task's ``check_stop``, so a
stop request (Ctrl-C, the time budget) cuts an evaluation short within one chunk.
"""
from __future__ import annotations

from typing import Callable

import torch

from ... import llm

EVAL_CHUNK = 16  # held-out problems per batched generate: bounds memory and the wait for a stop


@torch.no_grad()
def held_out(task, model, tokenizer, sampling=None, count: int = 32, samples: list | None = None,
             chunk: int | None = None, check: Callable[[], None] | None = None,
             split: str = "test") -> dict[str, float]:
    """``{"accuracy", "formatted", "reward"}``: means over the first ``count`` distinct held-out problems
    (of ``split``: ``bench llm --tune`` chooses settings on the ``"validation"`` split).

    ``samples``, when given a list, receives one record per problem (``prompt``, ``completion``,
    ``reward``, ``correct``), in order, once every chunk is done; ``check`` may raise between
    chunks to abandon the evaluation (then ``samples`` is left as it was)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be a whole number >= 1, got {count!r}")
    prompts = [p.prompt for p in task.distinct_problems(split, count)]
    texts = _answers(prompts, model, tokenizer, sampling, chunk, check)
    scores = [task.score(p, t) for p, t in zip(prompts, texts)]
    if samples is not None:
        samples.extend({"prompt": p, "completion": t, "reward": s.reward, "correct": s.correct}
                       for p, t, s in zip(prompts, texts, scores))
    return {"accuracy": sum(s.correct for s in scores) / len(scores),
            "formatted": sum(s.formatted for s in scores) / len(scores),
            "reward": sum(s.reward for s in scores) / len(scores)}


@torch.no_grad()
def held_out_rewards(prompts: list[str], score: Callable[[list[str], list[str]], list[float]], model, tokenizer,
                     sampling=None, samples: list | None = None, chunk: int | None = None,
                     check: Callable[[], None] | None = None) -> dict[str, float]:
    """``{"reward"}``: the mean of ``score(prompts, completions)`` (one float per completion) over
    ``prompts``, answered as :func:`held_out` answers; ``samples`` receives ``prompt``, ``completion``
    and ``reward`` per prompt."""
    if not prompts:
        raise ValueError("no held-out prompts to evaluate")
    texts = _answers(list(prompts), model, tokenizer, sampling, chunk, check)
    rewards = [float(r) for r in score(list(prompts), texts)]
    if samples is not None:
        samples.extend({"prompt": p, "completion": t, "reward": r} for p, t, r in zip(prompts, texts, rewards))
    return {"reward": sum(rewards) / len(rewards)}


def _answers(prompts: list[str], model, tokenizer, sampling, chunk: int | None, check) -> list[str]:
    """The completions of ``prompts``, ``chunk`` at a time, ``check()`` polled before each chunk."""
    chunk = EVAL_CHUNK if chunk is None else chunk
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be a whole number >= 1, got {chunk!r}")
    texts = []
    for lo in range(0, len(prompts), chunk):
        if check is not None:
            check()
        texts += llm.complete(model, tokenizer, prompts[lo:lo + chunk], sampling or llm.Sampling())[0]
    return texts
