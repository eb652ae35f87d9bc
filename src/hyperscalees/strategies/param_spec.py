"""How each parameter takes part in evolution (HyperscaleES's es_map classes)."""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class ESMode(IntEnum):
    PARAM = 0       # full-rank noise s·σ·ε (biases, norm weights, any tensor)
    MM_PARAM = 1    # rank-r noise A Bᵀ on a matrix used as x Wᵀ (or x W)
    EMB_PARAM = 2   # rank-r noise on an embedding table, rows drawn on demand
    EXCLUDED = 3    # frozen: no noise, no update


@dataclass(frozen=True)
class ParamSpec:
    name: str
    shape: tuple[int, ...]
    mode: ESMode

    @property
    def is_lowrank(self) -> bool:
        return self.mode in (ESMode.MM_PARAM, ESMode.EMB_PARAM)
