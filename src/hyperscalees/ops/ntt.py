"""Exact integer sequence transforms: Walsh–Hadamard and the Fermat number-theoretic transform.

Dimensions: ... leading dims, n transform length (a power of two), T positions.

d-eggs' experimental ``NTT_MODE`` (``deggs_ezmup.md`` §1.13) adds embeddings of a transform of
the token window. Its transform runs over the *whole* window, so position t sees tokens after
t -- a leak for a causal LM. :func:`causal_windows` fixes that: position t transforms only the
n tokens ending at t (zeros before the sequence start), so its coefficients are a function of
tokens ≤ t.

Both transforms are computed as one integer matrix product (exact in int64: |entries| ≤ p or 1,
n ≤ 256, so no partial sum reaches 2^63), the obviously-correct form; the lengths used as features
are small, so the O(n²) cost does not matter.

* WHT: ``H[j, k] = (-1)^{popcount(j & k)}``; ``H·H = n·I``, so the inverse is ``H·c / n`` exactly.
* NTT mod p = 65537 (Fermat F4, primitive root 3): ``W[j, k] = w^{jk} mod p`` with ``w`` an n-th
  root of unity (``3^((p-1)/n)``); inverse ``n⁻¹·W⁻¹`` mod p. Inputs are taken mod p.
"""
from __future__ import annotations

from functools import lru_cache

import torch
from torch import Tensor

FERMAT_PRIME = 65537
PRIMITIVE_ROOT = 3
MAX_LEN = 256


def _check_len(n: int) -> None:
    if not (isinstance(n, int) and 1 <= n <= MAX_LEN and n & (n - 1) == 0):
        raise ValueError(f"transform length must be a power of two in [1, {MAX_LEN}], got {n!r}")


@lru_cache(maxsize=None)
def hadamard_matrix(n: int) -> Tensor:
    """(n, n) int64 Sylvester Hadamard matrix, entries ±1."""
    _check_len(n)
    j = torch.arange(n)
    bits = j[:, None] & j[None, :]
    parity = torch.zeros_like(bits)
    while bool(bits.any()):
        parity ^= bits & 1
        bits = bits >> 1
    return 1 - 2 * parity


@lru_cache(maxsize=None)
def ntt_matrix(n: int, inverse: bool = False, p: int = FERMAT_PRIME) -> Tensor:
    """(n, n) int64 matrix of the length-n NTT mod p (inverse: includes the n⁻¹ factor)."""
    _check_len(n)
    if (p - 1) % n:
        raise ValueError(f"the NTT mod {p} has no length-{n} transform ({n} does not divide {p - 1})")
    w = pow(PRIMITIVE_ROOT, (p - 1) // n, p)
    if inverse:
        w = pow(w, p - 2, p)
    powers = [pow(w, k, p) for k in range(n)]
    jk = (torch.arange(n)[:, None] * torch.arange(n)[None, :]) % n
    m = torch.tensor(powers, dtype=torch.int64)[jk]
    if inverse:
        m = m * pow(n, p - 2, p) % p
    return m


def wht(x: Tensor) -> Tensor:
    """Walsh–Hadamard transform over the last dim (int64, exact)."""
    h = hadamard_matrix(x.shape[-1]).to(x.device)
    return x.long() @ h


def inverse_wht(c: Tensor) -> Tensor:
    n = c.shape[-1]
    y = c.long() @ hadamard_matrix(n).to(c.device)
    if bool((y % n != 0).any()):
        raise ValueError("not a Walsh–Hadamard spectrum of an integer vector (H·c is not divisible by n)")
    return torch.div(y, n, rounding_mode="floor")


def ntt(x: Tensor, p: int = FERMAT_PRIME) -> Tensor:
    """Number-theoretic transform mod p over the last dim (int64 in [0, p))."""
    return (x.long() % p) @ ntt_matrix(x.shape[-1], False, p).to(x.device) % p


def inverse_ntt(c: Tensor, p: int = FERMAT_PRIME) -> Tensor:
    return (c.long() % p) @ ntt_matrix(c.shape[-1], True, p).to(c.device) % p


TRANSFORMS = {"wht": wht, "fermat": ntt}


def causal_windows(tokens: Tensor, n: int) -> Tensor:
    """(..., T) -> (..., T, n): row t holds tokens t-n+1 .. t (zeros before the start)."""
    _check_len(n)
    pad = torch.zeros(*tokens.shape[:-1], n - 1, dtype=tokens.dtype, device=tokens.device)
    return torch.cat([pad, tokens], dim=-1).unfold(-1, n, 1)


def causal_transform(tokens: Tensor, mode: str, n: int) -> Tensor:
    """(..., T) int ids -> (..., T, n) int64 coefficients of each position's causal window."""
    if mode not in TRANSFORMS:
        raise ValueError(f"unknown transform {mode!r}; choose one of {sorted(TRANSFORMS)}")
    return TRANSFORMS[mode](causal_windows(tokens, n))
