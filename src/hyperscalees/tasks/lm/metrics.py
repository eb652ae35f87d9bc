"""Cross-entropy in bits: of a model's float logits, and of the unigram/bigram baselines.

Dimensions: B streams, T positions, V vocabulary.

Every number is a real cross-entropy -- ``log_softmax`` of the model's natural-log logits,
converted to base 2 -- not the integer proxy d-eggs logs (``deggs_ezmup.md`` §1.9). Bits per
byte divide the bits of the predicted tokens by the bytes those tokens spell (1 per token for
byte data), so byte- and token-level models are compared on the same footing.

The baselines are count models fitted on the train stream and scored on the same targets as
the model, with **add-one (Laplace) smoothing**: unigram ``p(b) = (n_b + 1) / (N + V)``, bigram
``p(b | a) = (n_ab + 1) / (n_a· + V)`` where ``n_a·`` counts the pairs starting with ``a``.
Counts of pairs are kept sparse (sorted pair codes), so an 8192-token vocabulary costs no
V×V table.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

LN2 = math.log(2.0)


def token_bits(logits: Tensor, targets: Tensor) -> Tensor:
    """(B, T, V) natural-log logits, (B, T) targets -> (B, T) bits of each target (float32)."""
    logp = F.log_softmax(logits.float(), dim=-1)
    return -logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1) / LN2


def unigram_bits(train: Tensor, targets: Tensor, vocab: int) -> Tensor:
    """Bits of every target under the add-one unigram of ``train`` (float64)."""
    counts = torch.bincount(train, minlength=vocab).double()
    p = (counts + 1) / (train.numel() + vocab)
    return -torch.log2(p[targets])


def bigram_bits(train: Tensor, prev: Tensor, targets: Tensor, vocab: int) -> Tensor:
    """Bits of ``targets`` given the tokens ``prev`` before them, add-one bigram of ``train``."""
    codes = train[:-1] * vocab + train[1:]
    uniq, n_pair = torch.unique(codes, return_counts=True)            # sorted pair codes
    n_first = torch.bincount(train[:-1], minlength=vocab).double()   # pairs starting with a
    q = prev * vocab + targets
    at = torch.searchsorted(uniq, q).clamp(max=max(uniq.numel() - 1, 0))
    hit = uniq[at] == q
    n = torch.where(hit, n_pair[at], torch.zeros_like(at)).double()
    return -torch.log2((n + 1) / (n_first[prev] + vocab))


def baselines(train: Tensor, streams: Tensor, vocab: int, token_bytes: Tensor) -> dict[str, float]:
    """Unigram/bigram bits per byte (and per token) on the targets of ``streams`` (E, L): positions 1..L-1."""
    prev, tgt = streams[:, :-1].reshape(-1), streams[:, 1:].reshape(-1)
    nbytes = float(token_bytes[tgt].sum())
    uni, bi = unigram_bits(train, tgt, vocab).sum().item(), bigram_bits(train, prev, tgt, vocab).sum().item()
    n = tgt.numel()
    return {"unigram_bpb": uni / nbytes, "bigram_bpb": bi / nbytes, "unigram_bpt": uni / n, "bigram_bpt": bi / n}
