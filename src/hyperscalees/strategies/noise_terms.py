"""A parameter's perturbation for a slice of members, and the update it implies.

Dimensions: K pairs in the slice, r rank. ``lowrank`` is decided by the strategy
(EGGROLL: matrices and embeddings; OpenES: nothing).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ..noise.population import Population
from ..noise.sampling import full_noise, lowrank_factors
from ..ops.update import full_sum, lowrank_sum, pair_weights
from .param_spec import ParamSpec


@dataclass
class Noise:
    """Unit noise of one parameter for pairs [lo/2, hi/2), with its signs (K, 2)."""
    signs: Tensor
    sigma: float
    a: Tensor | None = None      # (K, rows, r) low-rank factors ...
    b: Tensor | None = None      # (K, cols, r)
    eps: Tensor | None = None    # ... or (K, *shape) dense noise

    def slice(self, k0: int, k1: int) -> "Noise":
        """Pairs [k0, k1) of this draw: a view, no copy."""
        sl = lambda t: None if t is None else t[k0:k1]
        return Noise(self.signs[k0:k1], self.sigma, a=sl(self.a), b=sl(self.b), eps=sl(self.eps))

    @property
    def scale(self) -> float:
        """Coefficient of A Bᵀ: σ/√r, so A Bᵀ/√r has unit-variance entries."""
        return self.sigma / math.sqrt(self.a.shape[-1])


def matrix_dims(spec: ParamSpec) -> tuple[int, int]:
    if len(spec.shape) != 2:
        raise ValueError(f"{spec.name}: low-rank noise needs a 2-D parameter, got shape {spec.shape}")
    return spec.shape


def noise_nbytes(spec: ParamSpec, pop: Population, lowrank: bool) -> int:
    """Bytes of a whole-population float32 draw of one parameter."""
    per_pair = sum(spec.shape) * pop.rank if lowrank else math.prod(spec.shape)
    return pop.num_pairs * per_pair * 4


def member_noise(spec: ParamSpec, pop: Population, lo: int, hi: int, lowrank: bool, device) -> Noise:
    """Draw the noise of members [lo, hi) (whole pairs) of one parameter."""
    pairs = pop.pairs(lo, hi, device=device)
    signs = pop.signs(lo, hi, device=device)
    if lowrank:
        rows, cols = matrix_dims(spec)
        a, b = lowrank_factors(pop, spec.name, rows, cols, pairs)
        return Noise(signs, pop.sigma, a=a, b=b)
    return Noise(signs, pop.sigma, eps=full_noise(pop, spec.name, spec.shape, pairs))


def noise_sum(noise: Noise, shaped: Tensor, sign_update: bool = False) -> Tensor:
    """Σ_i f_i ε_i over the slice, ε_i the member's unit-variance noise (s A Bᵀ/√r or s ε)."""
    return _scaled_sum(noise, shaped, sign_update, 1.0)


def _scaled_sum(noise: Noise, shaped: Tensor, sign_update: bool, scale: float) -> Tensor:
    """scale · Σ_i f_i ε_i, the scale folded into the (K,) pair weights: no full-size pass."""
    w = pair_weights(shaped.to(noise.signs.device), noise.signs)
    if noise.a is not None:
        a, b = (noise.a.sign(), noise.b.sign()) if sign_update else (noise.a, noise.b)
        return lowrank_sum(a, b, w * (scale / math.sqrt(a.shape[-1])))
    return full_sum(noise.eps, w * scale)


def gradient(spec: ParamSpec, pop: Population, shaped: Tensor, lowrank: bool, device,
             chunk_pairs: int, sign_update: bool = False, cached: Noise | None = None) -> Tensor:
    """ES estimate ĝ = (1/(Nσ)) Σ_i f_i ε_i, regenerating noise chunk by chunk (or from cache).

    The 1/(Nσ) and 1/√r scales go into the (K,) weights, not extra full-size passes.
    """
    scale = 1.0 / (pop.size * pop.sigma)
    if cached is not None:  # the forward's whole-population draw
        return _scaled_sum(cached, shaped, sign_update, scale)
    total = None
    step = 2 * chunk_pairs
    for lo in range(0, pop.size, step):
        hi = min(pop.size, lo + step)
        part = _scaled_sum(member_noise(spec, pop, lo, hi, lowrank, device), shaped[lo:hi], sign_update, scale)
        total = part if total is None else total.add_(part)
    return total
