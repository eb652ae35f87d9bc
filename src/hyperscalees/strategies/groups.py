"""Torch-style parameter groups: per-group learning rate, weight decay and σ multiplier.

``groups=[{"params": ["head.*", "emb.weight"], "lr": 1e-3, "sigma_scale": 0.5}, ...]``
names parameters (exact names or glob patterns); every parameter no group names falls
into a default group with the config's lr and weight decay. ``"lr_scale": k`` instead of
``"lr"`` gives a group k times the config's lr, so a model can ask for a relative rate that
still follows ``--lr``. A parameter may belong to
one group only. muP's per-width multipliers are exactly such groups.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fnmatch import fnmatchcase

GROUP_KEYS = {"params", "lr", "lr_scale", "weight_decay", "sigma_scale", "name"}


@dataclass(frozen=True)
class ParamGroup:
    names: tuple[str, ...]
    lr: float
    weight_decay: float = 0.0
    sigma_scale: float = 1.0
    name: str = "default"

    def __post_init__(self):
        for key in ("lr", "sigma_scale"):
            v = getattr(self, key)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"parameter group {self.name!r}: {key} must be a finite number > 0, got {v!r}")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"parameter group {self.name!r}: weight_decay must be finite and >= 0, "
                             f"got {self.weight_decay!r}")


def _patterns(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"a group's 'params' must be a name or glob pattern or a list of them, got {value!r}")
    return list(value)


def resolve_groups(trainable: list[str], groups: list[dict] | None, lr: float, weight_decay: float) -> list[ParamGroup]:
    """The groups of ``trainable`` names: the user's, then a default group for the rest (if any)."""
    out, owner = [], {}
    for i, g in enumerate(groups or []):
        if not isinstance(g, dict) or "params" not in g:
            raise TypeError(f"parameter group {i} must be a dict with a 'params' entry, got {g!r}")
        unknown = set(g) - GROUP_KEYS
        if unknown:
            raise ValueError(f"parameter group {i}: unknown key(s) {sorted(unknown)}; use {sorted(GROUP_KEYS)}")
        name = str(g.get("name", f"group{i}"))
        if "lr" in g and "lr_scale" in g:
            raise ValueError(f"parameter group {name!r}: give lr or lr_scale, not both")
        pats = _patterns(g["params"])
        names = [n for n in trainable if any(fnmatchcase(n, p) for p in pats)]
        missing = [p for p in pats if not any(fnmatchcase(n, p) for n in trainable)]
        if missing:
            raise ValueError(f"parameter group {name!r}: {missing} match no trainable parameter; "
                             f"names are e.g. {trainable[:5]}")
        for n in names:
            if n in owner:
                raise ValueError(f"parameter {n!r} is in two groups ({owner[n]!r} and {name!r})")
            owner[n] = name
        group_lr = g["lr"] if "lr" in g else lr * g.get("lr_scale", 1.0)
        out.append(ParamGroup(tuple(names), float(group_lr), float(g.get("weight_decay", weight_decay)),
                              float(g.get("sigma_scale", 1.0)), name))
    rest = tuple(n for n in trainable if n not in owner)
    if rest:
        out.append(ParamGroup(rest, lr, weight_decay, 1.0, "default"))
    return out
