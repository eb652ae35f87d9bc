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

    @property
    def scale(self) -> float:
        """Coefficient of A Bᵀ: σ/√r, so A Bᵀ/√r has unit-variance entries."""
        return self.sigma / math.sqrt(self.a.shape[-1])


def matrix_dims(spec: ParamSpec) -> tuple[int, int]:
    if len(spec.shape) != 2:
        raise ValueError(f"{spec.name}: low-rank noise needs a 2-D parameter, got shape {spec.shape}")
    return spec.shape


class _ForwardNoise:
    """Noise drawn for evaluation chunks, kept so the same step's update need not redraw it.

    Noise is a pure function of (population, parameter, member range), so a chunk drawn
    for the forward is exactly what the update would regenerate. Chunks are kept only
    for the newest population and only up to ``budget`` bytes: past it, the step falls
    back to regenerating (memory stays bounded whatever the population).
    """

    def __init__(self, budget: int):
        self.budget = budget
        self._reset(None)

    def _reset(self, pop):
        self.pop, self.entries, self.bytes, self.over = pop, {}, 0, False

    def put(self, key, pop: Population, lo: int, hi: int, noise: Noise) -> None:
        if pop != self.pop:
            self._reset(pop)
        if self.over or self.budget <= 0:
            return
        size = sum(t.numel() * t.element_size() for t in (noise.a, noise.b, noise.eps) if t is not None)
        if self.bytes + size > self.budget:
            self.entries, self.bytes, self.over = {}, 0, True
            return
        if (key, lo, hi) not in self.entries:
            self.entries[(key, lo, hi)] = noise
            self.bytes += size

    def take(self, key, pop: Population) -> list[tuple[int, int, Noise]] | None:
        """All chunks of ``key`` if they tile [0, pop.size) exactly (removed from the cache)."""
        if pop != self.pop or self.over:
            return None
        chunks = sorted(((lo, hi, n) for (k, lo, hi), n in self.entries.items() if k == key), key=lambda c: c[:2])
        pos = 0
        for lo, hi, _ in chunks:
            if lo != pos:
                return None
            pos = hi
        if pos != pop.size:
            return None
        for lo, hi, n in chunks:
            del self.entries[(key, lo, hi)]
            self.bytes -= sum(t.numel() * t.element_size() for t in (n.a, n.b, n.eps) if t is not None)
        return chunks

    def clear(self) -> None:
        self._reset(None)


FORWARD_NOISE = _ForwardNoise(budget=64 * 2**20)


def _cache_key(spec: ParamSpec, lowrank: bool, device) -> tuple:
    return spec.name, tuple(spec.shape), lowrank, str(torch.device(device))


def member_noise(spec: ParamSpec, pop: Population, lo: int, hi: int, lowrank: bool, device) -> Noise:
    n = _draw_member_noise(spec, pop, lo, hi, lowrank, device)
    if not (lo == 0 and hi == pop.size):  # the strategy itself keeps a whole-population draw
        FORWARD_NOISE.put(_cache_key(spec, lowrank, device), pop, lo, hi, n)
    return n


def _draw_member_noise(spec: ParamSpec, pop: Population, lo: int, hi: int, lowrank: bool, device) -> Noise:
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
    kept = None if cached is not None else FORWARD_NOISE.take(_cache_key(spec, lowrank, device), pop)
    if cached is not None:
        return _scaled_sum(cached, shaped, sign_update, scale)
    total = None
    if kept is not None:  # the forward's chunks, accumulated in place (no concatenated copy)
        while kept:
            lo, hi, n = kept.pop(0)  # drop each chunk as soon as it is summed
            part = _scaled_sum(n, shaped[lo:hi], sign_update, scale)
            total = part if total is None else total.add_(part)
        return total
    step = 2 * chunk_pairs
    for lo in range(0, pop.size, step):
        hi = min(pop.size, lo + step)
        part = _scaled_sum(_draw_member_noise(spec, pop, lo, hi, lowrank, device), shaped[lo:hi], sign_update, scale)
        total = part if total is None else total.add_(part)
    return total
