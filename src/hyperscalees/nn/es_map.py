"""Derive each parameter's ES mode from the module that owns it, with name overrides.

Linear weights -> MM_PARAM (low-rank), Embedding weights -> EMB_PARAM, frozen tensors
(``requires_grad=False``) -> EXCLUDED, anything else trainable -> PARAM (full-rank).
"""
from __future__ import annotations

from fnmatch import fnmatchcase

from torch import nn

from ..strategies.param_spec import ESMode, ParamSpec

_MODE_NAMES = {"param": ESMode.PARAM, "full": ESMode.PARAM, "mm": ESMode.MM_PARAM, "lowrank": ESMode.MM_PARAM,
               "mm_param": ESMode.MM_PARAM, "emb": ESMode.EMB_PARAM, "emb_param": ESMode.EMB_PARAM,
               "excluded": ESMode.EXCLUDED, "frozen": ESMode.EXCLUDED}


def parse_mode(mode) -> ESMode:
    if isinstance(mode, ESMode):
        return mode
    if isinstance(mode, int) and mode in ESMode._value2member_map_:
        return ESMode(mode)
    if isinstance(mode, str) and mode.lower() in _MODE_NAMES:
        return _MODE_NAMES[mode.lower()]
    raise ValueError(f"unknown es_map mode {mode!r}; use one of {sorted(_MODE_NAMES)} or an ESMode")


def owned_parameters(model: nn.Module):
    """(module, attribute, canonical name, parameter) for every direct parameter; tied ones once each."""
    canonical = {}
    for name, p in model.named_parameters():
        canonical.setdefault(id(p), name)
    for mod_name, mod in model.named_modules():
        for attr, p in mod._parameters.items():
            if p is not None:
                yield mod, attr, canonical[id(p)], p


def default_mode(module: nn.Module, attr: str, p) -> ESMode:
    if not p.requires_grad:
        return ESMode.EXCLUDED
    if attr == "weight" and isinstance(module, nn.Linear):
        return ESMode.MM_PARAM
    if attr == "weight" and isinstance(module, nn.Embedding):
        return ESMode.EMB_PARAM
    return ESMode.PARAM


def derive_specs(model: nn.Module, overrides: dict | None = None) -> dict[str, ParamSpec]:
    """One ParamSpec per canonical parameter name; ``overrides`` maps glob patterns to modes."""
    overrides = {k: parse_mode(v) for k, v in (overrides or {}).items()}
    specs: dict[str, ParamSpec] = {}
    for mod, attr, name, p in owned_parameters(model):
        if name in specs:
            continue
        mode = default_mode(mod, attr, p)
        for pattern, m in overrides.items():
            if fnmatchcase(name, pattern):
                mode = m
        if mode in (ESMode.MM_PARAM, ESMode.EMB_PARAM) and p.dim() != 2:
            raise ValueError(f"{name}: mode {mode.name} needs a 2-D tensor, got shape {tuple(p.shape)}")
        specs[name] = ParamSpec(name, tuple(p.shape), mode)
    unmatched = [k for k in overrides if not any(fnmatchcase(n, k) for n in specs)]
    if unmatched:
        raise ValueError(f"es_map patterns {unmatched} match no parameter; names are e.g. {list(specs)[:5]}")
    return specs
