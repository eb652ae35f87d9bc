"""The held-out evaluator every LLM fine-tuning method shares (``train llm``, ``bench llm``'s GRPO).

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
    chunk = EVAL_CHUNK if chunk is None else chunk
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be a whole number >= 1, got {chunk!r}")
    prompts = [p.prompt for p in task.distinct_problems(split, count)]
    texts = []
    for lo in range(0, count, chunk):
        if check is not None:
            check()
        texts += llm.complete(model, tokenizer, prompts[lo:lo + chunk], sampling or llm.Sampling())[0]
    scores = [task.score(p, t) for p, t in zip(prompts, texts)]
    if samples is not None:
        samples.extend({"prompt": p, "completion": t, "reward": s.reward, "correct": s.correct}
                       for p, t, s in zip(prompts, texts, scores))
    return {"accuracy": sum(s.correct for s in scores) / len(scores),
            "formatted": sum(s.formatted for s in scores) / len(scores),
            "reward": sum(s.reward for s in scores) / len(scores)}
