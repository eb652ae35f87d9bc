"""The two forward-time multipliers muP adds: the readout's 1/m and attention's 1/d.

Both act in the forward, not in the weights: under Adam a weight multiplier and a forward
multiplier are not the same parametrisation (Adam's step ignores the weight's scale). The
readout multiplier is a forward hook on the module owning an ``output``-kind parameter, so it
also scales a population forward (``nn.perturbation`` swaps ``forward``; hooks still run).
"""
from __future__ import annotations

import torch
from torch import nn

from .rules import output_multiplier
from .width import ParamWidth, named_owned


def attention_scale(head_dim: int, base_head_dim: int) -> float:
    """muP's attention logit scale: 1/d anchored at the base (1/√d₀ there, √d₀/d elsewhere).

    At a fixed head dimension (TinyLM: heads grow, ``head_dim`` stays 64) it equals the usual 1/√d."""
    return base_head_dim ** 0.5 / head_dim


def set_attention_scale(model: nn.Module, base_head_dim: int) -> int:
    """Set ``attn_scale`` on every module that has it (``models.Block``) from its ``head_dim``;
    returns how many were set."""
    count = 0
    for mod in model.modules():
        if hasattr(mod, "attn_scale") and hasattr(mod, "head_dim"):
            mod.attn_scale = attention_scale(mod.head_dim, base_head_dim)
            count += 1
    return count


def add_output_multipliers(model: nn.Module, widths: dict[str, ParamWidth]) -> list:
    """Scale the input of every module owning a readout parameter by 1/m; returns the hook handles
    (``handle.remove()`` undoes it). A module gets one hook however many readout parameters it has."""
    handles, done = [], set()
    for mod, attr, name, p in named_owned(model):
        pw = widths.get(name)
        if pw is None or pw.kind != "output" or id(mod) in done:
            continue
        done.add(id(mod))
        alpha = output_multiplier(pw)
        if alpha != 1.0:
            handles.append(mod.register_forward_pre_hook(lambda m, args, a=alpha: (args[0] * a, *args[1:])))
    return handles


def rescale_readout_init(model: nn.Module, widths: dict[str, ParamWidth]) -> None:
    """Constructor path: a readout built with fan-in init (std 1/√n) gets muP's, its base std, by
    ×√m. ``change_width`` draws it so already; call this once on a freshly built model only."""
    with torch.no_grad():
        for mod, attr, name, p in named_owned(model):
            pw = widths.get(name)
            if pw is not None and pw.kind == "output" and p.dim() > 1:
                p.mul_(pw.fan_in_mult ** 0.5)
