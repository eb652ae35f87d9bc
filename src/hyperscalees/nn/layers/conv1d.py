"""Hugging Face's ``Conv1D`` (GPT-2's c_attn, c_fc, c_proj): W stored (in, out), used as x W + b.

Matched by layout rather than by import, so ``transformers`` is never needed: a module
named ``Conv1D`` with an ``nf`` attribute and a (nx, nf) weight. Its noise is drawn in
that stored orientation, A (K, in, r) and B (K, out, r), and applied as (x A) Bᵀ.
"""
from __future__ import annotations

from torch import nn

from .base import AbstractLayer, PopulationContext
from .matmul import population_linear


def is_hf_conv1d(module: nn.Module) -> bool:
    w = getattr(module, "weight", None)
    return (type(module).__name__ == "Conv1D" and isinstance(getattr(module, "nf", None), int)
            and w is not None and w.dim() == 2 and w.shape[1] == module.nf)


class Conv1DLayer(AbstractLayer):
    def params(self, module):
        return ("weight", "bias")

    def lowrank(self, module):
        return {"weight": "in_out"}

    def forward(self, ctx: PopulationContext, module: nn.Module, active: dict[str, str]):
        def forward(x):
            return population_linear(ctx, x, module.weight, active.get("weight"), module.bias, active.get("bias"),
                                     "in_out", what="Conv1D")
        return forward
