"""Sums of fitness-weighted noise, the heart of the ES update, as single GEMMs.

K pairs, r rank. ``weights`` (K,) are per-pair fitness contrasts Σ_member f_i s_i.
"""
from __future__ import annotations

import torch
from torch import Tensor


def pair_weights(shaped: Tensor, signs: Tensor) -> Tensor:
    """(P,) shaped fitness and (K, 2) signs -> (K,) Σ f_i s_i within each pair."""
    return (shaped.view(-1, 2) * signs.to(shaped.dtype)).sum(dim=1)


def lowrank_sum(a: Tensor, b: Tensor, weights: Tensor) -> Tensor:
    """Σ_k w_k A_k B_kᵀ = (A ⊙ w)ᵀ B as one (rows, K·r) x (K·r, cols) GEMM.

    The (K·r, ·) operands are views of the factors when r == 1 (the common case), so the
    update allocates nothing the size of the noise beyond A ⊙ w.
    """
    k, rows, r = a.shape
    left = (a * weights.to(a.dtype).view(k, 1, 1)).transpose(1, 2).reshape(k * r, rows)  # (K·r, rows)
    right = b.transpose(1, 2).reshape(k * r, b.shape[1])  # (K·r, cols)
    return left.T @ right


def full_sum(noise: Tensor, weights: Tensor) -> Tensor:
    """Σ_k w_k ε_k for noise (K, *shape)."""
    k = noise.shape[0]
    return (weights.to(noise.dtype) @ noise.reshape(k, -1)).view(noise.shape[1:])
