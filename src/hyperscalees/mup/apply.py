"""``apply_mup(model, base, lr)``: the muP recipe for a model built by constructor, in one call.

A Python user reaches muP in five calls (``compare_widths``, ``add_output_multipliers``,
``rescale_readout_init``, ``mup_groups``, then the ES facade's ``groups=``); ``train TASK --mup``
and this function make the same four before the facade, in that order, so the command line
and Python build the same run. ``base`` is the same architecture at the width where σ and lr
were tuned: at that width every multiplier is 1 and the run is the standard one, bit for bit.
``init_std`` adds ezmup's per-layer init std (``mup/init.py``): each named layer's std at the
base width, scaled by muP's rule for its kind.
"""
from __future__ import annotations

import torch
from torch import nn

from .init import init_per_layer
from .readout import add_output_multipliers, rescale_readout_init
from .rules import mup_groups
from .width import compare_widths


def apply_mup(model: nn.Module, base: nn.Module, lr: float, optimizer: str = "adam", es: bool = True,
              groups: list[dict] | None = None, es_map: dict | None = None,
              init_std: float | dict[str, float] | None = None,
              generator: torch.Generator | None = None) -> list[dict]:
    """Make freshly built ``model`` a muP model anchored at ``base``; returns the parameter groups
    for the ES facade (or, with ``es=False`` and ``torch_groups``, a torch optimizer).

    Adds the readout's 1/m forward multiplier and its base-width init (so call it once, on a model
    not yet trained or loaded), and restricts the groups to what ES evolves under ``es_map``.
    ``init_std``: {name pattern: std at the base width} (or one float for every weight); those
    layers are redrawn with muP's std for their kind, from ``generator`` if given."""
    widths = compare_widths(base, model)
    names = None if es else list(widths)
    add_output_multipliers(model, widths)
    rescale_readout_init(model, widths)
    if init_std is not None:
        init_per_layer(model, widths, init_std, generator)
    return mup_groups(widths, lr, optimizer, es, groups=groups, names=names, model=model if es else None,
                      es_map=es_map if es else None)
