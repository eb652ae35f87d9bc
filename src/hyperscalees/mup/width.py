"""Which dimensions of each parameter are widths, and how far each moved from the base width.

muP's rules need, per parameter, whether its fan-in and its fan-out grow with width and by
what factor relative to the base width where hyper-parameters were tuned. That is a
:class:`ParamWidth`. Two ways produce them:

- :func:`compare_widths` (the project's own models, width a constructor argument): build the
  model at the base width and at the target width; every dimension that differs is a width.
- ``change_width`` (``mup/resize.py``, any model): widths are written as multiples of a marker
  prime, and every dimension divisible by it is a width.

Which dimension is a fan-in and which a fan-out depends on the module (a Linear weight is
(out, in), a Conv weight (out, in/groups, *kernel), an Embedding table (rows, d)), so the
fans come from a registry keyed by module type, not from "the last dimension" -- that rule
gives a Conv its kernel width as fan-in (ezmup's conv bug).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from ..nn.es_map import owned_parameters

# kind: how the parameter's dimensions scale, which decides every muP rule
KINDS = ("fixed", "input", "hidden", "output")


@dataclass(frozen=True)
class Fans:
    """Dimension indices of a parameter: ``out`` and ``into`` (its fan-out and fan-in) and ``fixed``
    (never widths, e.g. a conv kernel or an embedding's row count)."""
    out: tuple[int, ...] = ()
    into: tuple[int, ...] = ()
    fixed: tuple[int, ...] = ()
    readout_ok: bool = False  # can a width fan-in with a fixed fan-out be a readout (Linear, Conv)?


@dataclass(frozen=True)
class ParamWidth:
    """One parameter's width scaling relative to the base width.

    ``fan_in_mult`` / ``fan_out_mult``: its fan-in / fan-out over theirs at the base width (1.0
    where that fan holds no width dimension)."""
    name: str
    kind: str
    fan_in_mult: float = 1.0
    fan_out_mult: float = 1.0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"{self.name}: kind must be one of {KINDS}, got {self.kind!r}")


def _linear(mod, attr, ndim):
    return Fans(out=(0,), into=(1,), readout_ok=True) if ndim == 2 else Fans(out=(0,))


def _conv(mod, attr, ndim):
    if ndim == 1:                                   # bias (out,)
        return Fans(out=(0,))
    kernel = tuple(range(2, ndim))                   # (out, in/groups, *k); transposed: (in, out/groups, *k)
    first, second = ((1,), (0,)) if getattr(mod, "transposed", False) else ((0,), (1,))
    return Fans(out=first, into=second, fixed=kernel, readout_ok=True)


def _hf_conv1d(mod, attr, ndim):                     # transformers' Conv1D stores (in, out)
    return Fans(out=(1,), into=(0,), readout_ok=True) if ndim == 2 else Fans(out=(0,))


def _embedding(mod, attr, ndim):                     # (rows, d): a lookup has fan-in 1 (one-hot)
    return Fans(out=(1,), fixed=(0,))


def _vector(mod, attr, ndim):                        # norm gains/biases, biases: every dim is a fan-out
    return Fans(out=tuple(range(ndim)))


def _mha(mod, attr, ndim):                           # in_proj_weight (3d, d), in_proj_bias (3d,), bias_k (1, 1, d)
    if attr.endswith("proj_weight"):
        return Fans(out=(0,), into=(1,))
    return Fans(out=tuple(range(ndim)))


def _default(mod, attr, ndim):
    """Custom parameters: a vector, or a matrix used as (out, in); never a readout (its role is
    unknown, so one width dimension reads as input-like, two as hidden)."""
    return Fans(out=tuple(range(ndim))) if ndim < 2 else Fans(out=tuple(range(ndim - 1)), into=(ndim - 1,))


def _is_hf_conv1d(mod) -> bool:
    return type(mod).__name__ == "Conv1D" and hasattr(mod, "nf")


# (predicate, fans) in order; the first match wins. Extend with register_fans.
FANS: list[tuple[Callable[[nn.Module], bool], Callable]] = [
    (lambda m: isinstance(m, nn.Linear), _linear),
    (lambda m: isinstance(m, nn.modules.conv._ConvNd), _conv),
    (_is_hf_conv1d, _hf_conv1d),
    (lambda m: isinstance(m, (nn.Embedding, nn.EmbeddingBag)), _embedding),
    (lambda m: isinstance(m, (nn.LayerNorm, nn.RMSNorm, nn.GroupNorm, nn.modules.batchnorm._NormBase)), _vector),
    (lambda m: isinstance(m, nn.MultiheadAttention), _mha),
]


def register_fans(predicate: Callable[[nn.Module], bool], fans: Callable) -> None:
    """Teach the width analysis a module type: ``fans(module, attr, ndim) -> Fans``; consulted first."""
    FANS.insert(0, (predicate, fans))


def fans_of(mod: nn.Module, attr: str, ndim: int) -> Fans:
    for predicate, fans in FANS:
        if predicate(mod):
            return fans(mod, attr, ndim)
    return _default(mod, attr, ndim)


def classify(name: str, fans: Fans, ratios: dict[int, float]) -> ParamWidth:
    """ParamWidth from a parameter's fans and {width dim: new size / base size}."""
    def mult(dims):
        m = 1.0
        for d in dims:
            m *= ratios.get(d, 1.0)
        return m

    wide_in = any(d in ratios for d in fans.into)
    wide_out = any(d in ratios for d in fans.out)
    if wide_in and wide_out:
        kind = "hidden"
    elif wide_in:
        kind = "output" if fans.readout_ok else "hidden" if len(ratios) > 1 else "input"
    elif wide_out:
        kind = "input"
    else:
        kind = "fixed"
    return ParamWidth(name, kind, mult(fans.into), mult(fans.out))


def named_owned(model: nn.Module):
    """``nn.es_map.owned_parameters``, each tied parameter once: at its first owner, which decides
    its fans as it decides its ES mode."""
    seen = set()
    for mod, attr, name, p in owned_parameters(model):
        if name not in seen:
            seen.add(name)
            yield mod, attr, name, p


def compare_widths(base: nn.Module, model: nn.Module) -> dict[str, ParamWidth]:
    """{name: ParamWidth} of ``model`` relative to ``base``, the same architecture at the base width
    (the constructor path: ``TinyLM(d=64)`` and ``TinyLM(d=1024)``). Every dimension whose size
    differs is a width; a dimension the module says is fixed must not differ."""
    base_params = {name: p for _, _, name, p in named_owned(base)}
    out = {}
    for mod, attr, name, p in named_owned(model):
        if name not in base_params:
            raise ValueError(f"{name} is not a parameter of the base model: the two must share an architecture")
        b = base_params[name]
        if b.dim() != p.dim():
            raise ValueError(f"{name} has {p.dim()} dims but {b.dim()} in the base model")
        fans = fans_of(mod, attr, p.dim())
        ratios = {d: p.shape[d] / b.shape[d] for d in range(p.dim()) if p.shape[d] != b.shape[d]}
        bad = [d for d in ratios if d in fans.fixed]
        if bad:
            raise ValueError(f"{name}: dim {bad[0]} changed ({b.shape[bad[0]]} -> {p.shape[bad[0]]}) but "
                             f"{type(mod).__name__} holds a fixed size there")
        out[name] = classify(name, fans, ratios)
    return out


def is_constant(t: torch.Tensor) -> bool:
    """All entries equal (norm gains of ones, zero biases, fresh running statistics)."""
    return t.numel() == 0 or bool((t == t.reshape(-1)[0]).all())
