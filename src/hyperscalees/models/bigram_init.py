"""Start an integer LM as a bigram: its embedding and head set from counts, its blocks neutral.

Why: a byte-level egg learns first what a bigram table already knows (which byte follows which),
and on a CPU budget that costs most of the run: 20 minutes of ES bring the default egg only to
about the bigram's bits/byte (issue #20). Counting bigrams costs a pass over the training split,
no gradients; the ES run then spends its steps on what the bigram cannot do (context).

How, for a model whose path from token to logits, with the blocks' contributions zero, is
``head(norm_out(embed(token)))`` (egg):

1. The target logits: 16·log2 P(next | prev) (the head's unit is 1/16 bit), each row shifted so its
   largest value is just under the int8 limit (softmax does not see the shift; the clip then only
   flattens odds below 2^-15.9, which cost nothing measurable).
2. The embedding: the rank-D SVD directions of those logits, scaled to the int8 range.
3. The head: least squares, weighted by how often each byte precedes, from the normalised
   embedding rows (computed by the model's own norm) to the target logits, rounded to int8; the
   output norm's gain is chosen among a few values by the expected bits under the bigram itself.
4. The blocks add nothing: recurrent candidate (``wh``, ``uh``) and MLP output (``down``) weights 0,
   so the state stays 0 and the residual stream passes through; ES perturbations of those zeros
   are what it learns context from.

Rank D caps what this can reach: on the default corpus the rank-32 bigram scores 3.75 bits/byte
against the full table's 3.64, the rank-64 one 3.64 (so ``--hidden 64`` starts at the bigram).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from ..ops.int8 import QMAX

GAINS = (8, 12, 16, 24, 32, 48, 64)  # output-norm gains tried (16 = 1.0 in 4-bit fixed point)


def bigram_log2(tokens: Tensor, vocab: int) -> tuple[Tensor, Tensor]:
    """(log2 P(next | prev) with add-one smoothing (vocab, vocab), how often each token precedes (vocab,))."""
    t = tokens.reshape(-1).long().cpu()
    counts = torch.zeros(vocab * vocab, dtype=torch.float64)
    counts.index_add_(0, t[:-1] * vocab + t[1:], torch.ones(t.numel() - 1, dtype=torch.float64))
    counts = counts.view(vocab, vocab)
    probs = (counts + 1) / (counts.sum(1, keepdim=True) + vocab)
    return probs.log2(), counts.sum(1)


def target_logits(log2_probs: Tensor) -> Tensor:
    """The head's int8 target: 16·log2 P, each row's maximum moved to QMAX - 0.5, clipped below."""
    shifted = 16.0 * (log2_probs - log2_probs.max(1, keepdim=True).values) + (QMAX - 0.5)
    return shifted.clamp(-QMAX, QMAX)


def expected_bits(logits16: Tensor, log2_probs: Tensor, weights: Tensor) -> float:
    """Bits per token under the bigram itself of int logits in 1/16-bit units, rows weighted by ``weights``."""
    logq = torch.log_softmax(logits16.double() * (math.log(2) / 16), dim=1) / math.log(2)
    per_row = -(log2_probs.exp2() * logq).sum(1)
    return float((per_row * weights).sum() / weights.sum())


@torch.no_grad()
def init_from_bigram(model, log2_probs: Tensor, weights: Tensor) -> float:
    """Set ``model`` (an :class:`~hyperscalees.models.egg.Egg`) to start as the rank-D bigram of
    ``log2_probs``; returns the expected bits per token of the result under that bigram."""
    vocab, dim = model.vocab_size, model.dim
    if log2_probs.shape != (vocab, vocab):
        raise ValueError(f"log2_probs must be ({vocab}, {vocab}), got {tuple(log2_probs.shape)}")
    target = target_logits(log2_probs.double())
    u, s, _ = torch.linalg.svd(target)
    k = min(dim, vocab)                                                 # a width past the vocabulary adds nothing
    a = torch.zeros(vocab, dim, dtype=torch.float64)
    a[:, :k] = u[:, :k] * s[:k].sqrt()
    embed = (a * (QMAX / a.abs().max())).round().clamp(-QMAX, QMAX).to(torch.int8)
    w = weights.double().clamp_min(1.0).sqrt()[:, None]
    best = None
    for gain in GAINS:
        model.norm_out.weight.fill_(gain)
        x = model.norm_out(embed).double()                              # (V, D), exactly as the forward
        # columns past k are zero: solve on the first k only (full rank). On the rank-deficient whole,
        # LAPACK's solution varied from call to call and once cost 0.3 bits after int8 rounding.
        head = torch.zeros(vocab, dim, dtype=torch.float64)
        head[:, :k] = torch.linalg.lstsq(w * x[:, :k], w * target * model.head.divisor).solution.T
        head = head.round().clamp(-QMAX, QMAX).to(torch.int8)
        model.head.weight.copy_(head)
        logits = model.head(model.norm_out(embed)).double()
        bits = expected_bits(logits, log2_probs.double(), weights.double())
        if best is None or bits < best[0]:
            best = (bits, gain, head)
    bits, gain, head = best
    model.embed.weight.copy_(embed)
    model.norm_out.weight.fill_(gain)
    model.head.weight.copy_(head)
    for block in model.blocks:
        for layer in (block.wh, block.uh, block.down):
            layer.weight.zero_()
    return bits
