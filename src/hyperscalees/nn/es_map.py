"""Derive each parameter's ES mode from the layer that runs its module, with name overrides.

The layer registry decides (``nn/layers``): a Linear's or Conv1D's weight is a low-rank
matrix (MM_PARAM), an Embedding's table EMB_PARAM, anything else full-rank (PARAM).
Trainability is decided by ``es_map`` and dtype, not autograd: integer tensors (which can
never require grad) evolve by default; float tensors with ``requires_grad=False`` are
frozen (torch's convention) unless ``es_map`` names them.
"""
from __future__ import annotations

from fnmatch import fnmatchcase

from torch import nn

from ..noise.spec import ESMode, ParamSpec, parse_mode
from .layers import FALLBACK, layer_for


def owned_parameters(model: nn.Module):
    """(module, attribute, canonical name, parameter) for every direct parameter; tied ones once each."""
    canonical = {}
    for name, p in model.named_parameters():
        canonical.setdefault(id(p), name)
    for mod_name, mod in model.named_modules():
        for attr, p in mod._parameters.items():
            if p is not None:
                yield mod, attr, canonical[id(p)], p


def _override(name: str, overrides: dict[str, ESMode]) -> ESMode | None:
    mode = None
    for pattern, m in overrides.items():  # the last matching pattern wins
        if fnmatchcase(name, pattern):
            mode = m
    return mode


def derive_specs(model: nn.Module, overrides: dict | None = None) -> dict[str, ParamSpec]:
    """One ParamSpec per canonical parameter name; ``overrides`` maps glob patterns to modes."""
    overrides = {k: parse_mode(v) for k, v in (overrides or {}).items()}
    by_module: dict[nn.Module, list] = {}
    for mod, attr, name, p in owned_parameters(model):
        by_module.setdefault(mod, []).append((attr, name, p))
    specs: dict[str, ParamSpec] = {}
    for mod, owned in by_module.items():
        modes = {}
        for attr, name, p in owned:
            frozen = p.is_floating_point() and not p.requires_grad
            mode = _override(name, overrides)  # ESMode.PARAM is 0: compare with None, never truthiness
            modes[attr] = mode if mode is not None else (ESMode.EXCLUDED if frozen else None)
        layer = layer_for(mod, [a for a, m in modes.items() if m != ESMode.EXCLUDED])
        kinds = layer.lowrank(mod)
        for attr, name, p in owned:
            if name in specs:  # tied: the first owner decides
                continue
            mode = modes[attr] if modes[attr] is not None else layer.default_mode(mod, attr, p)
            if mode != ESMode.EXCLUDED and not p.is_floating_point() and layer is FALLBACK:
                raise ValueError(f"{name} is {p.dtype} and {type(mod).__name__} has no layer that takes integer "
                                 "weights (the generic layer adds float noise): register one with "
                                 "hyperscalees.nn.register_layer, or exclude it via es_map")
            _check_lowrank(mode, kinds.get(attr), name, mod, layer, kinds)
            specs[name] = ParamSpec(name, tuple(p.shape), mode)
    unmatched = [k for k in overrides if not any(fnmatchcase(n, k) for n in specs)]
    if unmatched:
        raise ValueError(f"es_map patterns {unmatched} match no parameter; names are e.g. {list(specs)[:5]}")
    return specs


def _check_lowrank(mode: ESMode, kind: str | None, name: str, mod: nn.Module, layer, kinds: dict) -> None:
    want = {ESMode.MM_PARAM: ("out_in", "in_out"), ESMode.EMB_PARAM: ("rows",)}.get(mode)
    if want and kind not in want:
        where = f"{type(mod).__name__} (run by {type(layer).__name__})"
        allowed = ", ".join(f"{a}: {'lowrank' if k != 'rows' else 'emb'}" for a, k in kinds.items()) or "none"
        raise ValueError(f"{name}: mode {mode.name} is not supported by {where}; its low-rank parameters are "
                         f"[{allowed}]. Map it to 'full' or 'excluded', or register a layer for the module type")
