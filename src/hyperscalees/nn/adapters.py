"""Adapters: evolve a rank-r correction B·A beside chosen matrices, the matrices themselves frozen.

``add_adapters(model, rank)`` replaces each chosen ``nn.Linear`` (or transformers' ``Conv1D``)
by an :class:`Adapter`: ``y = W x + b + scale · B (A x)`` with A (r, in) random and B (out, r)
zero, so the model computes exactly what it did before (LoRA's initialisation). It returns the
``es_map`` that evolves A and B only; ``merge_adapters(model)`` folds ``scale · B A`` into W and
puts the plain layers back, so the model saves as ordinary weights (``llm.save_pretrained``).

A and B are ``nn.Linear`` children, so the population forward is the library's own matrix
layer (no new layer code), and each member's A_i, B_i are what ``es.materialized(i)`` writes.

Noise: full-rank ("full") on A and B. The factors are small: r·(in + out) numbers, the
count of one rank-r low-rank draw of W, so dense noise costs what EGGROLL's noise on W would,
and it explores every direction of the adapter instead of a rank-1 slice of a rank-r factor.

A is drawn from a generator keyed by (seed, module name), never from torch's global generator:
a recipe that builds the model twice (every Ray worker does) gets the same adapters.
"""
from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Iterable

import torch
from torch import Tensor, nn

from ..noise.keys import name_key
from .layers import is_hf_conv1d

ES_MAP_MODES = {"*.lora_A.weight": "full", "*.lora_B.weight": "full"}


class Adapter(nn.Module):
    """A frozen matrix layer ``base`` plus ``scale · lora_B(lora_A(x))``; B starts at zero."""

    def __init__(self, base: nn.Module, rank: int, scale: float = 1.0, generator: torch.Generator | None = None):
        super().__init__()
        if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
            raise ValueError(f"adapter rank must be a whole number >= 1, got {rank!r}")
        self.stored = "in_out" if is_hf_conv1d(base) else "out_in"
        w = base.weight
        dout, din = w.shape if self.stored == "out_in" else w.shape[::-1]
        self.base_requires_grad = base.weight.requires_grad  # put back by merge_adapters
        self.base = base.requires_grad_(False)
        kw = dict(bias=False, dtype=w.dtype, device=w.device)
        self.lora_A = nn.Linear(din, rank, **kw)   # (r, in)
        self.lora_B = nn.Linear(rank, dout, **kw)  # (out, r)
        self.scale = float(scale)
        with torch.no_grad():
            a = torch.randn(rank, din, generator=generator, dtype=torch.float64) / din ** 0.5
            self.lora_A.weight.copy_(a.to(w.dtype))  # A x has about the scale of x
            self.lora_B.weight.zero_()

    @property
    def weight(self) -> Tensor:
        """The merged weight in the base layer's stored orientation (for code that reads ``.weight``)."""
        return self.merged_weight()

    @property
    def bias(self) -> Tensor | None:
        return self.base.bias

    def merged_weight(self) -> Tensor:
        """W + scale · B A, summed in float64 and rounded once to W's dtype."""
        w = self.base.weight
        delta = self.scale * (self.lora_B.weight.double() @ self.lora_A.weight.double())  # (out, in)
        return (w.double() + (delta if self.stored == "out_in" else delta.T)).to(w.dtype)

    def forward(self, x: Tensor) -> Tensor:
        return self.base(x) + self.lora_B(self.lora_A(x)) * self.scale


def matrix_layers(model: nn.Module) -> list[str]:
    """Names of the model's ``nn.Linear`` / ``Conv1D`` modules, but the input embedding and output head."""
    skip = set()
    for getter in ("get_input_embeddings", "get_output_embeddings"):
        mod = getattr(model, getter, lambda: None)()
        if mod is not None:
            skip.add(id(mod))
    return [name for name, mod in model.named_modules()
            if name and (isinstance(mod, nn.Linear) or is_hf_conv1d(mod)) and id(mod) not in skip]


def add_adapters(model: nn.Module, rank: int, include: Iterable[str] | None = None, exclude: Iterable[str] = (),
                 scale: float = 1.0, seed: int = 0) -> dict[str, str]:
    """Wrap the chosen matrix layers in :class:`Adapter` (in place); return the ``es_map`` evolving A, B only.

    ``include``: glob patterns over *module* names (``"*.q_proj"``), default every Linear/Conv1D
    but the input embedding and the output head; ``exclude``: patterns removed from that choice.
    """
    names = matrix_layers(model)
    if include is not None:
        include = list(include)
        unmatched = [p for p in include if not any(fnmatchcase(n, p) for n in names)]
        if unmatched:
            raise ValueError(f"adapter patterns {unmatched} match no Linear/Conv1D module; names are e.g. {names[:4]}")
        names = [n for n in names if any(fnmatchcase(n, p) for p in include)]
    names = [n for n in names if not any(fnmatchcase(n, p) for p in exclude)]
    if not names:
        raise ValueError(f"no matrix layer left to adapt in {type(model).__name__}")
    for name in names:
        parent, _, attr = name.rpartition(".")
        owner = model.get_submodule(parent)
        gen = torch.Generator().manual_seed(name_key(seed, name))
        setattr(owner, attr, Adapter(getattr(owner, attr), rank, scale, generator=gen))
    return {"*": "excluded", **ES_MAP_MODES}


def merge_adapters(model: nn.Module) -> nn.Module:
    """Fold every adapter into its base weight and put the plain layer back (in place); returns ``model``."""
    found = [(name, mod) for name, mod in model.named_modules() if isinstance(mod, Adapter)]
    if not found:
        raise ValueError(f"{type(model).__name__} has no adapters to merge")
    for name, adapter in found:
        parent, _, attr = name.rpartition(".")
        base = adapter.base
        with torch.no_grad():
            base.weight.copy_(adapter.merged_weight())
        base.requires_grad_(adapter.base_requires_grad)
        setattr(model.get_submodule(parent), attr, base)
    return model
