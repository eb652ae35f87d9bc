"""The default update rule: a stock ``torch.optim`` optimizer steps ``-ĝ`` written into ``.grad``.

Adam, weight decay, Muon and any torch optimizer then come for free. Parameters in bf16 or
fp16 are stepped through fp32 master copies, so tiny ES steps do not vanish in rounding
(``ESConfig.fp32_masters``; turning it off starts each step from the rounded weights, the way an
update added straight to bf16 weights behaves). For such parameters each step reports
``update_landed``: the share of the intended step kept by the state the next step starts from,
⟨Δ_kept, Δ_intended⟩ / ‖Δ_intended‖² over all of them. With masters that state is fp32 and keeps
the whole step (1 by construction; the bf16 model lags the masters by at most half a unit in the
last place and never drifts); without them it is the rounded model, and the figure shows what
rounding threw away (≈ 0 when the steps are below the dtype's resolution).
Each :class:`ParamGroup` becomes one torch param group (its lr and weight decay).
"""
from __future__ import annotations

import copy
from typing import Callable

import torch
from torch import Tensor

from ..groups import ParamGroup
from .base import AbstractUpdateRule
from .optimizers import OPTIMIZERS

LOW_PRECISION = (torch.float16, torch.bfloat16)


def landed_fraction(intended: list[Tensor], realised: list[Tensor]) -> Tensor:
    """⟨realised, intended⟩ / ‖intended‖² summed over tensors (a device scalar; 1 when nothing moved)."""
    dot = sum((r.double() * i.double()).sum() for r, i in zip(realised, intended))
    norm = sum(i.double().square().sum() for i in intended)
    return torch.where(norm > 0, dot / norm.clamp_min(1e-300), torch.ones_like(norm)).float()


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


def build_optimizer(groups: list[dict], name: str, momentum: float = 0.0) -> OptimizerGroup:
    """One optimizer (two for Muon) over torch-style ``groups`` [{"params", "lr", "weight_decay"}]."""
    tensors = [p for g in groups for p in g["params"]]
    if not tensors:
        raise ValueError("no trainable parameters: everything is excluded or frozen")
    if name == "custom":
        raise ValueError("optimizer 'custom' needs an optimizer class or factory (optimizer_factory=...)")
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; choose one of {sorted(OPTIMIZERS)}")
    return OptimizerGroup(OPTIMIZERS[name](groups, momentum))


class OptimizerRule(AbstractUpdateRule):
    """``-ĝ`` into ``.grad`` of (fp32 master) parameters, then ``optimizer.step()``."""

    takes_negated_estimate = True  # the estimates arrive as −ĝ (negated exactly, for free, upstream)

    def __init__(self, params: dict[str, Tensor], groups: list[ParamGroup], config,
                 optimizer_factory: Callable | None = None):
        super().__init__(params, groups, config)
        for n in (n for g in groups for n in g.names):
            if not params[n].is_floating_point():
                raise ValueError(f"parameter {n!r} is {params[n].dtype}: torch optimizers step float tensors "
                                 "only; pass an update rule for integer weights (update_rule=...)")
        self.masters = {n: (params[n].detach().float().clone() if params[n].dtype in LOW_PRECISION else params[n])
                        for g in groups for n in g.names}
        torch_groups = [{"params": [self.masters[n] for n in g.names], "lr": g.lr, "weight_decay": g.weight_decay}
                        for g in groups]
        self.optimizer = (OptimizerGroup([optimizer_factory(torch_groups)]) if optimizer_factory
                          else build_optimizer(torch_groups, config.optimizer, config.momentum))
        self._base_lrs = [g["lr"] for g in self.optimizer.param_groups]
        self.keep_masters = bool(getattr(config, "fp32_masters", True))
        self.low = [n for n, m in self.masters.items() if m is not self.params[n]]
        self._landed = None
        # torch's optimizers step each parameter from its own .grad and state (one with none is skipped);
        # a factory's optimizer may couple them (a global clip), so it is not trusted to
        self.by_parameter = optimizer_factory is None

    def _set_lr(self, factor: float) -> None:
        for g, base in zip(self.optimizer.param_groups, self._base_lrs):
            g["lr"] = base * factor

    def apply(self, estimates: dict[str, Tensor], lr_factor: float) -> None:
        self._set_lr(lr_factor)
        low = [n for n in self.low if n in estimates]  # a part's (by_parameter): the others' weights are not ours
        with torch.no_grad():
            if not self.keep_masters:  # the step starts from the rounded weights: what rounded away is lost
                for n in low:
                    self.masters[n].copy_(self.params[n])
            before = [] if self.keep_masters else [self.masters[n].clone() for n in low]
        for n in list(estimates):
            g = estimates.pop(n)  # −ĝ, a fresh tensor: handed over, no copy
            self.masters[n].grad = g if g.dtype == self.masters[n].dtype else g.to(self.masters[n].dtype)
        self.optimizer.step()
        self.optimizer.zero_grad()  # set_to_none: the estimates are freed before the next forward
        if not low:  # every parameter is its own master: nothing to copy, nothing can round away
            return
        with torch.no_grad():
            for n in low:
                self.params[n].copy_(self.masters[n])
            # masters keep the whole step; without them, what the rounded weights kept
            self._landed = (torch.ones((), device=self.params[low[0]].device) if self.keep_masters else
                            landed_fraction([self.masters[n] - b for n, b in zip(low, before)],
                                            [self.params[n].float() - b for n, b in zip(low, before)]))

    def metrics(self) -> dict:
        return {} if self._landed is None else {"update_landed": self._landed}

    def lrs(self, lr_factor: float) -> list[float]:
        return [base * lr_factor for base in self._base_lrs]

    def state_dict(self) -> dict:
        # torch optimizers hand out live references to their moments: copy so the snapshot stays put
        return {"optimizer": copy.deepcopy(self.optimizer.state_dict()),
                "masters": {n: m.detach().clone() for n, m in self.masters.items() if m is not self.params[n]}}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        with torch.no_grad():
            for n, m in state.get("masters", {}).items():
                self.masters[n].copy_(m)
