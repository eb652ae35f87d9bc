"""OpenESNoiser: naive full-rank ES, every leaf perturbed by a dense σ·ε per pair.

The slow honest baseline: ``do_mm`` materializes (K, out, in) noise per call, which is
exactly the cost EGGROLL avoids. No rank, no √r. ``freeze_nonlora`` freezes PARAM leaves.
"""
from __future__ import annotations

from ..noise.spec import ESMode
from .noiser import AbstractNoiser


class OpenESNoiser(AbstractNoiser):
    """Dense noise on every leaf (the module-level equivalent is ``hs.OpenES``)."""

    name = "open_es"

    @classmethod
    def kind(cls, frozen, mode):
        if mode in (ESMode.MM_PARAM, ESMode.EMB_PARAM):
            return "full"
        if mode == ESMode.PARAM and not frozen["freeze_nonlora"]:
            return "full"
        return None
