"""``nn.Linear`` (and subclasses such as attention's ``out_proj``): W stored (out, in), used as x Wᵀ."""
from __future__ import annotations

from torch import nn

from .base import AbstractLayer, PopulationContext
from .matmul import population_linear


class LinearLayer(AbstractLayer):
    def params(self, module):
        return ("weight", "bias")

    def lowrank(self, module):
        return {"weight": "out_in"}

    def forward(self, ctx: PopulationContext, module: nn.Linear, active: dict[str, str]):
        def forward(x):
            return population_linear(ctx, x, module.weight, active.get("weight"), module.bias, active.get("bias"),
                                     "out_in", what=type(module).__name__)
        return forward
