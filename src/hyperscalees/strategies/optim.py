"""Stock torch optimizers over the ES estimate, built from a name."""
from __future__ import annotations

import torch
from torch import Tensor

from .config import ESConfig


class OptimizerGroup:
    """Several optimizers stepped as one (Muon takes only matrices; AdamW the rest)."""

    def __init__(self, optimizers: list[torch.optim.Optimizer]):
        self.optimizers = optimizers

    @property
    def param_groups(self):
        return [g for o in self.optimizers for g in o.param_groups]

    def step(self):
        for o in self.optimizers:
            o.step()

    def zero_grad(self, set_to_none: bool = True):
        for o in self.optimizers:
            o.zero_grad(set_to_none=set_to_none)

    def state_dict(self):
        return {"optimizers": [o.state_dict() for o in self.optimizers]}

    def load_state_dict(self, sd):
        for o, s in zip(self.optimizers, sd["optimizers"]):
            o.load_state_dict(s)


def _fused(params: list[Tensor]) -> dict:
    """``fused=True`` where torch has a one-pass kernel for these tensors.

    Adam's default path makes ~10 passes over every parameter; on the CPU the fused
    kernel was 6x faster (0.8 vs 5.1 ms for 2.1 M parameters), which is a few percent
    of a whole ES step at width 1024.
    """
    kinds = {p.device.type for p in params}
    ok = kinds <= {"cpu", "cuda"} and len(kinds) == 1 and all(p.dtype in _FUSED_DTYPES for p in params)
    return {"fused": True} if ok else {}


_FUSED_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def build_optimizer(params: list[Tensor], cfg: ESConfig) -> OptimizerGroup:
    name, lr, wd = cfg.optimizer, cfg.lr, cfg.weight_decay
    if not params:
        raise ValueError("no trainable parameters: everything is excluded or frozen")
    if name == "sgd":
        return OptimizerGroup([torch.optim.SGD(params, lr=lr, momentum=cfg.momentum, weight_decay=wd)])
    if name == "adam":
        return OptimizerGroup([torch.optim.Adam(params, lr=lr, weight_decay=wd, **_fused(params))])
    if name == "adamw":
        return OptimizerGroup([torch.optim.AdamW(params, lr=lr, weight_decay=wd, **_fused(params))])
    if name == "muon":
        mats = [p for p in params if p.dim() == 2]
        rest = [p for p in params if p.dim() != 2]
        opts = [torch.optim.Muon(mats, lr=lr, weight_decay=wd)] if mats else []
        if rest:
            opts.append(torch.optim.AdamW(rest, lr=lr, weight_decay=wd, **_fused(rest)))
        return OptimizerGroup(opts)
    if name == "custom":
        raise ValueError("optimizer 'custom' needs an optimizer class or factory (optimizer_factory=...)")
    raise ValueError(f"unknown optimizer {name!r}")
