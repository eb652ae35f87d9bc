"""From a policy's outputs to actions its environment accepts, one rule per kind of action space.

A policy is deterministic (ES perturbs weights, not actions), so every rule is a fixed map
from the actor's outputs (B, outputs) to actions every one of which ``space.contains``:

- ``discrete`` (Discrete(n, start)):      argmax of n logits, plus ``start``; (B,) int64
- ``multi_discrete`` (MultiDiscrete(nvec, start)): argmax within each group of nvec[i] logits,
  plus start[i]; (B, k) int64
- ``multi_binary`` (MultiBinary(n)):      logit > 0; (B, n) int8
- ``box`` (Box(low, high)), per dimension, so each dimension keeps its own bounds:
    both bounds finite:  ``tanh`` scaled to [low, high] (clamped: rounding never steps outside)
    [low, +inf):         low + softplus(x)
    (-inf, high]:        high − softplus(−x)
    unbounded:           x itself
  Collapsing the bounds to one scalar range (what this replaced) sent dimension 0 of
  Box([-1, -10], [1, 10]) values from −8 to 2, and NaN for an unbounded Box.

The bounds are buffers, saved with the model, so a reloaded policy acts without the env.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

KINDS = ("discrete", "multi_discrete", "multi_binary", "box")


@dataclass(frozen=True)
class ActionSpec:
    """What a policy must output: ``kind`` and its sizes; ``low``/``high`` per Box dimension."""

    kind: str
    size: int                          # n (discrete, multi_binary), k groups (multi_discrete), dims (box)
    low: tuple[float, ...] = ()        # box only
    high: tuple[float, ...] = ()       # box only
    nvec: tuple[int, ...] = ()         # multi_discrete only: choices per group
    start: tuple[int, ...] = ()        # discrete: (start,); multi_discrete: one per group

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown action kind {self.kind!r}; choose one of {list(KINDS)}")
        if self.size < 1:
            raise ValueError(f"an action space needs at least one choice or dimension, got {self.size}")
        if self.kind == "box":
            if len(self.low) != self.size or len(self.high) != self.size:
                raise ValueError(f"a Box of {self.size} dimensions needs {self.size} low and high bounds")
            bad = [i for i, (lo, hi) in enumerate(zip(self.low, self.high))
                   if math.isnan(lo) or math.isnan(hi) or lo > hi]
            if bad:
                raise ValueError(f"Box dimension {bad[0]} has bounds [{self.low[bad[0]]}, {self.high[bad[0]]}]")
        if self.kind == "multi_discrete" and (len(self.nvec) != self.size or min(self.nvec) < 1):
            raise ValueError(f"MultiDiscrete needs {self.size} group sizes >= 1, got {self.nvec}")

    @property
    def outputs(self) -> int:
        """Units of the actor layer."""
        return sum(self.nvec) if self.kind == "multi_discrete" else self.size

    @classmethod
    def box(cls, low, high) -> "ActionSpec":
        low, high = tuple(float(v) for v in low), tuple(float(v) for v in high)
        return cls("box", len(low), low, high)


class ActionHead(nn.Module):
    """actor outputs (B, spec.outputs) -> actions of ``spec``'s space (see the module docstring)."""

    def __init__(self, spec: ActionSpec):
        super().__init__()
        self.spec = spec
        low = torch.tensor(spec.low, dtype=torch.float32).reshape(-1)   # (A,) for a box, (0,) otherwise
        high = torch.tensor(spec.high, dtype=torch.float32).reshape(-1)
        self.register_buffer("low", low)
        self.register_buffer("high", high)
        self.register_buffer("start", torch.tensor(spec.start or (0,), dtype=torch.int64))

    def forward(self, out: Tensor) -> Tensor:
        kind = self.spec.kind
        if kind == "discrete":
            return out.argmax(dim=-1) + self.start[0]
        if kind == "multi_binary":
            return (out > 0).to(torch.int8)
        if kind == "multi_discrete":
            groups = out.split(list(self.spec.nvec), dim=-1)
            return torch.stack([g.argmax(dim=-1) for g in groups], dim=-1) + self.start
        return self._box(out)

    def _box(self, x: Tensor) -> Tensor:
        lo_ok, hi_ok = torch.isfinite(self.low), torch.isfinite(self.high)
        low = torch.where(lo_ok, self.low, torch.zeros_like(self.low))
        high = torch.where(hi_ok, self.high, torch.zeros_like(self.high))
        t = torch.tanh(x)
        # low + (tanh + 1)·(high − low)/2 as before per-dimension bounds (so equal bounds act bit for bit
        # as they did); a range too wide for float32 (high − low = inf) is scaled from its centre instead
        span = high - low
        bounded = torch.where(torch.isfinite(span), low + (t + 1) * span / 2,
                              (low / 2 + high / 2) + t * (high / 2 - low / 2))
        above = low + F.softplus(x)
        below = high - F.softplus(-x)
        a = torch.where(lo_ok & hi_ok, bounded, torch.where(lo_ok, above, torch.where(hi_ok, below, x)))
        return torch.clamp(a, min=self.low, max=self.high)
