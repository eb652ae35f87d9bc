"""The population matmul every matrix layer shares: x (W + E_i)ᵀ + (b + e_i) for each member.

Linear, transformers' Conv1D, attention projections and recurrent cells all reduce to
this one function, so the low-rank path (a per-step plan, blocks of pairs, the bias and
perturbation written first and the base GEMM accumulated onto them) and the dense
OpenES path exist once. W is stored (out, in) and used as x Wᵀ (``"out_in"``, Linear) or
stored (in, out) and used as x W (``"in_out"``, Conv1D); noise is always drawn in the
stored orientation, A (K, rows, r) and B (K, cols, r), so E = A Bᵀ has W's shape.

Dimensions: K pairs, M rows per member, r rank.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ...ops.fullrank import do_mm_dense
from ...ops.lowrank_linear import lowrank_term_into
from ...ops.lowrank_plan import LowrankPlan, lowrank_plan, plan_linear
from ...ops.member import add_vector_noise
from .base import PopulationContext


def population_linear(ctx: PopulationContext, x: Tensor, weight: Tensor, wname: str | None,
                      bias: Tensor | None = None, bname: str | None = None, stored: str = "out_in",
                      rows: slice | None = None, what: str = "Linear") -> Tensor:
    """x (..., in) -> (..., out): every member's perturbed affine map, member-major rows.

    ``rows`` keeps only these output features (a slice of W's out dimension, e.g. the q
    part of a packed q/k/v projection): the factors and noise are sliced alike.
    """
    if stored not in ("out_in", "in_out"):
        raise ValueError(f"stored must be 'out_in' or 'in_out', got {stored!r}")
    ctx.check_rows(x, what)
    w = weight if stored == "out_in" else weight.t()  # (out, in) view
    b = bias
    if rows is not None:
        w = w[rows]
        b = None if bias is None else bias[rows]
    dout, din = w.shape
    x2 = x.reshape(-1, din)
    if wname is not None and ctx.store.is_lowrank(wname):
        y = _lowrank(ctx, x2, w, wname, b, bname, stored, rows)
    else:
        y = _dense(ctx, x2, w, wname, b, stored, rows)
        if bname is not None:
            bn = ctx.noise(bname)
            y = add_vector_noise(y, bn.eps if rows is None else bn.eps[:, rows], bn.signs, bn.scale)
    return y.view(*x.shape[:-1], dout)


def linear_forward(ctx: PopulationContext, module, wname: str | None, bname: str | None, stored: str = "out_in",
                   what: str = "Linear"):
    """The forward of a one-matrix module (``module.weight``, ``module.bias``) for this block's members.

    It runs :func:`population_linear` until the layer's step plan is resolved (its second call
    in a block: a generate's first decoded token), then a direct path that holds the plan, the
    weight view and the sizes: a generate calls each layer once per token, and looking these up
    again cost more than the perturbation's own kernels (measured 60-90 µs of 150-390 µs per call
    for a 256-wide layer at 32 rows on one CPU thread). The direct path checks what could have
    changed in the block (the parameters' identity, the bias version, the dtype, the rows) and
    falls back to the general one when anything differs.
    """
    direct = {}

    def forward(x: Tensor) -> Tensor:
        run = direct.get(x.dtype)
        if run is not None:
            y = run(x)
            if y is not None:
                return y
        y = population_linear(ctx, x, module.weight, wname, module.bias, bname, stored, what=what)
        if run is None and wname is not None and ctx.store.is_lowrank(wname):
            run = _direct_lowrank(ctx, module, wname, bname, stored, x.dtype, what)
            if run is not None:
                direct[x.dtype] = run
        return y

    return forward


def _direct_lowrank(ctx, module, wname, bname, stored, dtype, what):
    """The resolved-plan path of :func:`linear_forward`, or None while the plan is not cached."""
    weight, bias = module.weight, module.bias
    version = None if bias is None else bias._version
    plan = ctx.plans.get(_plan_key(wname, bname, stored, None, dtype, bias))
    if plan is None:
        return None
    params = module._parameters
    w = weight if stored == "out_in" else weight.t()
    wt = w.t()
    dout, din = w.shape

    def run(x: Tensor) -> Tensor | None:
        if params.get("weight") is not weight or params.get("bias") is not bias \
                or (bias is not None and bias._version != version):
            return None  # the module changed inside the block: the general path rebuilds
        ctx.check_rows(x, what)
        return plan_linear(x.reshape(-1, din), wt, plan).view(*x.shape[:-1], dout)

    return run


def _dense(ctx, x2, w, wname, b, stored, rows) -> Tensor:
    """x (W + s·σ·E)ᵀ + b with dense (K, out, in) noise (OpenES), or the plain map if W is not perturbed."""
    if wname is None:
        return F.linear(x2, w, b)
    wn = ctx.noise(wname)
    eps = wn.eps if stored == "out_in" else wn.eps.transpose(1, 2)  # (K, out, in)
    return do_mm_dense(x2, w, eps if rows is None else eps[:, rows], wn.signs, wn.scale, b)


def _factors(noise, stored: str, rows: slice | None) -> tuple[Tensor, Tensor]:
    """(x_factor (K, in, r), y_factor (K, out, r)) of a draw, for W used as x Wᵀ."""
    x_factor, y_factor = (noise.b, noise.a) if stored == "out_in" else (noise.a, noise.b)
    return x_factor, (y_factor if rows is None else y_factor[:, rows])


def _lowrank(ctx, x2, w, wname, b, bname, stored, rows) -> Tensor:
    """Bias and perturbation written first, then the base GEMM accumulates onto them (no pass
    over the output after the GEMM)."""
    dout, din = w.shape
    plan = _chunk_plan(ctx, wname, bname, b, stored, rows, x2.dtype)
    if plan is not None:
        return plan_linear(x2, w.t(), plan)
    y = torch.empty(x2.shape[0], dout, dtype=x2.dtype, device=x2.device)
    ctx.store.mark_applied(wname, bname)
    m = x2.shape[0] // ctx.members  # rows per member
    r = ctx.pop.rank
    # per pair: its draw (din + dout)·r, the copied Bᵀ (din·r) and [Aᵀ; e; b] ((r+2)·dout),
    # and the (2M, r+2) left factor with its scaled u
    per_pair = 4 * ((din + dout) * r + din * r + (r + 2) * dout + 2 * 2 * m * (r + 2))
    for k0, k1 in ctx.pair_blocks(per_pair):
        g = ctx.pop.per_draw
        sl = slice(g * k0 * m, g * k1 * m)
        wn = ctx.noise(wname, k0, k1)
        bn = ctx.noise(bname, k0, k1) if bname else None
        xf, yf = _factors(wn, stored, rows)
        be = None if bn is None else (bn.eps if rows is None else bn.eps[:, rows])
        lowrank_term_into(y[sl], x2[sl], xf, yf, wn.signs, wn.scale, b, be, bn.scale if bn else 0.0)
    y.addmm_(x2, w.t())
    return y


def _plan_key(wname, bname, stored, rows, dtype, b) -> tuple:
    """Where a block keeps a layer's plan: per parameter, orientation, output rows, dtype and bias version."""
    return ("linear-plan", wname, bname, stored, None if rows is None else (rows.start, rows.stop), dtype,
            None if b is None else b._version)


def _chunk_plan(ctx, wname, bname, b, stored, rows, dtype) -> LowrankPlan | None:
    """The step's plan (:func:`_step_plan`) cut to this block's pairs, resolved once per
    ``perturbation`` block: a generate calls each layer once per decoded token, and looking the
    plan up and slicing it cost about as much as the layer's perturbation itself."""
    key = _plan_key(wname, bname, stored, rows, dtype, b)
    plan = ctx.plans.get(key)
    if plan is None:
        plan = _step_plan(ctx, key, wname, bname, b, stored, rows, dtype)
        if plan is None:
            return None
        ctx.store.mark_applied(wname, bname)  # once per block: a cached plan has been marked already
        p0 = ctx.lo // ctx.pop.per_draw
        plan = ctx.plans[key] = plan.slice(p0, p0 + ctx.k)
    return plan


def _step_plan(ctx, key, wname, bname, b, stored, rows, dtype) -> LowrankPlan | None:
    """The layer's whole-population GEMM plan for this step, made once (on its second use, or
    its first in a ``repeated`` block) and kept in the store while it fits the budget; None
    past it: build per call."""
    store = ctx.store
    wn = store.cached(wname)
    bn = store.cached(bname) if bname else None
    if wn is None or (bname and bn is None):
        return None
    xf, yf = _factors(wn, stored, rows)
    k, din, r = xf.shape
    dout = yf.shape[1]
    be = None if bn is None else (bn.eps if rows is None else bn.eps[:, rows])
    nbytes = 4 * k * (r * din + (r + 4) * dout)  # an upper bound for either plan layout
    return store.memo(key, nbytes, lambda: lowrank_plan(xf, yf, wn.signs, wn.scale, be,
                                                         bn.scale if bn else 0.0, b, dtype),
                      first_use=ctx.repeated)
