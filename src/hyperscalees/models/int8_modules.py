"""Integer building blocks of the int8 models: ordinary ``nn.Module``s over int8 parameters.

Each block's forward is the unperturbed integer computation (``ops/int8.py`` says every
rounding). How a block runs a whole ES population lives in ``nn/layers/int8.py``. The two
cannot import each other -- ``models`` may not import ``nn``, and ``nn`` sits below
``models`` (tests/test_layering.py) -- so a block names its population layer by a class
attribute, ``hs_layer``, and ``nn/layers/int8.py`` registers one layer per tag with a
predicate on that attribute. A user's module with the same tag and attributes runs through
the same layer. The population layer calls the block's own ``finish`` after adding each
member's perturbation, so the two paths share every step after the accumulator.

Parameters are int8 with ``requires_grad=False``; integer tensors evolve by default (es_map).
Initialisation follows nano-egg: matrices and tables round(16·N(0,1)), norm gains 16 (1.0 in
4-bit fixed point), biases 0; values are saturated to [-127, 127].
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from ..ops.int8 import QMAX, acc_dtype, clip8, egg_divisor, floor_div_float_, matmul_acc, mean_abs_norm

_ROUNDINGS = ("floor", "trunc")


INITS = ("normal", "uniform")


def int8_parameter(*shape: int, fill: int | None = None, init: str = "normal") -> nn.Parameter:
    """An int8 parameter: ``fill`` everywhere, else ``init``: round(16·N(0,1)) saturated to ±127
    (nano-egg) or uniform integers in [-15, 15] (d-eggs)."""
    if fill is not None:
        data = torch.full(shape, fill, dtype=torch.int8)
    elif init == "normal":
        data = torch.randn(shape).mul_(16.0).round_().clamp_(-QMAX, QMAX).to(torch.int8)
    elif init == "uniform":
        data = torch.randint(-15, 16, shape, dtype=torch.int8)
    else:
        raise ValueError(f"init must be one of {INITS}, got {init!r}")
    return nn.Parameter(data, requires_grad=False)


def vector_groups(model: nn.Module, sigma_scale: float = 16.0) -> list[dict]:
    """One parameter group of the model's 1-D integer parameters (norm gains, biases) at ``sigma_scale``·σ.

    Vectors take full-rank noise ε (std 16 for ``int``) where a matrix's rank-1 term A Bᵀ has
    std 256, so σ is raised 16x for them: perturbations of about one int8 step for both
    (nano-egg's vectors use a product of two table entries for the same reason).
    """
    names = [n for n, p in model.named_parameters() if p.dim() == 1 and not p.is_floating_point()]
    return [{"params": names, "sigma_scale": sigma_scale, "name": "vectors"}] if names else []


def float_weight(module: nn.Module) -> Tensor:
    """``module.weight`` as the float dtype its dot products are exact in, converted once per weight
    version (the recurrent matrices are called every token; the rules bump the version on update)."""
    w = module.weight
    key = (w.data_ptr(), w._version, w.device)
    cached = module.__dict__.get("_float_weight")
    if cached is None or cached[0] != key:
        cached = (key, w.to(acc_dtype(w.shape[1])))
        module.__dict__["_float_weight"] = cached
    return cached[1]


def _check_divisor(divisor: int) -> int:
    if not isinstance(divisor, int) or divisor < 1:
        raise ValueError(f"divisor must be an integer >= 1, got {divisor!r}")
    return divisor


class Int8Linear(nn.Module):
    """y = clip(floor(x Wᵀ / divisor) + b): int8 x int8 accumulated exactly, then scaled.

    ``divisor`` defaults to nano-egg's 16·isqrt(fan_in); ``saturate=False`` returns the int64
    values unclipped (a head's logits). x: (..., fan_in) integers in [-127, 127].
    """

    hs_layer = "int8_linear"

    def __init__(self, fan_in: int, fan_out: int, divisor: int | None = None, bias: bool = False,
                 saturate: bool = True, init: str = "normal"):
        super().__init__()
        self.fan_in, self.fan_out = fan_in, fan_out
        self.weight = int8_parameter(fan_out, fan_in, init=init)
        self.bias = int8_parameter(fan_out, fill=0) if bias else None
        self.divisor = _check_divisor(divisor if divisor is not None else egg_divisor(fan_in))
        self.saturate = saturate

    def finish(self, acc: Tensor, bias: Tensor | None) -> Tensor:
        """Exact accumulator (integer-valued floats, consumed) -> int8 output (int64 unsaturated);
        ``bias`` (out,) or per member, broadcast against acc."""
        y = floor_div_float_(acc, self.divisor)
        if bias is not None:
            y = y.add_(bias.to(y.dtype))
        return y.clamp_(-QMAX, QMAX).to(torch.int8) if self.saturate else y.to(torch.int64)   # y is ours

    def forward(self, x: Tensor) -> Tensor:
        return self.finish(matmul_acc(x, float_weight(self)), self.bias)

    def extra_repr(self) -> str:
        return f"{self.fan_in} -> {self.fan_out}, divisor={self.divisor}, saturate={self.saturate}"


class Int8Embedding(nn.Module):
    """An int8 table (vocab, dim): ``emb(tokens)`` looks rows up; ``emb(h, head=True)`` is the
    tied head floor(h Eᵀ / head_divisor) (int64, unclipped) over the same -- perturbed -- matrix."""

    hs_layer = "int8_embedding"

    def __init__(self, vocab_size: int, dim: int, head_divisor: int = 256, init: str = "normal"):
        super().__init__()
        self.vocab_size, self.dim = vocab_size, dim
        self.weight = int8_parameter(vocab_size, dim, init=init)
        self.head_divisor = _check_divisor(head_divisor)

    def forward(self, x: Tensor, head: bool = False) -> Tensor:
        if head:
            return floor_div_float_(matmul_acc(x, float_weight(self)), self.head_divisor).to(torch.int64)
        return self.weight[x]


class Int8Bias(nn.Module):
    """acc + b as integer-valued float32 (no saturation: the caller sums, then clips)."""

    hs_layer = "int8_bias"

    def __init__(self, n: int):
        super().__init__()
        self.weight = int8_parameter(n, fill=0)

    def forward(self, acc: Tensor) -> Tensor:
        return acc.to(torch.float32) + self.weight.to(torch.float32)


class Int8Norm(nn.Module):
    """Mean-absolute-value norm: clip(div(x·w, max(floor(Σ|x|/D), 1)) (+ b)).

    ``rounding="floor"`` is nano-egg's EGG_LN (no bias); ``"trunc"`` with ``bias=True`` is
    d-eggs' ``apply_standard_norm``. The gain starts at 16 (1.0), so outputs have mean |·| ≈ 16.
    """

    hs_layer = "int8_norm"

    def __init__(self, dim: int, rounding: str = "floor", bias: bool = False):
        super().__init__()
        if rounding not in _ROUNDINGS:
            raise ValueError(f"rounding must be one of {_ROUNDINGS}, got {rounding!r}")
        self.dim, self.rounding = dim, rounding
        self.weight = int8_parameter(dim, fill=16)
        self.bias = int8_parameter(dim, fill=0) if bias else None

    def finish(self, x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
        return clip8(mean_abs_norm(x, w.to(torch.float32), None if b is None else b.to(torch.float32), self.rounding))

    def forward(self, x: Tensor) -> Tensor:
        return self.finish(x, self.weight, self.bias)


__all__ = ["INITS", "float_weight", "Int8Bias", "Int8Embedding", "Int8Linear", "Int8Norm", "int8_parameter", "vector_groups"]
