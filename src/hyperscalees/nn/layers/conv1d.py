"""Hugging Face's ``Conv1D`` (GPT-2's c_attn, c_fc, c_proj): W stored (in, out), used as x W + b.

Matched by layout rather than by import, so ``transformers`` is never needed: a module
named ``Conv1D`` with an ``nf`` attribute and a (nx, nf) weight. It runs as a
:class:`LinearLayer` whose matrix is stored (in, out): noise A (K, in, r), B (K, out, r) in
that orientation, applied as (x A) Bᵀ (registered as ``LinearLayer(stored="in_out")``).
"""
from __future__ import annotations

from torch import nn



def is_hf_conv1d(module: nn.Module) -> bool:
    w = getattr(module, "weight", None)
    return (type(module).__name__ == "Conv1D" and isinstance(getattr(module, "nf", None), int)
            and w is not None and w.dim() == 2 and w.shape[1] == module.nf)
