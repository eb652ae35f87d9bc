"""XOR with a 2-16-1 MLP: the smallest task that needs a hidden layer (the EGGROLL gist set-up)."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..models import mlp
from ..models.mlp import ACTIVATIONS
from .base import ACTIVATION_HELP, AbstractTask, check_options, member_major, option


@dataclass(frozen=True)
class XorOptions:
    hidden: int = option(16, "width of the hidden layer")
    activation: str = option("tanh", ACTIVATION_HELP, choices=tuple(ACTIVATIONS))

    def __post_init__(self):
        check_options(self, positive=("hidden",), activation=self.activation)


class XorTask(AbstractTask):
    """Four fixed points; fitness is -MSE on all of them; solved at MSE < 0.005."""

    name = "xor"
    metric = "mse"
    goal = "min"
    target = 0.005
    defaults = {"population": 512, "sigma": 0.1, "rank": 1, "lr": 0.02, "optimizer": "adam", "steps": 200}
    Options = XorOptions
    width_option = "hidden"

    def __init__(self, seed=0, device=None, options=None):
        super().__init__(seed, device, options)
        self.x = torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]], device=self.device)  # (4, 2)
        self.y = torch.tensor([[0.0], [1.0], [1.0], [0.0]], device=self.device)  # (4, 1)

    def make_model(self) -> nn.Module:
        return mlp([2, self.options.hidden, 1], self.options.activation)

    def fitness(self, model: nn.Module, lo: int, hi: int, step: int = 0) -> Tensor:
        p = hi - lo
        out = model(member_major(self.x, p)).view(p, 4, 1)  # (P, 4, 1)
        return -((out - self.y) ** 2).mean(dim=(1, 2))

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        mse = float(((model(self.x) - self.y) ** 2).mean())
        return {"mse": mse, "converged": float(mse < self.target)}

    def metric_names(self):
        return ("mse", "converged")
