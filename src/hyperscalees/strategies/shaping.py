"""Fitness shaping: raw scores (P,) -> shaped weights (P,). Higher is better.

Plain functions, passed to a strategy by name or as a callable. Non-finite scores are
dealt with before shaping by :func:`sanitize`, so no NaN can reach the weights.
"""
from __future__ import annotations

import warnings
from typing import Callable

import torch
from torch import Tensor

Shaping = Callable[[Tensor], Tensor]


def raw(f: Tensor) -> Tensor:
    return f.clone()


def z_score(f: Tensor, eps: float = 1e-5) -> Tensor:
    """HyperscaleES's shaping: (R - mean) / sqrt(var + eps), population variance."""
    return (f - f.mean()) / torch.sqrt(f.var(unbiased=False) + eps)


def centered_rank(f: Tensor) -> Tensor:
    """Ranks mapped to [-0.5, 0.5] (OpenAI ES, the XOR gist); tied scores share their mean rank.

    Breaking ties by index would give the two members of an equal-scoring pair different
    weights, i.e. a spurious update along their noise; with mean ranks it is exactly zero.
    """
    n = f.numel()
    if n < 2:
        return torch.zeros_like(f)
    _, inverse, counts = torch.unique(f, sorted=True, return_inverse=True, return_counts=True)
    first = torch.cumsum(counts, 0) - counts  # rank of each distinct value's first occurrence
    ranks = (first.to(f.dtype) + (counts.to(f.dtype) - 1) / 2)[inverse]
    return ranks / (n - 1) - 0.5


def group_normalize(f: Tensor, group_size: int, eps: float = 1e-5) -> Tensor:
    """Subtract each group's mean (members sharing a prompt), divide by the global std."""
    if group_size < 2 or f.numel() % group_size:
        raise ValueError(f"group_size must be >= 2 and divide the population {f.numel()}, got {group_size}")
    g = f.view(-1, group_size)
    return ((g - g.mean(dim=1, keepdim=True)) / torch.sqrt(f.var(unbiased=False) + eps)).view_as(f)


def pair_sign(f: Tensor, dead_zone: float = 0.0) -> Tensor:
    """Sign of each antithetic pair's difference (+/-0.5 to the pair), 0 inside the dead zone.

    With ``dead_zone > 0`` this is the ternary fitness of the paper's int8 runs.
    """
    pairs = f.view(-1, 2)
    diff = pairs[:, 0] - pairs[:, 1]
    s = torch.sign(diff) * (diff.abs() > dead_zone).to(f.dtype)
    return torch.stack([0.5 * s, -0.5 * s], dim=1).view_as(f)


def episode_weighted_z_score(f: Tensor, num_episodes: Tensor, eps: float = 1e-5) -> Tensor:
    """z-score whose mean and variance weight each member by its episode count.

    A member averaged over more episodes is a more reliable estimate; one with zero
    episodes carries no information and gets weight 0.
    """
    w = num_episodes.to(f.dtype)
    if (w < 0).any():
        raise ValueError("num_episodes_list must be non-negative")
    total = w.sum()
    if total <= 0:
        return torch.zeros_like(f)
    mean = (w * f).sum() / total
    var = (w * (f - mean) ** 2).sum() / total
    return torch.where(w > 0, (f - mean) / torch.sqrt(var + eps), torch.zeros_like(f))


SHAPINGS: dict[str, Shaping] = {
    "raw": raw,
    "z_score": z_score,
    "centered_rank": centered_rank,
    "pair_sign": pair_sign,
    "ternary": lambda f: pair_sign(f, dead_zone=1e-8),
}


def get_shaping(shaping: str | Shaping) -> Shaping:
    if callable(shaping):
        return shaping
    if shaping not in SHAPINGS:
        raise ValueError(f"unknown fitness shaping {shaping!r}; choose one of {sorted(SHAPINGS)} or pass a callable")
    return SHAPINGS[shaping]


_warned_nonfinite = False


def sanitize(fitness: Tensor) -> tuple[Tensor, int]:
    """Replace NaN/inf by the worst finite score; return the count replaced.

    +inf is treated as broken too: an overflowed score is not a good one. Warns once
    per process. If nothing is finite, returns all zeros (the update is then zero).
    """
    global _warned_nonfinite
    bad = ~torch.isfinite(fitness)
    n_bad = int(bad.sum())
    if not n_bad:
        return fitness, 0
    if not _warned_nonfinite:
        warnings.warn(f"{n_bad} non-finite fitness value(s) treated as the worst score "
                      "(counted in metrics['nonfinite']); further warnings suppressed", RuntimeWarning)
        _warned_nonfinite = True
    if n_bad == fitness.numel():
        return torch.zeros_like(fitness), n_bad
    worst = fitness[~bad].min()
    return torch.where(bad, worst, fitness), n_bad


def check_fitness(fitness, population: int) -> Tensor:
    """Coerce to a 1-D float tensor of length ``population`` or raise naming the bad shape."""
    f = torch.as_tensor(fitness)
    if not (f.is_floating_point() or f.dtype in (torch.int32, torch.int64, torch.int8, torch.int16)):
        raise TypeError(f"fitness must be numeric, got dtype {f.dtype}")
    f = f.to(torch.float32).reshape(-1) if f.dim() <= 1 else f
    if f.dim() != 1 or f.numel() != population:
        raise ValueError(f"fitness must have shape ({population},), one score per member, got {tuple(f.shape)}")
    return f
