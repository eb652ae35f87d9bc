"""Naive full-rank ES (OpenES) matmul: dense per-pair noise, the honest baseline.

Dimensions as in ``lowrank_linear``: K pairs, P = 2K members, M rows per member.
Each pair's dense (out, in) noise is materialized, so memory and time grow as
K * out * in -- exactly the cost EGGROLL avoids.
"""
from __future__ import annotations

import torch.nn.functional as F
import torch
from torch import Tensor


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
    delta = delta.view(k, 2, m2 // 2, -1) * (signs.to(x.dtype) * sigma).view(k, 2, 1, 1)
    return y + delta.view_as(y)
