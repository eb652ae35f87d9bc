"""Per-member coefficients and vector perturbations: the small terms every layer shares.

Dimensions: K pairs, P = 2K members, M rows per member, member-major rows. Both members
of a pair share one draw; member 2k+j carries sign ``signs[k, j]`` (0 for a baseline).
With independent members (``Population.antithetic=False``) signs are (K, 1) and P = K: every
function reads the members per draw from ``signs.shape[1]``.
"""
from __future__ import annotations

import torch
from torch import Tensor


def member_coef(signs: Tensor, scale: float, trailing: int, dtype: torch.dtype) -> Tensor:
    """(K, g, 1, 1...) = s·scale, broadcastable over (K, g, M, *trailing dims); g members per draw."""
    k, g = signs.shape
    return (signs.to(dtype) * scale).view(k, g, 1, *([1] * trailing))


def add_vector_noise(y: Tensor, eps: Tensor, signs: Tensor, scale: float) -> Tensor:
    """y (P·M.., *v) + s·scale·ε per member, ε (K, *v): noise on an output-shaped vector (a bias)."""
    k, vshape = eps.shape[0], eps.shape[1:]
    term = eps.to(y.dtype).view(k, 1, 1, *vshape) * member_coef(signs, scale, len(vshape), y.dtype)  # (K, 2, 1, *v)
    return (y.reshape(k, signs.shape[1], -1, *vshape) + term).view_as(y)


def member_values(param: Tensor, eps: Tensor, signs: Tensor, scale: float, dtype: torch.dtype) -> Tensor:
    """(K, g, 1, *shape) per-member values p + s·scale·ε of a small tensor (a norm's weight)."""
    k = eps.shape[0]
    return param.to(dtype) + eps.to(dtype).view(k, 1, 1, *param.shape) * member_coef(signs, scale, param.dim(), dtype)


def get_noisy_standard(param: Tensor, eps: Tensor, signs: Tensor, scale: float) -> Tensor:
    """(P, *shape) per-member copies p + s·scale·ε of a small tensor (HyperscaleES's name)."""
    k = eps.shape[0]
    return member_values(param, eps, signs, scale, param.dtype).view(signs.numel(), *param.shape)
