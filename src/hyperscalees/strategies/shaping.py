"""Fitness shaping: raw scores -> shaped weights (P,). Higher is better.

Plain functions, passed to a strategy by name or as a callable. Non-finite scores are
dealt with before shaping by :func:`sanitize`, so no NaN can reach the weights.

Fitness may be (P,) or (P, G): G prompts, episodes or groups per member. How the G
columns become one score per member is declared by ``group_fitness``:
``"mean"`` averages each member's G scores, then shapes (episodes of one policy);
``"per_group"`` shapes every column on its own across members, then averages the shaped
columns (prompts of different difficulty: each normalised against the others on it).
Optional per-member ``weights`` (P,) say how much each score is worth (HyperscaleES's
``num_episodes_list``); a member with weight 0 carries no information.

Sums go through :func:`fixed_sum` (fixed blocks): a plain ``torch.sum`` over more than
32k values is split by thread count and its last bits follow it.
"""
from __future__ import annotations

import inspect
from typing import Callable

import torch
from torch import Tensor

Shaping = Callable[[Tensor], Tensor]
GROUP_FITNESS = ("mean", "per_group")
SUM_BLOCK = 4096


def fixed_sum(x: Tensor) -> Tensor:
    """Σ x over all elements in an order fixed by the size alone (blocks of 4096, then the block sums)."""
    flat = x.reshape(-1)
    pad = (-flat.numel()) % SUM_BLOCK
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    return flat.view(-1, SUM_BLOCK).sum(dim=1).sum()


def _mean_var(f: Tensor, w: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """(mean, population variance) of f, weighted by w if given."""
    if w is None:
        mean = fixed_sum(f) / f.numel()
        return mean, fixed_sum((f - mean) ** 2) / f.numel()
    total = fixed_sum(w)
    mean = fixed_sum(w * f) / total
    return mean, fixed_sum(w * (f - mean) ** 2) / total


def raw(f: Tensor) -> Tensor:
    return f.clone()


def z_score(f: Tensor, weights: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """HyperscaleES's shaping: (R - mean) / sqrt(var + eps), population variance.

    With ``weights`` each member counts by its weight in the mean and variance (its
    episode count), and members of weight 0 get 0.
    """
    if weights is None:
        mean, var = _mean_var(f)
        return (f - mean) / torch.sqrt(var + eps)
    return episode_weighted_z_score(f, weights, eps)


def centered_rank(f: Tensor) -> Tensor:
    """Ranks mapped to [-0.5, 0.5] (OpenAI ES, the XOR gist); tied scores share their mean rank.

    Breaking ties by index would give the two members of an equal-scoring pair different
    weights, i.e. a spurious update along their noise; with mean ranks it is exactly zero.
    A value's tied run in the sorted scores spans [searchsorted left, searchsorted right):
    its mean rank needs no ``unique`` (whose data-dependent size makes the host wait).
    """
    n = f.numel()
    if n < 2:
        return torch.zeros_like(f)
    f = f.contiguous()
    ordered = torch.sort(f).values
    first = torch.searchsorted(ordered, f, right=False)
    end = torch.searchsorted(ordered, f, right=True)
    ranks = (first + end - 1).to(f.dtype) / 2
    return ranks / (n - 1) - 0.5


def group_normalize(f: Tensor, group_size: int, eps: float = 1e-5) -> Tensor:
    """Subtract each group's mean (consecutive members sharing a prompt), divide by the global std."""
    if group_size < 2 or f.numel() % group_size:
        raise ValueError(f"group_size must be >= 2 and divide the population {f.numel()}, got {group_size}")
    g = f.view(-1, group_size)
    _, var = _mean_var(f)
    return ((g - g.mean(dim=1, keepdim=True)) / torch.sqrt(var + eps)).view_as(f)


def pair_sign(f: Tensor, dead_zone: float = 0.0) -> Tensor:
    """Sign of each antithetic pair's difference (+/-0.5 to the pair), 0 inside the dead zone.

    With ``dead_zone > 0`` this is the ternary fitness of the paper's int8 runs.
    """
    pairs = f.view(-1, 2)
    diff = pairs[:, 0] - pairs[:, 1]
    s = torch.sign(diff) * (diff.abs() > dead_zone).to(f.dtype)
    return torch.stack([0.5 * s, -0.5 * s], dim=1).view_as(f)


def chunk_mean_filter(diff: Tensor, chunk: int = 0, exponent: float = 1.2) -> Tensor:
    """d-eggs' chunk mean filter: add sign(m)·|m|^exponent to every pair difference of a chunk,
    m the chunk's mean difference (``chunk`` pairs; 0 = all pairs one chunk).

    It shifts each pair's comparison toward the chunk-wide trend. Because of the exponent it
    depends on the fitness units and, through ``chunk``, on how pairs are grouped. d-eggs
    truncates the shift to an integer (its losses are integers); fitness here is float, so the
    shift is kept whole.
    """
    n = diff.numel()
    chunk = n if chunk <= 0 else chunk
    if n % chunk:
        raise ValueError(f"chunk_mean_filter: {n} pairs do not split into chunks of {chunk}")
    d = diff.view(-1, chunk)
    m = d.mean(dim=1, keepdim=True)
    return (d + torch.sign(m) * m.abs().pow(exponent)).view_as(diff)


def adaptive_pair_sign(f: Tensor, alpha: float = 0.1, chunk: int | None = None, exponent: float = 1.2) -> Tensor:
    """Ternary pair fitness with d-eggs' adaptive dead zone, +/-0.5 to the pair like :func:`pair_sign`.

    diff_k = f_2k − f_2k+1 (optionally through :func:`chunk_mean_filter` when ``chunk`` is not
    None); F_k = sign(diff_k) where |diff_k| ≥ α · mean_k |diff_k|, else 0. A zero difference is
    always 0 (d-eggs turned an all-zero chunk into all −1: its threshold was 0 and 0 < 0 is false).
    """
    if not alpha >= 0:
        raise ValueError(f"adaptive_pair_sign: alpha must be >= 0, got {alpha!r}")
    pairs = f.view(-1, 2)
    diff = pairs[:, 0] - pairs[:, 1]
    if chunk is not None:
        diff = chunk_mean_filter(diff, chunk, exponent)
    threshold = alpha * diff.abs().mean()
    s = torch.sign(diff) * (diff.abs() >= threshold).to(f.dtype)
    return torch.stack([0.5 * s, -0.5 * s], dim=1).view_as(f)


def episode_weighted_z_score(f: Tensor, num_episodes: Tensor, eps: float = 1e-5) -> Tensor:
    """z-score whose mean and variance weight each member by its episode count.

    A member averaged over more episodes is a more reliable estimate; one with zero
    episodes carries no information and gets weight 0; all-zero weights give all zeros.
    Validating the weights reads them on the host: passing weights costs that one wait.
    """
    w = torch.as_tensor(num_episodes, device=f.device).to(f.dtype)
    if bool((w < 0).any()) or not bool(torch.isfinite(w).all()):
        raise ValueError("per-member weights (num_episodes_list) must be finite and non-negative")
    total = fixed_sum(w)
    mean, var = _mean_var(f, torch.where(total > 0, w, torch.ones_like(w)))
    return torch.where((w > 0) & (total > 0), (f - mean) / torch.sqrt(var + eps), torch.zeros_like(f))


SHAPINGS: dict[str, Shaping] = {
    "raw": raw,
    "z_score": z_score,
    "centered_rank": centered_rank,
    "pair_sign": pair_sign,
    "ternary": lambda f: pair_sign(f, dead_zone=1e-8),
    "pair_sign_adaptive": adaptive_pair_sign,                              # dead zone 0.1·mean|diff|
    "pair_sign_filtered": lambda f: adaptive_pair_sign(f, chunk=0),        # d-eggs: chunk mean filter first
}
WEIGHTED = {"z_score"}  # shapings that take per-member weights


def takes_weights(shaping: Shaping) -> bool:
    if any(shaping is SHAPINGS[n] for n in WEIGHTED):
        return True
    try:
        return "weights" in inspect.signature(shaping).parameters
    except (TypeError, ValueError):
        return False


def get_shaping(shaping: str | Shaping) -> Shaping:
    if callable(shaping):
        return shaping
    if shaping not in SHAPINGS:
        raise ValueError(f"unknown fitness shaping {shaping!r}; choose one of {sorted(SHAPINGS)} or pass a callable")
    return SHAPINGS[shaping]


def sanitize(fitness: Tensor) -> tuple[Tensor, Tensor]:
    """Replace NaN/inf by the worst finite score (of its column, for (P, G)); also return how many.

    +inf is treated as broken too: an overflowed score is not a good one. A column with
    nothing finite becomes all zeros (it then moves nothing). The count is a device
    scalar: branching on it would make the host wait for the device every step; it is
    reported (and warned about) when metrics['nonfinite'] is read (strategies/metrics.py).
    """
    bad = ~torch.isfinite(fitness)
    worst = torch.where(bad, torch.inf, fitness).min(dim=0).values  # per column, or a scalar for (P,)
    worst = torch.where(torch.isfinite(worst), worst, torch.zeros_like(worst))
    return torch.where(bad, worst, fitness), bad.sum()


def check_fitness(fitness, population: int) -> Tensor:
    """Coerce to a float tensor (P,) or (P, G) or raise naming the bad shape."""
    f = torch.as_tensor(fitness)
    if not (f.is_floating_point() or f.dtype in (torch.int32, torch.int64, torch.int8, torch.int16)):
        raise TypeError(f"fitness must be numeric, got dtype {f.dtype}")
    f = f.to(torch.float32)
    if f.dim() == 0:
        f = f.reshape(1)
    if f.dim() > 2 or f.shape[0] != population or f.numel() == 0:
        raise ValueError(f"fitness must have shape ({population},) -- one score per member -- or "
                         f"({population}, G) for G scores per member, got {tuple(f.shape)}")
    return f


def check_weights(weights, population: int, device) -> Tensor | None:
    if weights is None:
        return None
    w = torch.as_tensor(weights, device=device).to(torch.float32)
    if w.shape != (population,):
        raise ValueError(f"per-member weights must have shape ({population},), got {tuple(w.shape)}")
    if not bool(torch.isfinite(w).all()) or bool((w < 0).any()):
        raise ValueError("per-member weights must be finite and non-negative")
    return w


def check_group_fitness(mode: str) -> str:
    if mode not in GROUP_FITNESS:
        raise ValueError(f"unknown group_fitness {mode!r}; choose one of {GROUP_FITNESS}")
    return mode


def shape_fitness(fitness, population: int, shaping: Shaping, group_fitness: str = "mean",
                  weights=None, baseline_every: int = 0) -> tuple[Tensor, Tensor]:
    """Raw scores (P,) or (P, G) -> shaped (P,), and the number of non-finite scores replaced.

    Order: sanitize; reduce or shape the G columns (see the module docstring); subtract
    the baseline members' score within each block of ``baseline_every`` members; shape.
    """
    f, n_bad = sanitize(check_fitness(fitness, population))
    w = check_weights(weights, population, f.device)
    if w is not None and not takes_weights(shaping):
        raise ValueError(f"per-member weights need a shaping that takes them ({sorted(WEIGHTED)}, or a "
                         "callable with a `weights` argument); rank- and sign-based shapings do not")

    def one(col: Tensor) -> Tensor:
        if baseline_every:
            g = col.view(-1, baseline_every)
            col = (g - g[:, :2].mean(dim=1, keepdim=True)).reshape(-1)
        return shaping(col) if w is None else shaping(col, weights=w)

    if f.dim() == 1:
        return one(f), n_bad
    if check_group_fitness(group_fitness) == "mean":
        return one(f.mean(dim=1)), n_bad
    return torch.stack([one(f[:, j]) for j in range(f.shape[1])], dim=1).mean(dim=1), n_bad


def fitness_stats(fitness: Tensor) -> dict[str, Tensor]:
    """Mean and max of the finite raw scores (per member, averaged over G), and the non-finite count.

    Device scalars, computed without data-dependent shapes (no boolean indexing): NaN when
    no score is finite. Read them through :class:`~hyperscalees.strategies.metrics.StepMetrics`.
    """
    f = fitness if fitness.dim() == 1 else fitness.mean(dim=1)
    finite = torch.isfinite(f)
    count = finite.sum()
    mean = torch.where(finite, f, torch.zeros_like(f)).sum() / count  # 0/0 = NaN when nothing is finite
    top = torch.where(finite, f, torch.full_like(f, -torch.inf)).max()
    return {"fitness_mean": mean, "fitness_max": torch.where(count > 0, top, torch.full_like(top, torch.nan)),
            "nonfinite": (~torch.isfinite(fitness)).sum()}
