"""SFT by ES: the teacher-forced log-likelihood of reference completions as the fitness.

``completion_loglik(model, tokenizer, prompts, completions, repeats)`` feeds each
(prompt, completion) pair as one sequence, ``prompt ids + completion ids`` (each tokenised on
its own, without special tokens, as population generation tokenises prompts), right-padded,
and returns each row's mean log-probability of its completion tokens given everything before
them. The rows are the pairs repeated member-major (rows [i·P, (i+1)·P) are member i's), so
called inside ``es.perturbed((lo, hi))`` with ``repeats = hi - lo`` it scores every member
of the chunk in one forward and returns (members, P). Right padding keeps every real token at
its unpadded position, so a row's score does not depend on what it is batched with (up to
rounding).

``SFTFitness(tokenizer, pairs)`` is that as a backend fitness (``fitness(model, lo, hi, step)``),
the counterpart of ``llm.RewardFitness``: a warm start without gradients (the reference's
``sft_evolution.py`` sums log-probabilities; ``reduction="sum"`` does that).

``model`` is a Hugging Face causal LM (called with ``input_ids`` and ``attention_mask``; its
output's ``logits`` are read) or any ``nn.Module`` mapping token ids (rows, L) to logits
(rows, L, V) causally.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

Pairs = Sequence[tuple[str, str]]


def encode_pairs(tokenizer, prompts: Sequence[str], completions: Sequence[str]) -> tuple[Tensor, Tensor, Tensor]:
    """(ids, attention mask, completion mask) (P, L): prompt then completion ids, right-padded;
    the completion mask marks the completion's tokens."""
    if isinstance(prompts, str) or isinstance(completions, str):
        raise ValueError("prompts and completions must be lists of strings")
    if len(prompts) != len(completions) or not prompts:
        raise ValueError(f"need one completion per prompt, got {len(prompts)} prompts and {len(completions)} completions")
    rows, spans = [], []
    for j, (p, c) in enumerate(zip(prompts, completions)):
        if not isinstance(p, str) or not isinstance(c, str):
            raise ValueError(f"pair {j}: prompt and completion must be strings")
        ids_p = tokenizer(p, add_special_tokens=False)["input_ids"]
        ids_c = tokenizer(c, add_special_tokens=False)["input_ids"]
        if not ids_p or not ids_c:
            raise ValueError(f"pair {j}: the {'prompt' if not ids_p else 'completion'} has no tokens")
        rows.append(list(ids_p) + list(ids_c))
        spans.append((len(ids_p), len(ids_c)))
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids = torch.full((len(rows), width), 0 if pad is None else pad, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    target = torch.zeros(len(rows), width, dtype=torch.bool)
    for r, (row, (lp, lc)) in enumerate(zip(rows, spans)):
        ids[r, :len(row)] = torch.tensor(row)
        mask[r, :len(row)] = 1
        target[r, lp:lp + lc] = True
    return ids, mask, target


def _logits(model: nn.Module, ids: Tensor, mask: Tensor) -> Tensor:
    if hasattr(model, "config"):  # a transformers model
        out = model(input_ids=ids, attention_mask=mask, use_cache=False)
    else:
        out = model(ids)
    logits = getattr(out, "logits", out)
    if isinstance(logits, (tuple, list)):
        logits = logits[0]
    if not isinstance(logits, Tensor) or logits.shape[:2] != ids.shape:
        raise ValueError(f"the model must return logits (rows, L, V) for ids {tuple(ids.shape)}, "
                         f"got {getattr(logits, 'shape', type(logits).__name__)}")
    return logits


@torch.no_grad()
def completion_loglik(model: nn.Module, tokenizer, prompts: Sequence[str], completions: Sequence[str],
                      repeats: int = 1, reduction: str = "mean") -> Tensor:
    """(repeats, P) log-likelihood of each completion after its prompt, per completion token
    (``reduction="mean"``) or summed (``"sum"``), fp32. One forward over repeats·P rows,
    member-major, as ``es.perturbed`` needs (a backend's ``chunk`` bounds the members per call)."""
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
    device = next(model.parameters()).device
    ids, mask, target = (t.to(device).repeat(repeats, 1) for t in encode_pairs(tokenizer, prompts, completions))
    logits = _logits(model, ids, mask)[:, :-1].float()  # position t predicts token t + 1
    nll = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
    keep = target[:, 1:]
    total = -(nll * keep).sum(1)
    return (total / keep.sum(1) if reduction == "mean" else total).view(repeats, len(prompts))


class SFTFitness:
    """Members' log-likelihood of reference completions: ``fitness(model, lo, hi, step)`` -> (hi - lo, P).

    ``pairs``: (prompt, reference completion) pairs, or a function of the step returning them
    (e.g. ``lambda s: [(p.prompt, p.solution) for p in task.problems("train", s * 8, 8)]``).
    """

    def __init__(self, tokenizer, pairs: Pairs | Callable[[int], Pairs], reduction: str = "mean"):
        if reduction not in ("mean", "sum"):
            raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
        self.tokenizer, self.pairs, self.reduction = tokenizer, pairs, reduction

    def pairs_at(self, step: int) -> list[tuple[str, str]]:
        pairs = list(self.pairs(step) if callable(self.pairs) else self.pairs)
        if not pairs:
            raise ValueError(f"no (prompt, completion) pairs for step {step}")
        return pairs

    def __call__(self, model: nn.Module, lo: int, hi: int, step: int) -> Tensor:
        prompts, completions = zip(*self.pairs_at(step))
        return completion_loglik(model, self.tokenizer, list(prompts), list(completions), repeats=hi - lo,
                                 reduction=self.reduction).cpu()
