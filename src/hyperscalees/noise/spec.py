"""How each parameter takes part in evolution: its role and its static noise settings.

The vocabulary every layer shares (nn handlers, strategies, the functional port), so it
sits at the bottom: which noise a parameter gets is decided once, from its :class:`ESMode`
and the strategy (EGGROLL: matrices and embeddings low-rank; OpenES: nothing low-rank).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum


class ESMode(IntEnum):
    PARAM = 0       # full-rank noise s·σ·ε (biases, norm weights, any tensor)
    MM_PARAM = 1    # rank-r noise A Bᵀ on a matrix used in a matmul (x Wᵀ or x W)
    EMB_PARAM = 2   # rank-r noise on an embedding table, rows drawn on demand
    EXCLUDED = 3    # frozen: no noise, no update


MODE_NAMES = {"param": ESMode.PARAM, "full": ESMode.PARAM, "mm": ESMode.MM_PARAM, "lowrank": ESMode.MM_PARAM,
              "mm_param": ESMode.MM_PARAM, "emb": ESMode.EMB_PARAM, "emb_param": ESMode.EMB_PARAM,
              "excluded": ESMode.EXCLUDED, "frozen": ESMode.EXCLUDED}


def parse_mode(mode) -> ESMode:
    """An ``ESMode`` from itself, its int value or one of :data:`MODE_NAMES`."""
    if isinstance(mode, ESMode):
        return mode
    if isinstance(mode, int) and mode in ESMode._value2member_map_:
        return ESMode(mode)
    if isinstance(mode, str) and mode.lower() in MODE_NAMES:
        return MODE_NAMES[mode.lower()]
    raise ValueError(f"unknown es_map mode {mode!r}; use one of {sorted(MODE_NAMES)} or an ESMode")


@dataclass(frozen=True)
class ParamSpec:
    """One parameter as ES sees it.

    ``sigma_scale`` multiplies the step's σ for this parameter alone (muP, adaptive-noise
    overlays); the update divides by the same σ, so the estimate stays unbiased.
    """
    name: str
    shape: tuple[int, ...]
    mode: ESMode
    sigma_scale: float = 1.0

    def __post_init__(self):
        s = self.sigma_scale
        if not (isinstance(s, (int, float)) and math.isfinite(s) and s > 0):
            raise ValueError(f"{self.name}: sigma_scale must be a finite number > 0, got {s!r}")
