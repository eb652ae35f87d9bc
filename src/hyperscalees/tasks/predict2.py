"""Output the constant 2 whatever the input: checks bias learning and step-keyed fresh data."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..models import mlp
from .base import AbstractTask, check_options, member_major, option

_EVAL_STREAM = -1  # the held-out batch lives on a stream no training step uses


@dataclass(frozen=True)
class Predict2Options:
    batch: int = option(32, "examples every member scores per step")
    hidden: int = option(16, "width of the hidden layers")

    def __post_init__(self):
        check_options(self, positive=("batch", "hidden"))


class Predict2Task(AbstractTask):
    """MLP 3→16→16→1 on fresh N(0,1) inputs each step; metric mean |y - 2|; solved below 0.05."""

    name = "predict2"
    metric = "abs_error"
    goal = "min"
    target = 0.05
    defaults = {"population": 256, "sigma": 0.05, "rank": 1, "lr": 0.02, "optimizer": "adam", "steps": 150}
    Options = Predict2Options
    width_option = "hidden"

    def __init__(self, seed=0, device=None, options=None):
        super().__init__(seed, device, options)
        self._cached: tuple[int, Tensor] | None = None
        self.x_eval = self._inputs(_EVAL_STREAM, 1024)

    def _inputs(self, stream: int, n: int) -> Tensor:
        return torch.randn(n, 3, generator=self.generator(stream)).to(self.device)  # (B, 3)

    def batch(self, step: int) -> Tensor:
        """The inputs of ``step`` (B, 3): a function of (seed, step) only, cached across chunks."""
        if self._cached is None or self._cached[0] != step:
            self._cached = (step, self._inputs(step, self.options.batch))
        return self._cached[1]

    def make_model(self) -> nn.Module:
        h = self.options.hidden
        return mlp([3, h, h, 1], "tanh")

    def fitness(self, model: nn.Module, lo: int, hi: int, step: int = 0) -> Tensor:
        p, x = hi - lo, self.batch(step)
        out = model(member_major(x, p)).view(p, -1)  # (P, B)
        return -(out - 2.0).abs().mean(dim=1)

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        return {"abs_error": float((model(self.x_eval) - 2.0).abs().mean())}
