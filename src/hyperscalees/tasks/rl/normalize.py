"""Running observation statistics shared by the whole population (OpenAI ES's normalisation).

Every member of a step acts with the same frozen (mean, std); the observations the step
sees are summed on the side and folded in when the next step begins. So all chunks of a
step, on any backend, use identical statistics, and the statistics are a function of the
steps that ran -- part of the task state, saved in checkpoints for an exact resume.
Sums are kept in float64: a long run adds millions of observations.
"""
from __future__ import annotations

import torch
from torch import Tensor


class RunningStats:
    """count, Σx, Σx² of every observation folded in so far, and those of the current step pending."""

    def __init__(self, dim: int, min_std: float = 1e-2):
        self.dim, self.min_std = dim, min_std
        self.count = torch.zeros((), dtype=torch.float64)
        self.total = torch.zeros(dim, dtype=torch.float64)
        self.total_sq = torch.zeros(dim, dtype=torch.float64)
        self.pending = [torch.zeros((), dtype=torch.float64), torch.zeros(dim, dtype=torch.float64),
                        torch.zeros(dim, dtype=torch.float64)]
        self.log: list | None = None  # a list: every increment is also kept, for replay elsewhere

    def _add(self, increments) -> None:
        for p, inc in zip(self.pending, increments):
            p += inc
        if self.log is not None:
            self.log.append(increments)

    def replay(self, log: list) -> None:
        """Add increments another replica logged, in their order: the same float64 additions, so
        the same bits as observing them here *with the same chunking* (a distributed coordinator
        merges workers' chunks). A run chunked differently (say in-process without ``--chunk``)
        adds the same observations in another order: its float64 sums can differ in the last bits
        (a few ulp), though the float32 (mean, std) the policy uses are nearly always equal."""
        for increments in log:
            self._add(tuple(increments))

    def observe(self, obs: Tensor, mask: Tensor) -> None:
        """Add the rows of ``obs`` (n, dim) whose ``mask`` (n,) is True to this step's pending sums."""
        x = obs.detach().to("cpu", torch.float64)
        m = mask.detach().to("cpu", torch.float64).unsqueeze(-1)
        x = torch.where(torch.isfinite(x), x, torch.zeros_like(x))  # a broken observation is not a statistic
        self._add((m.sum(), (x * m).sum(dim=0), (x * x * m).sum(dim=0)))

    def fold(self) -> None:
        """Make this step's observations part of the statistics (call between steps)."""
        self.count += self.pending[0]
        self.total += self.pending[1]
        self.total_sq += self.pending[2]
        self.pending = [torch.zeros_like(p) for p in self.pending]

    def mean_std(self) -> tuple[Tensor, Tensor]:
        """float32 (mean, std) of what was folded in; (0, 1) before any observation."""
        if float(self.count) == 0:
            return torch.zeros(self.dim), torch.ones(self.dim)
        mean = self.total / self.count
        var = (self.total_sq / self.count - mean * mean).clamp_min(0)
        return mean.float(), var.sqrt().clamp_min(self.min_std).float()

    def state_dict(self) -> dict:
        return {"count": self.count.clone(), "total": self.total.clone(), "total_sq": self.total_sq.clone(),
                "pending": [p.clone() for p in self.pending]}

    def load_state_dict(self, state: dict) -> None:
        self.count, self.total, self.total_sq = (state["count"].clone(), state["total"].clone(),
                                                 state["total_sq"].clone())
        self.pending = [p.clone() for p in state["pending"]]
