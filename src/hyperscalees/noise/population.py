"""The population of one ES step, described by a few scalars instead of P weight copies.

Member ``i`` belongs to antithetic pair ``i // 2`` and carries sign ``+1`` if ``i`` is
even, ``-1`` if odd. Its noise is a pure function of (seed, parameter, step // noise_reuse,
pair), so any process can rebuild any member's perturbation from this object alone.
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

    def __post_init__(self):
        validate_population_args(self.size, self.sigma, self.rank, self.noise_reuse)
        check_distribution(self.distribution)
        if self.baseline_every and (self.baseline_every % 2 or self.size % self.baseline_every):
            raise ValueError(
                f"baseline_every must be even and divide the population, got {self.baseline_every} "
                f"for population {self.size}"
            )

    @property
    def num_pairs(self) -> int:
        return self.size // 2

    def check_members(self, lo: int, hi: int) -> None:
        """Chunks must hold whole antithetic pairs so both signs share one draw."""
        if not (0 <= lo < hi <= self.size) or lo % 2 or hi % 2:
            raise ValueError(
                f"member range [{lo}, {hi}) must be a non-empty even-aligned slice of [0, {self.size})"
            )

    def pairs(self, lo: int = 0, hi: int | None = None, device=None) -> Tensor:
        hi = self.size if hi is None else hi
        self.check_members(lo, hi)
        return torch.arange(lo // 2, hi // 2, device=device)

    def signs(self, lo: int = 0, hi: int | None = None, device=None, dtype=torch.float32) -> Tensor:
        """(hi-lo,) antithetic signs, 0 for baseline members; as (pairs, 2)."""
        hi = self.size if hi is None else hi
        self.check_members(lo, hi)
        members = torch.arange(lo, hi, device=device)
        s = 1.0 - 2.0 * (members % 2).to(dtype)
        if self.baseline_every:
            s = s * ((members % self.baseline_every) >= 2).to(dtype)
        return s.view(-1, 2)


def validate_population_args(size, sigma, rank, noise_reuse) -> None:
    if not isinstance(size, int) or size < 2 or size % 2:
        raise ValueError(f"population must be an even integer >= 2 (antithetic pairs), got {size!r}")
    if not (isinstance(sigma, (int, float)) and sigma > 0 and sigma == sigma and sigma != float("inf")):
        raise ValueError(f"sigma must be a finite number > 0, got {sigma!r}")
    if not isinstance(rank, int) or rank < 1:
        raise ValueError(f"rank must be an integer >= 1, got {rank!r}")
    if not isinstance(noise_reuse, int) or noise_reuse < 0:
        raise ValueError(f"noise_reuse must be an integer >= 0, got {noise_reuse!r}")
