"""Naive full-rank ES (OpenES) matmul: dense per-pair noise, the honest baseline.

Dimensions as in ``lowrank_linear``: K pairs, P = 2K members, M rows per member.
Each pair's dense (out, in) noise is materialized, so memory and time grow as
K * out * in -- exactly the cost EGGROLL avoids.
"""
from __future__ import annotations

import torch.nn.functional as F
import torch
from torch import Tensor

from .member import member_coef


def do_mm_dense(x: Tensor, weight: Tensor, noise: Tensor, signs: Tensor, sigma: float,
                bias: Tensor | None = None, bias_noise: Tensor | None = None) -> Tensor:
    """x (W + s·σ·E)ᵀ + b + s·σ·e with noise (K, out, in), bias_noise (K, out)."""
    k = noise.shape[0]
    y = F.linear(x, weight, bias)
    xk = x.reshape(k, -1, x.shape[-1])  # (K, 2M, in)
    m2 = xk.shape[1]
    delta = torch.bmm(xk, noise.to(x.dtype).transpose(1, 2))  # (K, 2M, out)
    if bias_noise is not None:
        delta = delta + bias_noise.to(x.dtype).unsqueeze(1)
    g = signs.shape[1]
    delta = delta.view(k, g, m2 // g, -1) * member_coef(signs, sigma, 1, x.dtype)
    return y + delta.view_as(y)


def add_emb_dense(y: Tensor, rows: Tensor, signs: Tensor, sigma: float) -> Tensor:
    """y + s·σ·E[idx] for looked-up rows y (P·T.., dim), rows (K, 2T, dim) of each pair's dense draw."""
    k, m2, dim = rows.shape
    g = signs.shape[1]
    delta = rows.to(y.dtype).view(k, g, m2 // g, dim) * member_coef(signs, sigma, 1, y.dtype)
    return y + delta.view_as(y)


def do_emb_dense(idx: Tensor, weight: Tensor, rows: Tensor, signs: Tensor, sigma: float) -> Tensor:
    """(W + s·σ·E)[idx] for W stored (vocab, dim) with dense noise rows (K, 2T, dim)."""
    return add_emb_dense(F.embedding(idx, weight), rows, signs, sigma)
