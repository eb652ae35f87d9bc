"""Per-layer init std under muP: the user names each layer's std at the base width, muP scales it.

ezmup takes an ``init_std`` per parameter name because one global init scale is rarely right
for every layer (an embedding, a readout and a hidden matrix want different stds). Here the
user gives the std each layer had where the hyper-parameters were tuned -- the base width --
as ``{name pattern: std}`` (or one float for every weight), and each layer is drawn from
N(0, (std · s)²) with s muP's init scale for its kind (``rules.init_scale``):

=======  ==================  =====================================================
kind     std at width n      why
=======  ==================  =====================================================
input    std                 fan-in fixed: activations are Θ(1) already
hidden   std / √m            std·√fan-in held, so h = W x stays Θ(1)
output   std                 the readout keeps its base std; its 1/m multiplier
                             (``readout.add_output_multipliers``) does the rest
fixed    std                 no width dimension: nothing to scale
=======  ==================  =====================================================

``m`` is the parameter's fan-in over the base's. At the base width every s is 1, so the init
is exactly ``nn.init.normal_(p, 0, std)`` from the same generator: the model you tuned.
"""
from __future__ import annotations

from fnmatch import fnmatchcase

import torch
from torch import nn

from .rules import init_scale
from .width import ParamWidth, named_owned


def layer_stds(model: nn.Module, widths: dict[str, ParamWidth], init_std: float | dict[str, float]) -> dict[str, float]:
    """{parameter name: std at this width} for every parameter ``init_std`` names.

    A float names every parameter of two or more dimensions (weights, not biases or norm gains,
    as ezmup's global ``init_std``). A dict maps fnmatch patterns to base-width stds; where
    several patterns match a name, the last one wins (general first, exceptions after). A
    pattern matching nothing is refused: a typo would otherwise leave a layer at its old init."""
    if isinstance(init_std, bool) or not isinstance(init_std, (int, float, dict)):
        raise TypeError(f"init_std must be a float or a dict of name pattern -> std, got {init_std!r}")
    if not isinstance(init_std, dict):
        matrices = {name for _, _, name, p in named_owned(model) if p.dim() >= 2}
        return {n: _checked(n, init_std) * init_scale(pw) for n, pw in widths.items() if n in matrices}
    out = {}
    for pat, std in init_std.items():
        hits = [n for n in widths if fnmatchcase(n, pat)]
        if not hits:
            raise ValueError(f"init_std pattern {pat!r} matches no parameter; names are like "
                             f"{next(iter(widths), '')!r}")
        for n in hits:
            out[n] = _checked(pat, std) * init_scale(widths[n])
    return out


def _checked(name: str, std) -> float:
    if isinstance(std, bool) or not isinstance(std, (int, float)) or not std >= 0 or std == float("inf"):
        raise ValueError(f"init_std for {name!r} must be a finite number >= 0, got {std!r}")
    return float(std)


def init_per_layer(model: nn.Module, widths: dict[str, ParamWidth], init_std: float | dict[str, float],
                   generator: torch.Generator | None = None) -> dict[str, float]:
    """Redraw every parameter ``init_std`` names from N(0, std²) with muP's per-kind std (table
    above); returns {name: the std drawn with}. Parameters it does not name are left as they are.

    Call it on a freshly built model (after ``rescale_readout_init``, which it overrides for the
    layers it names), before an optimizer or ES facade is built."""
    stds = layer_stds(model, widths, init_std)
    with torch.no_grad():
        for _, _, name, p in named_owned(model):
            if name in stds:
                p.normal_(0.0, stds[name], generator=generator)
    return stds
