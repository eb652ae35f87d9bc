"""``nn.Embedding``: W stored (vocab, dim), looked up by row.

Low-rank noise on a table: member i's row t is W[t] + s·scale·A[t] Bᵀ, so a lookup needs
only the looked-up rows of A (drawn on demand, never the (K, vocab, r) table) and B.
"""
from __future__ import annotations

from torch import nn

from ...ops.fullrank import add_emb_dense
from ...ops.lowrank_linear import add_emb_lowrank
from .base import AbstractLayer, PopulationContext


class EmbeddingLayer(AbstractLayer):
    def params(self, module):
        return ("weight",)

    def lowrank(self, module):
        return {"weight": "rows"}

    def forward(self, ctx: PopulationContext, module: nn.Embedding, active: dict[str, str]):
        name = active["weight"]
        base = type(module).forward

        def forward(idx):
            ctx.check_rows(idx, "Embedding")
            y = base(module, idx)  # the module's own lookup: padding_idx, max_norm and all
            n = ctx.rows(name, idx.reshape(ctx.k, -1))  # (K, 2T) rows of both members of each pair
            if n.lowrank:
                return add_emb_lowrank(y, n.a, n.b, n.signs, n.scale)
            return add_emb_dense(y, n.eps, n.signs, n.scale)
        return forward
