"""Materialize members of a strategy's population: the dumb ground truth strategy tests compare to."""
from __future__ import annotations

import math

import torch

from hyperscalees.strategies import ESConfig, ESMode, ParamSpec


def specs_of(shapes: dict[str, tuple[tuple[int, ...], ESMode]]) -> dict[str, ParamSpec]:
    return {n: ParamSpec(n, tuple(s), m) for n, (s, m) in shapes.items()}


def make(cls, params: dict[str, torch.Tensor], modes: dict[str, ESMode], **cfg):
    specs = {n: ParamSpec(n, tuple(p.shape), modes[n]) for n, p in params.items()}
    schedules = {k: cfg.pop(k) for k in ("lr_schedule", "sigma_schedule", "shaping_fn", "groups", "update_rule")
                 if k in cfg}
    shaping = schedules.pop("shaping_fn", None)
    return cls(params, specs, ESConfig(**cfg), shaping=shaping, **schedules)


def unit_noise(strategy, name: str, pop) -> torch.Tensor:
    """(P, *shape) unit-variance ε_i of every member (s·A Bᵀ/√r or s·ε), materialized."""
    n = strategy.noise(name, pop, 0, pop.size)
    if n.a is not None:
        per_pair = torch.einsum("kir,kjr->kij", n.a, n.b) / math.sqrt(n.a.shape[-1])  # (K, rows, cols)
    else:
        per_pair = n.eps
    s = n.signs.reshape(-1).view(-1, *([1] * (per_pair.dim() - 1)))
    return per_pair.repeat_interleave(2, dim=0) * s


def member_params(strategy, pop) -> dict[str, torch.Tensor]:
    """(P, *shape) perturbed copies θ + σ ε_i of every trainable parameter (float32)."""
    return {n: strategy.params[n].detach().float() + pop.sigma * unit_noise(strategy, n, pop)
            for n in strategy.trainable}


def sphere(strategy, targets: dict[str, torch.Tensor], pop=None) -> torch.Tensor:
    """(P,) fitness -Σ ||θ_i - target||² over trainable parameters (higher is better)."""
    pop = pop or strategy.ask()
    members = member_params(strategy, pop)
    return -sum((members[n] - targets[n]).pow(2).flatten(1).sum(1) for n in members)


def loss(params: dict[str, torch.Tensor], targets: dict[str, torch.Tensor]) -> float:
    return float(sum((params[n].float() - targets[n]).pow(2).sum() for n in targets))
