"""Materialize members of a population: the dumb ground truth every layer's forward must match."""
from __future__ import annotations

import copy

import torch
from torch import nn


def member_delta(store, name: str, i: int) -> torch.Tensor:
    """Member i's perturbation of parameter ``name`` in its stored shape: s·scale·A Bᵀ or s·scale·ε."""
    n = store.noise(name, 2 * (i // 2), 2 * (i // 2) + 2)  # member i's pair
    s = float(n.signs[0, i % 2])
    unit = n.a[0] @ n.b[0].T if n.lowrank else n.eps[0]
    return s * n.scale * unit


def member_model(model: nn.Module, es, i: int) -> nn.Module:
    """A copy of ``model`` with member i's perturbation written into every perturbed parameter."""
    store = es.store()
    m = copy.deepcopy(model)
    params = dict(m.named_parameters())
    with torch.no_grad():
        for name in store.specs:
            p = params[name]
            p.copy_((p.double() + member_delta(store, name, i).double()).to(p.dtype))
    return m


def split_members(t: torch.Tensor, members: int, dim: int = 0) -> list[torch.Tensor]:
    """Member i's slice of a member-major tensor (its rows along ``dim``)."""
    return list(t.chunk(members, dim=dim))
