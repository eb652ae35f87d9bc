"""One parameter's noise for a set of antithetic pairs, with the scales it is applied at.

Dimensions: K pairs, r rank. A low-rank parameter stored (rows, cols) gets factors
A (K, rows, r) and B (K, cols, r), its perturbation in its own orientation being
``scale · A Bᵀ`` with scale = σ/√r (so A Bᵀ/√r has unit-variance entries); any other
parameter gets dense ε (K, *shape) at scale σ. :func:`noise_scales` is the only place
those scales are computed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .population import Population
from .sampling import draw_many, full_noise, full_rows, lowrank_b, lowrank_factors, lowrank_rows


@dataclass
class Noise:
    """Unit noise of one parameter for K pairs, their signs (K, 2) and its scales.

    ``sigma`` is this parameter's σ (the step's σ times its multipliers); ``scale`` is the
    coefficient of the unit term: σ/√r for A Bᵀ, σ for ε.
    """
    signs: Tensor
    sigma: float
    scale: float
    a: Tensor | None = None      # (K, rows, r) low-rank factors (or selected rows of A) ...
    b: Tensor | None = None      # (K, cols, r)
    eps: Tensor | None = None    # ... or (K, *shape) dense noise (or selected rows)

    @property
    def lowrank(self) -> bool:
        return self.a is not None

    def slice(self, k0: int, k1: int) -> "Noise":
        """Pairs [k0, k1) of this draw: views, no copy."""
        sl = lambda t: None if t is None else t[k0:k1]
        return Noise(self.signs[k0:k1], self.sigma, self.scale, a=sl(self.a), b=sl(self.b), eps=sl(self.eps))


def noise_scales(sigma: float, sigma_scale: float, rank: int, lowrank: bool) -> tuple[float, float]:
    """(σ of the parameter, coefficient of its unit term): the one source of σ/√r."""
    s = sigma * sigma_scale
    return s, (s / math.sqrt(rank) if lowrank else s)


def noise_nbytes(shape: tuple[int, ...], pop: Population, lowrank: bool, pairs: int | None = None) -> int:
    """Bytes of a float32 draw of one parameter for ``pairs`` pairs (default: all of them)."""
    per_pair = sum(shape) * pop.rank if lowrank else math.prod(shape)
    return (pop.num_pairs if pairs is None else pairs) * per_pair * 4


def matrix_dims(name: str, shape: tuple[int, ...]) -> tuple[int, int]:
    if len(shape) != 2:
        raise ValueError(f"{name}: low-rank noise needs a 2-D parameter, got shape {tuple(shape)}")
    return shape


def draw_noise(pop: Population, name: str, shape: tuple[int, ...], pairs: Tensor, signs: Tensor, lowrank: bool,
               sigma: float, scale: float) -> Noise:
    """The noise of ``pairs`` (K,) of one parameter: a pure function of (pop, name, pair)."""
    if lowrank:
        rows, cols = matrix_dims(name, shape)
        a, b = lowrank_factors(pop, name, rows, cols, pairs)
        return Noise(signs, sigma, scale, a=a, b=b)
    return Noise(signs, sigma, scale, eps=full_noise(pop, name, shape, pairs))


def draw_lowrank_many(pop: Population, named: list[tuple[str, tuple[int, int], float, float]], pairs: Tensor,
                      signs: Tensor) -> list[Noise]:
    """:func:`draw_noise` of several low-rank matrices whose factors have the same length per pair
    ((rows + cols)·r), in one pass (``sampling.draw_many``): ``named`` holds (name, shape, sigma,
    scale) each; the factors are views of one buffer, with the values single draws give."""
    r = pop.rank
    dims = [matrix_dims(name, shape) for name, shape, _, _ in named]
    n = (dims[0][0] + dims[0][1]) * r
    if any((rows + cols) * r != n for rows, cols in dims):
        raise ValueError(f"draw_lowrank_many needs factors of one length per pair, got shapes {dims}")
    z = draw_many(pop, [name for name, _, _, _ in named], pairs, n)
    out = []
    for j, ((rows, cols), (_, _, sigma, scale)) in enumerate(zip(dims, named)):
        out.append(Noise(signs, sigma, scale, a=z[j, :, cols * r:].view(-1, rows, r),
                         b=z[j, :, :cols * r].view(-1, cols, r)))
    return out


def draw_rows(pop: Population, name: str, shape: tuple[int, ...], pairs: Tensor, signs: Tensor, rows: Tensor,
              lowrank: bool, sigma: float, scale: float) -> Noise:
    """Only the rows (K, T) of a (rows, cols) parameter's noise, for embedding lookups.

    Low-rank: ``a`` holds the selected rows of A (K, T, r) and ``b`` all of B; dense: ``eps``
    holds the selected rows (K, T, cols). Never the whole (K, vocab, ·) table.
    """
    _, cols = matrix_dims(name, shape)
    if lowrank:
        return Noise(signs, sigma, scale, a=lowrank_rows(pop, name, cols, pairs, rows),
                     b=lowrank_b(pop, name, cols, pairs))
    return Noise(signs, sigma, scale, eps=full_rows(pop, name, cols, pairs, rows))


def select_rows(noise: Noise, rows: Tensor) -> Noise:
    """Rows (K, T) of a whole draw already in memory: the same values :func:`draw_rows` gives."""
    if noise.lowrank:
        idx = rows.long().unsqueeze(-1).expand(-1, -1, noise.a.shape[-1])
        return Noise(noise.signs, noise.sigma, noise.scale, a=torch.gather(noise.a, 1, idx), b=noise.b)
    k, cols = noise.eps.shape[0], noise.eps.shape[-1]
    idx = rows.long().unsqueeze(-1).expand(-1, -1, cols)
    return Noise(noise.signs, noise.sigma, noise.scale, eps=torch.gather(noise.eps.view(k, -1, cols), 1, idx))
