"""Per-member coefficients and vector perturbations: the small terms every layer shares.

Dimensions: K pairs, P = 2K members, M rows per member, member-major rows. Both members
of a pair share one draw; member 2k+j carries sign ``signs[k, j]`` (0 for a baseline).
"""
from __future__ import annotations

import torch
from torch import Tensor


def member_coef(signs: Tensor, scale: float, trailing: int, dtype: torch.dtype) -> Tensor:
    """(K, 2, 1, 1...) = s·scale, broadcastable over (K, 2, M, *trailing dims)."""
    k = signs.shape[0]
    return (signs.to(dtype) * scale).view(k, 2, 1, *([1] * trailing))


def add_vector_noise(y: Tensor, eps: Tensor, signs: Tensor, scale: float) -> Tensor:
    """y (P·M.., *v) + s·scale·ε per member, ε (K, *v): noise on an output-shaped vector (a bias)."""
    k, vshape = eps.shape[0], eps.shape[1:]
    term = eps.to(y.dtype).view(k, 1, 1, *vshape) * member_coef(signs, scale, len(vshape), y.dtype)  # (K, 2, 1, *v)
    return (y.reshape(k, 2, -1, *vshape) + term).view_as(y)


def member_values(param: Tensor, eps: Tensor, signs: Tensor, scale: float, dtype: torch.dtype) -> Tensor:
    """(K, 2, 1, *shape) per-member values p + s·scale·ε of a small tensor (a norm's weight)."""
    k = eps.shape[0]
    return param.to(dtype) + eps.to(dtype).view(k, 1, 1, *param.shape) * member_coef(signs, scale, param.dim(), dtype)


def get_noisy_standard(param: Tensor, eps: Tensor, signs: Tensor, scale: float) -> Tensor:
    """(P, *shape) per-member copies p + s·scale·ε of a small tensor (HyperscaleES's name)."""
    k = eps.shape[0]
    return member_values(param, eps, signs, scale, param.dtype).view(2 * k, *param.shape)
