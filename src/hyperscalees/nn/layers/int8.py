"""Population layers of the integer blocks (``models/int8_modules.py``), matched by ``hs_layer``.

``nn`` sits below ``models`` and may not import it, so each layer is registered for a
predicate on the module's ``hs_layer`` tag rather than for a class. Every layer keeps the
block's integer semantics and adds each member's perturbation as integers:

- matrices (``int8_linear``, the tied head of ``int8_embedding``): the shared int8 GEMM plus
  the member's low-rank term round_shift(s (x B) Aᵀ, k) in the accumulator, *before* the
  block's scaled division (``ops.int8.lowrank_term``); never a loop over members;
- table lookups: row t of member i is clip(E[t] + round_shift(s A[t] Bᵀ, k)), drawing only the
  looked-up rows of A;
- vectors (biases, norm gains): clip(v + round_shift(s ε, k)) per member.

The noise must take integer values (``distribution="int"`` or ``"int_uniform"``) and its scale
(σ · sigma_scale / √rank) must be 2^-k: both are checked, with the fix named. Per-row/column
overlays of the step (``NoiseStore.overlay``: adaptive noise scaling) scale the drawn factors,
truncated back to integers, before any of this.

Dimensions: K pairs, R rows per member, inputs member-major along dim 0.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from ...noise.distributions import INTEGER_DISTRIBUTIONS, INTEGER_MAX
from ...noise.draw import Noise
from ...ops.int8 import acc_bound, acc_dtype, clip8, floor_div_float_, lowrank_term, matmul_acc, member_vector, round_shift_float_, shift_of
from .base import AbstractLayer, PopulationContext


def tagged(tag: str):
    return lambda m: getattr(m, "hs_layer", None) == tag


def int_noise(ctx: PopulationContext, name: str, rows: Tensor | None = None) -> tuple[Noise, int]:
    """The noise of ``name`` for this slice (or only ``rows`` of it) and its shift k."""
    if ctx.pop.distribution not in INTEGER_DISTRIBUTIONS:
        raise ValueError(f"{name}: integer layers need integer-valued noise, got distribution "
                         f"{ctx.pop.distribution!r}; use one of {INTEGER_DISTRIBUTIONS}")
    n = ctx.noise(name) if rows is None else ctx.rows(name, rows)
    overlay = ctx.store.overlay(name)
    if overlay is not None:
        n = scaled_noise(n, overlay, rows)
    return n, shift_of(ctx.store.scale(name), name)


def scaled_noise(n: Noise, overlay: tuple, rows: Tensor | None) -> Noise:
    """Adaptive noise scaling: trunc(A·f_row), trunc(B·f_col) (ε: trunc(ε·f)), integers again.

    ``rows`` (K, N) are the looked-up rows when ``n`` holds only those rows of A.
    """
    f_row, f_col = overlay
    if n.lowrank:
        fr = (f_row if rows is None else f_row[rows.long()]).unsqueeze(-1)   # (rows | K·N, 1)
        a, b = (n.a * fr).trunc(), (n.b * f_col.unsqueeze(-1)).trunc() if f_col is not None else n.b
        return Noise(n.signs, n.sigma, n.scale, a=a, b=b)
    f = f_row if f_col is None else f_row[:, None] * f_col[None, :]
    if rows is not None:
        f = f[rows.long()]
    return Noise(n.signs, n.sigma, n.scale, eps=(n.eps * f).trunc())


def dense_term(x: Tensor, eps: Tensor, signs: Tensor, k: int) -> Tensor:
    """round_shift(s x εᵀ, k) for full-rank noise ε (K, out, in) (OpenES): float64, exact."""
    (kp, g), fan_in = signs.shape, x.shape[-1]
    xk = x.reshape(kp, g, -1, fan_in).to(torch.float64) * signs.to(torch.float64).view(kp, g, 1, 1)
    z = xk @ eps.to(torch.float64).transpose(1, 2).unsqueeze(1)               # (K, 2, R, out)
    return round_shift_float_(z, k).view(*x.shape[:-1], eps.shape[1])


def weight_once(module: nn.Module):
    """The module's weight in its exact float dtype, converted on first use within one perturbed block
    (weights do not change inside it; a recurrent matrix is called every token)."""
    held = []

    def get() -> Tensor:
        if not held:
            held.append(module.weight.to(acc_dtype(module.weight.shape[1])))
        return held[0]
    return get


def matrix_term(ctx: PopulationContext, x: Tensor, name: str) -> Tensor:
    """The members' perturbation of x Wᵀ, in a float dtype that holds it plus x Wᵀ exactly."""
    n, k = int_noise(ctx, name)
    if n.lowrank:
        return lowrank_term(x, n.a, n.b, n.signs, k, b_max=INTEGER_MAX[ctx.pop.distribution],
                            acc_max=acc_bound(x.shape[-1]))
    return dense_term(x, n.eps, n.signs, k)


def per_member(ctx: PopulationContext, v: Tensor | None, name: str | None) -> Tensor | None:
    """(K, 2, 1, n) member values of a vector, or the vector itself when it is not perturbed."""
    if v is None or name is None:
        return v
    n, k = int_noise(ctx, name)
    return member_vector(v, n.eps, n.signs, k)


def by_member(ctx: PopulationContext, y: Tensor) -> Tensor:
    """(P·R.., n) -> (K, 2, R.., n) view for per-member vectors to broadcast against."""
    return y.reshape(ctx.k, ctx.pop.per_draw, -1, y.shape[-1])


class Int8LinearLayer(AbstractLayer):
    def params(self, module):
        return ("weight", "bias")

    def lowrank(self, module):
        return {"weight": "out_in"}

    def forward(self, ctx: PopulationContext, module: nn.Module, active: dict[str, str]):
        wname, bname = active.get("weight"), active.get("bias")
        weight = weight_once(module)

        def forward(x):
            ctx.check_rows(x, "Int8Linear")
            acc = matmul_acc(x, weight())
            if wname is not None:
                acc = matrix_term(ctx, x, wname).add_(acc)                      # exact: see lowrank_term
            bias = per_member(ctx, module.bias, bname)
            return module.finish(by_member(ctx, acc), bias).view(acc.shape)
        return forward


class Int8EmbeddingLayer(AbstractLayer):
    def params(self, module):
        return ("weight",)

    def lowrank(self, module):
        return {"weight": "rows"}

    def forward(self, ctx: PopulationContext, module: nn.Module, active: dict[str, str]):
        name = active["weight"]
        base = type(module).forward
        weight = weight_once(module)

        def forward(x, head=False):
            ctx.check_rows(x, "Int8Embedding")
            if head:
                acc = matrix_term(ctx, x, name).add_(matmul_acc(x, weight()))
                return floor_div_float_(acc, module.head_divisor).to(torch.int64)
            y = base(module, x).to(torch.float64)                                 # (P·R, T.., D)
            n, k = int_noise(ctx, name, x.reshape(ctx.k, -1))
            if n.lowrank:
                z = (n.a.to(torch.float64) @ n.b.to(torch.float64).transpose(1, 2))  # (K, 2·R·T, D)
            else:
                z = n.eps.to(torch.float64)
            g = n.signs.shape[1]
            z = z.view(ctx.k, g, -1, y.shape[-1]) * n.signs.to(torch.float64).view(ctx.k, g, 1, 1)
            return clip8(round_shift_float_(z, k).view_as(y).add_(y))
        return forward


class Int8BiasLayer(AbstractLayer):
    def params(self, module):
        return ("weight",)

    def forward(self, ctx: PopulationContext, module: nn.Module, active: dict[str, str]):
        def forward(acc):
            ctx.check_rows(acc, "Int8Bias")
            b = per_member(ctx, module.weight, active.get("weight"))
            return (by_member(ctx, acc.to(torch.float32)) + b.to(torch.float32)).view(acc.shape)
        return forward


class Int8NormLayer(AbstractLayer):
    def params(self, module):
        return ("weight", "bias")

    def forward(self, ctx: PopulationContext, module: nn.Module, active: dict[str, str]):
        def forward(x):
            ctx.check_rows(x, "Int8Norm")
            w = per_member(ctx, module.weight, active.get("weight"))
            b = per_member(ctx, module.bias, active.get("bias"))
            return module.finish(by_member(ctx, x), w, b).view(x.shape)
        return forward


INT8_LAYERS = {"int8_linear": Int8LinearLayer, "int8_embedding": Int8EmbeddingLayer, "int8_bias": Int8BiasLayer,
               "int8_norm": Int8NormLayer}

__all__ = ["INT8_LAYERS", "Int8BiasLayer", "Int8EmbeddingLayer", "Int8LinearLayer", "Int8NormLayer", "tagged"]
