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

from ..ops.int8 import QMAX, clip8, egg_divisor, floor_div, int_matmul, mean_abs_norm

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
        """Accumulator (int64) -> output; ``bias`` (out,) or per member, broadcast against acc."""
        y = floor_div(acc, self.divisor)
        if bias is not None:
            y = y + bias.to(torch.int64)
        return clip8(y) if self.saturate else y

    def forward(self, x: Tensor) -> Tensor:
        return self.finish(int_matmul(x, self.weight), self.bias)

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
            return floor_div(int_matmul(x, self.weight), self.head_divisor)
        return self.weight[x]


class Int8Bias(nn.Module):
    """acc + b in int64 (no saturation: the caller sums, then clips)."""

    hs_layer = "int8_bias"

    def __init__(self, n: int):
        super().__init__()
        self.weight = int8_parameter(n, fill=0)

    def forward(self, acc: Tensor) -> Tensor:
        return acc.to(torch.int64) + self.weight.to(torch.int64)


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
        return clip8(mean_abs_norm(x, w.to(torch.int64), None if b is None else b.to(torch.int64), self.rounding))

    def forward(self, x: Tensor) -> Tensor:
        return self.finish(x, self.weight, self.bias)


__all__ = ["INITS", "Int8Bias", "Int8Embedding", "Int8Linear", "Int8Norm", "int8_parameter", "vector_groups"]
