"""The fast Walsh–Hadamard transform of float vectors, in O(n log n).

Dimensions: ... leading dims, n transform length (a power of two).

``ops/ntt.py`` holds the exact integer Hadamard *matrix* (O(n²), n ≤ 256) used as token
features; a random-subspace projection (``nn/fastfood.py``) transforms vectors as long as a
weight matrix, where only the butterfly is affordable. This is the same transform
(``H[j, k] = (-1)^{popcount(j & k)}``, Sylvester order), scaled by 1/√n so it is orthonormal:
``fwht(fwht(x)) == x`` up to rounding, and ``‖fwht(x)‖ = ‖x‖``.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor


def fwht(x: Tensor) -> Tensor:
    """Orthonormal Walsh–Hadamard transform of ``x`` (..., n) along its last dim; n a power of two."""
    n = x.shape[-1]
    if n < 1 or n & (n - 1):
        raise ValueError(f"fwht needs a last dimension that is a power of two, got {n}")
    lead = x.shape[:-1]
    y = x.reshape(-1, n)
    h = 1
    while h < n:
        y = y.view(-1, n // (2 * h), 2, h)        # (rows, blocks, 2, h): the butterfly's two halves
        a, b = y[:, :, 0], y[:, :, 1]
        y = torch.stack((a + b, a - b), dim=2)
        h *= 2
    return y.reshape(*lead, n) / math.sqrt(n)
