"""A module that is one affine map with a stored matrix: ``nn.Linear`` and transformers' ``Conv1D``.

``nn.Linear`` stores W as (out, in) and computes x Wᵀ + b (``stored="out_in"``); GPT-2's
``Conv1D`` stores it as (in, out) and computes x W + b (``stored="in_out"``). Noise is drawn in
the stored orientation, so only the matmul's bookkeeping differs (``matmul.py``).
"""
from __future__ import annotations

from torch import nn

from .base import AbstractLayer, PopulationContext
from .matmul import linear_forward


class LinearLayer(AbstractLayer):
    def __init__(self, stored: str = "out_in"):
        self.stored = stored

    def params(self, module):
        return ("weight", "bias")

    def lowrank(self, module):
        return {"weight": self.stored}

    def forward(self, ctx: PopulationContext, module: nn.Module, active: dict[str, str]):
        return linear_forward(ctx, module, active.get("weight"), active.get("bias"), self.stored,
                              what=type(module).__name__)
