"""``change_width(model, w)``: rebuild a marker-width model at width ``w`` without touching its code.

The model is written with every width a multiple of a marker prime (47): ``hidden = 47 * 8``,
``head_dim = 47``. Every parameter and buffer dimension divisible by the marker is a width:
47·k becomes w·k. Module attributes the forward reads (``in_features``, ``normalized_shape``,
``num_heads``, ``head_dim``, a user's ``self.hidden = 47 * 4``) are int or int-tuple attributes
divisible by the marker, rescaled the same way. The first call records the marker-width
model; every later call starts again from that record, so ``change_width(m, 32)`` then
``change_width(m, 1024)`` is the same as the second call alone.

A rebuilt tensor keeps its dtype (built in fp32, cast once: bf16 works), device,
``requires_grad`` and ties (one new Parameter installed in every owner). Its values:
constant tensors (norm gains, zero biases, running statistics) stay that constant; others
are drawn afresh with the marker model's mean and its std times the muP init scale
(``rules.init_scale``: std·√fan-in held constant). A non-constant buffer (a rotary table,
a mask) has no generic rebuild: pass ``init={name: fn(shape) -> tensor}``.

Call it before building an optimizer or an ES facade, and before loading a checkpoint
trained at that width: the old Parameter objects are replaced.
"""
from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Callable

import torch
from torch import nn

from .rules import init_scale
from .width import ParamWidth, classify, fans_of, is_constant, named_owned

MARKER = 47
SKIP_ATTRS = {"training"}


def _new_shape(shape, marker: int, width: int, wide: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(width * (d // marker) if i in wide else d for i, d in enumerate(shape))


def _record(model: nn.Module, marker: int, fixed: dict) -> dict:
    """What the marker-width model looked like: tensors (shape, dtype, values summary) and attributes."""
    tensors, attrs = {}, {}
    for mod, attr, name, p in named_owned(model):
        fans = fans_of(mod, attr, p.dim())
        user_fixed = tuple(d for pat, dims in fixed.items() if fnmatchcase(name, pat) for d in dims)
        wide = tuple(d for d in range(p.dim()) if p.shape[d] % marker == 0)
        for d in wide:
            if d in fans.fixed or d in user_fixed:
                raise ValueError(f"{name}: dim {d} (size {p.shape[d]}) is divisible by the width marker {marker} "
                                 f"but is not a width ({type(mod).__name__} holds a fixed size there). Choose "
                                 "sizes that are not multiples of the marker, or another marker prime")
        tensors[name] = _summary(p, wide, fans)
    for mod_name, mod in model.named_modules():
        for attr, b in mod._buffers.items():
            if b is not None:
                name = f"{mod_name}.{attr}" if mod_name else attr
                wide = tuple(d for d in range(b.dim()) if b.shape[d] % marker == 0)
                tensors.setdefault(name, _summary(b, wide, None))
        for attr, v in vars(mod).items():
            if attr.startswith("_") or attr in SKIP_ATTRS:
                continue
            if _marked_int(v, marker) or (isinstance(v, tuple) and v and all(isinstance(x, int) for x in v)
                                          and any(_marked_int(x, marker) for x in v)):
                attrs[(mod_name, attr)] = v
    return {"marker": marker, "tensors": tensors, "attrs": attrs}


def _marked_int(v, marker: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0 and v % marker == 0


def _summary(t: torch.Tensor, wide, fans) -> dict:
    f = t.detach().float()
    const = is_constant(f)
    return {"shape": tuple(t.shape), "wide": wide, "fans": fans, "constant": f.reshape(-1)[0].item() if const
            and f.numel() else None, "mean": f.mean().item() if f.numel() else 0.0,
            "std": f.std().item() if f.numel() > 1 else 0.0}


def change_width(model: nn.Module, width: int, marker: int = MARKER, base_width: int | None = None,
                 init: dict[str, Callable] | None = None, fixed: dict[str, tuple[int, ...]] | None = None,
                 seed: int = 0) -> dict[str, ParamWidth]:
    """Rebuild ``model`` (written at marker width) at ``width``; {name: ParamWidth} relative to
    ``base_width`` (default: the marker), for ``rules.mup_groups``.

    ``fixed``: {name pattern: dims} that are never widths, refused if divisible by the marker
    (an Embedding's rows and a conv's kernel are known already). ``init``: {name pattern:
    fn(shape) -> fp32 tensor} for tensors with their own construction (rotary tables)."""
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ValueError(f"width must be a positive integer, got {width!r}")
    base_width = marker if base_width is None else base_width
    if base_width < 1:
        raise ValueError(f"base_width must be a positive integer, got {base_width!r}")
    record = model.__dict__.get("_mup_record")
    if record is None or record["marker"] != marker:
        record = _record(model, marker, fixed or {})
        model.__dict__["_mup_record"] = record
    gen = torch.Generator().manual_seed(seed)
    rebuilt: dict[int, torch.Tensor] = {}   # id(old tensor) -> new one: ties stay tied
    widths = {}
    with torch.no_grad():
        for mod_name, mod in model.named_modules():
            for store in (mod._parameters, mod._buffers):
                for attr, old in list(store.items()):
                    if old is None:
                        continue
                    name = f"{mod_name}.{attr}" if mod_name else attr
                    if id(old) not in rebuilt:
                        canonical = _canonical(record, name, old)
                        rebuilt[id(old)] = _rebuild(old, canonical, record["tensors"][canonical], marker, width,
                                                    init or {}, gen, store is mod._parameters)
                    store[attr] = rebuilt[id(old)]
        for (mod_name, attr), v in record["attrs"].items():
            mod = model.get_submodule(mod_name)
            new = tuple(_scale_int(x, marker, width) for x in v) if isinstance(v, tuple) else \
                _scale_int(v, marker, width)
            object.__setattr__(mod, attr, new)
    for mod, attr, name, p in named_owned(model):
        rec = record["tensors"].get(name) or record["tensors"][_canonical(record, name, p)]
        base = _new_shape(rec["shape"], marker, base_width, rec["wide"])
        ratios = {d: p.shape[d] / base[d] for d in rec["wide"]}
        widths[name] = classify(name, fans_of(mod, attr, p.dim()), ratios)
    return widths


def _scale_int(x: int, marker: int, width: int) -> int:
    return width * (x // marker) if _marked_int(x, marker) else x


def _canonical(record: dict, name: str, t: torch.Tensor) -> str:
    """A tensor's name in the record (a tied parameter is recorded under its first owner's name)."""
    if name in record["tensors"]:
        return name
    raise KeyError(f"{name} was not in the model when change_width first saw it; build the model fully first")


def _rebuild(old: torch.Tensor, name: str, rec: dict, marker: int, width: int, init: dict, gen,
             is_param: bool) -> torch.Tensor:
    shape = _new_shape(rec["shape"], marker, width, rec["wide"])
    if not rec["wide"]:
        return old
    custom = [fn for pat, fn in init.items() if fnmatchcase(name, pat)]
    if custom:
        new = torch.as_tensor(custom[-1](shape), dtype=torch.float32)
        if tuple(new.shape) != shape:
            raise ValueError(f"init for {name} returned shape {tuple(new.shape)}, expected {shape}")
    elif rec["constant"] is not None:
        new = torch.full(shape, rec["constant"])
    elif not is_param:
        raise ValueError(f"buffer {name} {rec['shape']} has width dims and is not constant, so it has no generic "
                         f"rebuild; pass init={{{name!r}: fn(shape) -> tensor}}")
    else:
        ratios = {d: shape[d] / rec["shape"][d] for d in rec["wide"]}
        scale = init_scale(classify(name, rec["fans"], ratios))
        new = rec["mean"] + rec["std"] * scale * torch.randn(shape, generator=gen)
    new = new.to(device=old.device, dtype=old.dtype)
    if is_param:
        return nn.Parameter(new, requires_grad=old.requires_grad)
    return new
