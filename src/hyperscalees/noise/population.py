"""The population of one ES step, described by a few scalars instead of P weight copies.

Antithetic (the default): member ``i`` belongs to pair ``i // 2`` and carries sign ``+1`` if
``i`` is even, ``-1`` if odd; the two members of a pair share one draw. Independent
(``antithetic=False``): member ``i`` has draw ``i`` of its own, sign ``+1``. Either way a
member's noise is a pure function of (seed, parameter, step // noise_reuse, draw index), so
any process can rebuild any member's perturbation from this object alone.

"Pairs" below are draws: ``per_draw`` members (2 antithetic, 1 independent) share each one,
and every per-draw tensor (signs (K, per_draw), factors (K, ...)) is laid out the same way.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .distributions import check_distribution


@dataclass(frozen=True)
class Population:
    step: int
    seed: int
    size: int
    sigma: float
    rank: int = 1
    noise_reuse: int = 1
    distribution: str = "gaussian"
    baseline_every: int = 0  # >0: members with i % baseline_every in {0, 1} carry no noise
    antithetic: bool = True  # False: every member its own draw (odd sizes allowed)

    def __post_init__(self):
        validate_population_args(self.size, self.sigma, self.rank, self.noise_reuse, self.antithetic)
        check_distribution(self.distribution)
        if self.baseline_every and (self.baseline_every % 2 or self.size % self.baseline_every):
            raise ValueError(
                f"baseline_every must be even and divide the population, got {self.baseline_every} "
                f"for population {self.size}"
            )

    @property
    def per_draw(self) -> int:
        """Members sharing one draw: 2 (an antithetic pair) or 1 (independent members)."""
        return 2 if self.antithetic else 1

    @property
    def num_pairs(self) -> int:
        """Number of draws K: pairs when antithetic, members when independent."""
        return self.size // self.per_draw

    def check_members(self, lo: int, hi: int) -> None:
        """Chunks must hold whole antithetic pairs so both signs share one draw."""
        g = self.per_draw
        if not (0 <= lo < hi <= self.size) or lo % g or hi % g:
            aligned = "an even-aligned" if g == 2 else "a"
            raise ValueError(f"member range [{lo}, {hi}) must be {aligned} non-empty slice of [0, {self.size})")

    def pairs(self, lo: int = 0, hi: int | None = None, device=None) -> Tensor:
        """(K,) draw indices of members [lo, hi)."""
        hi = self.size if hi is None else hi
        self.check_members(lo, hi)
        return torch.arange(lo // self.per_draw, hi // self.per_draw, device=device)

    def signs(self, lo: int = 0, hi: int | None = None, device=None, dtype=torch.float32) -> Tensor:
        """(hi-lo,) member signs, 0 for baseline members; as (K, per_draw)."""
        hi = self.size if hi is None else hi
        self.check_members(lo, hi)
        members = torch.arange(lo, hi, device=device)
        if self.antithetic:
            s = 1.0 - 2.0 * (members % 2).to(dtype)
        else:
            s = torch.ones(hi - lo, dtype=dtype, device=device)
        if self.baseline_every:
            s = s * ((members % self.baseline_every) >= 2).to(dtype)
        return s.view(-1, self.per_draw)


def validate_population_args(size, sigma, rank, noise_reuse, antithetic: bool = True) -> None:
    if not isinstance(antithetic, bool):
        raise ValueError(f"antithetic must be True or False, got {antithetic!r}")
    if antithetic and (not isinstance(size, int) or size < 2 or size % 2):
        raise ValueError(f"population must be an even integer >= 2 (antithetic pairs; antithetic=False allows "
                         f"odd sizes), got {size!r}")
    if not isinstance(size, int) or size < 2:
        raise ValueError(f"population must be an integer >= 2, got {size!r}")
    if not (isinstance(sigma, (int, float)) and sigma > 0 and sigma == sigma and sigma != float("inf")):
        raise ValueError(f"sigma must be a finite number > 0, got {sigma!r}")
    if not isinstance(rank, int) or rank < 1:
        raise ValueError(f"rank must be an integer >= 1, got {rank!r}")
    if not isinstance(noise_reuse, int) or noise_reuse < 0:
        raise ValueError(f"noise_reuse must be an integer >= 0, got {noise_reuse!r}")
