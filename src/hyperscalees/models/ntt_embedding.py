"""Causal transform features of the token window as extra embeddings (d-eggs' NTT mode, fixed).

Dimensions: B streams, T positions, n transform length, k coefficients used, D width.

At position t the n tokens ending at t are transformed (``ops.ntt.causal_transform``:
Walsh–Hadamard or the Fermat NTT mod 65537); the low byte of each of the first k coefficients
indexes its own (256, D) table, and the k rows are summed into a (B, T, D) feature that a model
adds to its token embedding. Unlike d-eggs, where every position saw the transform of the
whole window (future tokens included) and the tables were never initialised or trained,
position t here depends on tokens ≤ t only, and the tables are ordinary ``nn.Embedding``s
that ES perturbs and updates like the token embedding.

Integer models can use :meth:`NTTEmbedding.indices` with int8 tables of their own (d-eggs
shifts each int8 row right by 2 before adding). A model that carries a recurrent state across
windows sees zero padding instead of the previous window's last n-1 tokens at a window start.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from ..ops.ntt import TRANSFORMS, causal_transform


class NTTEmbedding(nn.Module):
    """Sum of k (256, D) tables indexed by the low bytes of causal-window transform coefficients."""

    def __init__(self, mode: str, dim: int, length: int = 16, coefficients: int = 4):
        super().__init__()
        if mode not in TRANSFORMS:
            raise ValueError(f"unknown ntt mode {mode!r}; choose one of {sorted(TRANSFORMS)}")
        if not 1 <= coefficients <= length:
            raise ValueError(f"coefficients must be in [1, {length}], got {coefficients!r}")
        self.mode, self.length, self.coefficients = mode, length, coefficients
        self.tables = nn.ModuleList(nn.Embedding(256, dim) for _ in range(coefficients))
        for t in self.tables:
            nn.init.normal_(t.weight, std=0.02)

    def indices(self, tokens: Tensor) -> Tensor:
        """(B, T) ids -> (B, T, k) table rows: low byte of the first k coefficients at each position."""
        c = causal_transform(tokens, self.mode, self.length)[..., :self.coefficients]   # (B, T, k)
        return c & 255

    def forward(self, tokens: Tensor) -> Tensor:
        idx = self.indices(tokens)
        return torch.stack([t(idx[..., j]) for j, t in enumerate(self.tables)]).sum(dim=0)   # (B, T, D)
