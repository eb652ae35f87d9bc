"""Regress y = x² + x + 1 on x ∈ [-2, 2]: a smooth 1-D fit where the MSE should fall steadily."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..models import mlp
from .base import AbstractTask, check_options, member_major, option


@dataclass(frozen=True)
class PolyOptions:
    points: int = option(64, "grid points on [-2, 2] the fitness is measured on (>= 2)")
    hidden: int = option(32, "width of the hidden layers")

    def __post_init__(self):
        check_options(self, positive=("hidden",))
        if self.points < 2:  # the held-out set is the midpoints between them
            raise ValueError(f"points must be an integer >= 2, got {self.points!r}")


class PolyTask(AbstractTask):
    """A fixed grid of ``points`` inputs; fitness is -MSE on the grid, metric MSE on the midpoints."""

    name = "poly"
    metric = "mse"
    goal = "min"
    target = 0.05
    defaults = {"population": 512, "sigma": 0.05, "rank": 1, "lr": 0.02, "optimizer": "adam", "steps": 300}
    Options = PolyOptions
    width_option = "hidden"

    def __init__(self, seed=0, device=None, options=None):
        super().__init__(seed, device, options)
        n = self.options.points
        grid = torch.linspace(-2.0, 2.0, n)
        mids = (grid[1:] + grid[:-1]) / 2  # held out: between the training points
        self.x, self.y = self._pairs(grid)
        self.x_eval, self.y_eval = self._pairs(mids)

    def _pairs(self, x: Tensor) -> tuple[Tensor, Tensor]:
        x = x.view(-1, 1)
        return x.to(self.device), (x * x + x + 1).to(self.device)

    def make_model(self) -> nn.Module:
        h = self.options.hidden
        return mlp([1, h, h, 1], "tanh")

    def fitness(self, model: nn.Module, lo: int, hi: int, step: int = 0) -> Tensor:
        p = hi - lo
        out = model(member_major(self.x, p)).view(p, -1, 1)  # (P, N, 1)
        return -((out - self.y) ** 2).mean(dim=(1, 2))

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        return {"mse": float(((model(self.x_eval) - self.y_eval) ** 2).mean())}
