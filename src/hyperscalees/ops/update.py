"""Sums of fitness-weighted noise, the heart of the ES update, as GEMMs in a fixed order.

K pairs, r rank. ``weights`` (K,) are per-pair fitness contrasts Σ_member f_i s_i (times
any scale folded in). Pairs are reduced in blocks of :data:`REDUCTION_PAIRS`, counted from
the first pair handed in, one GEMM per block accumulated in order (``fixed_order``): so
the bits of a sum do not depend on how callers chunk the pairs, as long as chunks start at
multiples of the block, and with ``fixed`` not on the thread count either.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .fixed_order import addmm_blocks_

REDUCTION_PAIRS = 256  # pairs per GEMM of the update; callers chunk at multiples of it


def pair_weights(shaped: Tensor, signs: Tensor) -> Tensor:
    """(P,) shaped fitness and (K, 2) signs -> (K,) Σ f_i s_i within each pair."""
    return (shaped.view(-1, 2) * signs.to(shaped.dtype)).sum(dim=1)


def _blocks(k: int) -> list[slice]:
    return [slice(k0, min(k, k0 + REDUCTION_PAIRS)) for k0 in range(0, k, REDUCTION_PAIRS)]


def lowrank_sum_(out: Tensor, a: Tensor, b: Tensor, weights: Tensor, fixed: bool = True) -> Tensor:
    """out (rows, cols) += Σ_k w_k A_k B_kᵀ = (A ⊙ w)ᵀ B, a (K, rows, r), b (K, cols, r)."""
    k, rows, r = a.shape
    lefts, rights = [], []
    for blk in _blocks(k):
        n = (blk.stop - blk.start) * r
        aw = a[blk] * weights[blk].to(a.dtype).view(-1, 1, 1)          # (k_b, rows, r)
        lefts.append(aw.transpose(1, 2).reshape(n, rows).T)            # (rows, k_b·r)
        rights.append(b[blk].transpose(1, 2).reshape(n, b.shape[1]))  # (k_b·r, cols)
    return addmm_blocks_(out, lefts, rights, fixed)


def full_sum_(out: Tensor, noise: Tensor, weights: Tensor, fixed: bool = True) -> Tensor:
    """out (*shape) += Σ_k w_k ε_k for noise (K, *shape)."""
    k = noise.shape[0]
    flat = noise.reshape(k, -1)
    lefts = [weights[blk].to(noise.dtype).view(1, -1) for blk in _blocks(k)]  # (1, k_b)
    rights = [flat[blk] for blk in _blocks(k)]                               # (k_b, numel)
    addmm_blocks_(out.view(1, -1), lefts, rights, fixed)
    return out


def lowrank_sum(a: Tensor, b: Tensor, weights: Tensor) -> Tensor:
    """Σ_k w_k A_k B_kᵀ as a new (rows, cols) tensor."""
    return lowrank_sum_(torch.zeros(a.shape[1], b.shape[1], dtype=a.dtype, device=a.device), a, b, weights)


def full_sum(noise: Tensor, weights: Tensor) -> Tensor:
    """Σ_k w_k ε_k as a new (*shape) tensor."""
    return full_sum_(torch.zeros(noise.shape[1:], dtype=noise.dtype, device=noise.device), noise, weights)
