"""Sums of fitness-weighted noise, the heart of the ES update, as GEMMs in a fixed order.

K pairs, r rank. ``weights`` (K,) are per-pair fitness contrasts Σ_member f_i s_i (times
any scale folded in). Pairs are reduced in blocks of :data:`REDUCTION_PAIRS`, counted from
the first pair handed in, one single-threaded GEMM per block and output tile accumulated in
order (``fixed_order``): so the bits of a sum depend on the pairs and weights alone -- not on
the thread count, and not on how callers chunk the pairs, as long as chunks start at
multiples of the block. Without ``fixed`` a sum is one multi-threaded BLAS call, whose last
bits follow the thread count and the chunking.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .fixed_order import addmm_blocks_, fixed_threads
from .precision import addmm_fp32_, round_operands

REDUCTION_PAIRS = 256  # pairs per GEMM of the update; callers chunk at multiples of it


def pair_weights(shaped: Tensor, signs: Tensor) -> Tensor:
    """(P,) shaped fitness and (K, g) signs -> (K,) Σ f_i s_i over the g members of each draw."""
    return (shaped.view(-1, signs.shape[1]) * signs.to(shaped.dtype)).sum(dim=1)


def _blocks(k: int, r: int = 1) -> list[slice]:
    """Rows of a (K·r, ·) operand that make up each block of pairs."""
    return [slice(k0 * r, min(k, k0 + REDUCTION_PAIRS) * r) for k0 in range(0, k, REDUCTION_PAIRS)]


def lowrank_sum_(out: Tensor, a: Tensor, b: Tensor, weights: Tensor, fixed: bool = True,
                 precision: str = "fp32", accumulate: bool = True) -> Tensor:
    """out (rows, cols) += Σ_k w_k A_k B_kᵀ = (A ⊙ w)ᵀ B, a (K, rows, r), b (K, cols, r).

    ``accumulate=False``: out = Σ_k ..., its old contents never read (a fresh ``torch.empty``).

    The (K·r, ·) operands are built once (views of the factors when r == 1) and each
    block is a slice of them, so the blocks cost GEMM calls, not copies. ``precision``
    (ops.precision) rounds the operands -- after the fitness weights are applied -- and
    accumulates in fp32. On CUDA the GEMM is one call (the fixed tiles are a CPU remedy).
    """
    k, rows, r = a.shape
    left = (a * weights.to(a.dtype).view(k, 1, 1)).transpose(1, 2).reshape(k * r, rows)  # (K·r, rows)
    right = b.transpose(1, 2).reshape(k * r, b.shape[1])                                   # (K·r, cols)
    if not fixed or out.device.type == "cuda":  # one GEMM at the library's own pace
        return addmm_fp32_(out, left.T, right, precision, accumulate)
    left, right = round_operands(left, right, precision)
    blocks = _blocks(k, r)
    if len(blocks) == 1:  # the common case: no slicing
        return addmm_blocks_(out, [left.T], [right], accumulate)
    return addmm_blocks_(out, [left[blk].T for blk in blocks], [right[blk] for blk in blocks], accumulate)


def full_sum_(out: Tensor, noise: Tensor, weights: Tensor, fixed: bool = True, accumulate: bool = True) -> Tensor:
    """out (*shape) += Σ_k w_k ε_k for noise (K, *shape) (``accumulate=False``: out = Σ_k ...)."""
    k = noise.shape[0]
    flat, w = noise.reshape(k, -1), weights.to(noise.dtype)
    if not fixed:
        out.view(-1).addmv_(flat.T, w, beta=1 if accumulate else 0)
        return out
    with fixed_threads():  # one GEMV per block, on one thread, in order
        for i, blk in enumerate(_blocks(k)):
            out.view(-1).addmv_(flat[blk].T, w[blk], beta=1 if accumulate or i else 0)
    return out


def lowrank_sum(a: Tensor, b: Tensor, weights: Tensor) -> Tensor:
    """Σ_k w_k A_k B_kᵀ as a new (rows, cols) tensor."""
    return lowrank_sum_(torch.empty(a.shape[1], b.shape[1], dtype=a.dtype, device=a.device), a, b, weights,
                        accumulate=False)


def full_sum(noise: Tensor, weights: Tensor) -> Tensor:
    """Σ_k w_k ε_k as a new (*shape) tensor."""
    return full_sum_(torch.empty(noise.shape[1:], dtype=noise.dtype, device=noise.device), noise, weights,
                     accumulate=False)
