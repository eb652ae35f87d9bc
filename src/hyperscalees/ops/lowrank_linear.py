"""Population matmuls with rank-r noise, never materializing a per-member matrix.

Dimensions: K antithetic pairs, P = 2K members, M rows per member (batch x tokens),
r rank. Inputs are member-major: rows [i*M, (i+1)*M) of ``x`` belong to member i.
Both members of a pair share one draw, so ``x`` is viewed as (K, 2M, in) and the
factor products run once per pair; the sign is applied to the small (K, 2, M, r) term.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass(frozen=True)
class LowrankPlan:
    """Everything of a layer's perturbation that does not depend on its input.

    ``bt`` (K, r, din) is Bᵀ with unit-stride rows (bmm on a strided view was 4x slower).
    At rank 1 the term is one broadcast multiply-add, out = const + u·a_s, with
    ``a_s`` (K, 2, 1, dout) = each member's sign·scale·Aᵀ and ``const`` (K, 2, 1, dout) =
    its s·vec_scale·e + b (None if neither): faster than any batched GEMM with an inner
    dimension of 1-3 (measured 1.1-12x). At rank > 1 it is a bmm of left (K, 2M, nr) with
    ``right`` (K, nr, dout) = [Aᵀ; e; b], ``s_u``/``s_e`` (K, 1, 2, 1) scaling left's columns.

    Built once, a plan serves every chunk and every call of a step (``slice`` gives a
    chunk's pairs as views), which matters when a small policy runs once per env step.
    """
    bt: Tensor
    a_s: Tensor | None = None
    const: Tensor | None = None
    right: Tensor | None = None
    s_u: Tensor | None = None
    s_e: Tensor | None = None
    with_bias: bool = False

    def slice(self, k0: int, k1: int) -> "LowrankPlan":
        cut = lambda t: None if t is None else t[k0:k1]
        return LowrankPlan(cut(self.bt), cut(self.a_s), cut(self.const), cut(self.right), cut(self.s_u),
                           cut(self.s_e), self.with_bias)


def _as(t: Tensor, dtype: torch.dtype) -> Tensor:
    return t if t.dtype == dtype else t.to(dtype)


def lowrank_plan(x_factor: Tensor, y_factor: Tensor, signs: Tensor, scale: float, vec_noise: Tensor | None = None,
                 vec_scale: float = 0.0, bias: Tensor | None = None, dtype: torch.dtype = torch.float32) -> LowrankPlan:
    """The :class:`LowrankPlan` of s·scale·(x B)Aᵀ (+ s·vec_scale·e) (+ b)."""
    k, _, r = x_factor.shape
    bt = _as(x_factor, dtype).transpose(1, 2).contiguous()
    s = _as(signs, dtype).view(k, 2, 1, 1)
    if r == 1:
        const = None
        if vec_noise is not None:
            const = s * vec_scale * _as(vec_noise, dtype).view(k, 1, 1, -1)
        if bias is not None:
            b = _as(bias, dtype).view(1, 1, 1, -1)
            const = b.expand(k, 2, 1, b.shape[-1]).contiguous() if const is None else const + b
        return LowrankPlan(bt, a_s=(s * scale) * _as(y_factor, dtype).view(k, 1, 1, -1), const=const)
    s = s.view(k, 1, 2, 1)
    rows = [_as(y_factor, dtype).transpose(1, 2)]  # (K, r, dout)
    if vec_noise is not None:
        rows.append(_as(vec_noise, dtype).unsqueeze(1))
    if bias is not None:
        rows.append(_as(bias, dtype).expand(k, 1, bias.shape[-1]))
    right = torch.cat(rows, dim=1) if len(rows) > 1 else rows[0].contiguous()
    return LowrankPlan(bt, right=right, s_u=s * scale, s_e=None if vec_noise is None else s * vec_scale,
                       with_bias=bias is not None)


def _u(x: Tensor, plan: LowrankPlan) -> Tensor:
    """u = x B per member, (K, r, 2M): as (Bᵀ xᵀ), a unit-stride left operand, so the batched
    GEMM streams x once (bmm(xk, B) was 1.5-3x slower on CPU for small M)."""
    k, r, din = plan.bt.shape
    xk = x.reshape(k, -1, din)  # (K, 2M, din)
    if xk.shape[1] % 2:
        raise ValueError(f"{x.shape[0]} input rows cannot be split evenly over {2 * k} members")
    return torch.bmm(plan.bt, xk.transpose(1, 2))


def _left(u: Tensor, plan: LowrankPlan) -> Tensor:
    """left (K, 2M, nr) with left @ plan.right = each member's term (rank > 1)."""
    k, r, m2 = u.shape
    m = m2 // 2
    cols = [u.view(k, r, 2, m) * plan.s_u]
    if plan.s_e is not None:
        cols.append(plan.s_e.expand(k, 1, 2, m))
    if plan.with_bias:
        cols.append(torch.ones((), dtype=u.dtype, device=u.device).expand(k, 1, 2, m))
    return (torch.cat(cols, dim=1) if len(cols) > 1 else cols[0]).view(k, -1, m2).transpose(1, 2)


def add_lowrank_(y: Tensor, x: Tensor, x_factor: Tensor, y_factor: Tensor, signs: Tensor, scale: float,
                 vec_noise: Tensor | None = None, vec_scale: float = 0.0) -> Tensor:
    """y += s * scale * (x @ x_factor) @ y_factorᵀ  (+ s * vec_scale * vec_noise), per member.

    x (P*M.., din), y (P*M.., dout), x_factor (K, din, r), y_factor (K, dout, r),
    signs (K, 2), vec_noise (K, dout).
    """
    k = x_factor.shape[0]
    plan = lowrank_plan(x_factor, y_factor, signs, scale, vec_noise, vec_scale, dtype=x.dtype)
    if torch.is_grad_enabled() and (y.requires_grad or x.requires_grad):  # out-of-place, differentiable
        return y + plan_term(x, plan).view_as(y)
    if plan.right is None:  # rank 1: y += u·a_s (+ const), two broadcast multiply-adds
        u = _u(x, plan)
        yk = y.view(k, 2, -1, y.shape[-1])
        yk.addcmul_(u.view(k, 2, -1, 1), plan.a_s)
        if plan.const is not None:
            yk.add_(plan.const)
        return y
    left = _left(_u(x, plan), plan)
    y.view(k, left.shape[1], y.shape[-1]).baddbmm_(left, plan.right)
    return y


def lowrank_term_into(out: Tensor, x: Tensor, x_factor: Tensor, y_factor: Tensor, signs: Tensor, scale: float,
                      bias: Tensor | None = None, vec_noise: Tensor | None = None, vec_scale: float = 0.0) -> Tensor:
    """out = bias + s·scale·(x B)Aᵀ (+ s·vec_scale·e): everything of a perturbed linear but x Wᵀ.

    Written first so that the base GEMM can accumulate onto it (``out.addmm_(x, Wᵀ)``, see
    :func:`perturbed_linear`): the perturbation then costs one write of the output where
    ``F.linear`` spends one anyway on broadcasting the bias, instead of an extra
    read-modify-write pass after the GEMM.
    """
    return plan_term_into(out, x, lowrank_plan(x_factor, y_factor, signs, scale, vec_noise, vec_scale, bias, x.dtype))


def plan_term(x: Tensor, plan: LowrankPlan) -> Tensor:
    """The term of :func:`plan_term_into` as a new tensor (K, 2M, dout); autograd-friendly."""
    u = _u(x, plan)
    k, r, m2 = u.shape
    if plan.right is None:
        uk = u.view(k, 2, m2 // 2, 1)
        t = uk * plan.a_s if plan.const is None else torch.addcmul(plan.const, uk, plan.a_s)
        return t.reshape(k, m2, -1)
    return torch.bmm(_left(u, plan), plan.right)


def plan_term_into(out: Tensor, x: Tensor, plan: LowrankPlan) -> Tensor:
    """:func:`lowrank_term_into` from a prepared :class:`LowrankPlan`: one write of ``out``."""
    u = _u(x, plan)
    k, r, m2 = u.shape
    if plan.right is None:  # rank 1
        ok = out.view(k, 2, m2 // 2, out.shape[-1])
        uk = u.view(k, 2, m2 // 2, 1)
        if plan.const is None:
            torch.mul(uk, plan.a_s, out=ok)
        else:
            torch.addcmul(plan.const, uk, plan.a_s, out=ok)
        return out
    left = _left(u, plan)
    torch.bmm(left, plan.right, out=out.view(k, m2, out.shape[-1]))
    return out


def perturbed_linear(x: Tensor, weight: Tensor, bias: Tensor | None, x_factor: Tensor, y_factor: Tensor,
                     signs: Tensor, scale: float, vec_noise: Tensor | None = None, vec_scale: float = 0.0) -> Tensor:
    """Population ``F.linear`` with W + s·scale·A Bᵀ (and b + s·vec_scale·e) per member; no grad."""
    dout, din = weight.shape
    x2 = x.reshape(-1, din)
    y = torch.empty(x2.shape[0], dout, dtype=x.dtype, device=x.device)
    lowrank_term_into(y, x2, x_factor, y_factor, signs, scale, bias, vec_noise, vec_scale)
    y.addmm_(x2, weight.t())
    return y.view(*x.shape[:-1], dout)


def do_mm(x: Tensor, weight: Tensor, a: Tensor, b: Tensor, signs: Tensor, scale: float,
          bias: Tensor | None = None, bias_noise: Tensor | None = None, sigma: float = 0.0) -> Tensor:
    """x (W + s·scale·A Bᵀ)ᵀ (+ b + s·σ·e) for W stored (out, in); a (K, out, r), b (K, in, r)."""
    if not torch.is_grad_enabled():
        return perturbed_linear(x, weight, bias, b, a, signs, scale, bias_noise, sigma)
    y = F.linear(x, weight, bias)
    return add_lowrank_(y, x, b, a, signs, scale, bias_noise, sigma)


def do_Tmm(x: Tensor, weight: Tensor, a: Tensor, b: Tensor, signs: Tensor, scale: float) -> Tensor:
    """x (W + s·scale·A Bᵀ) for W stored (in, out); a (K, in, r), b (K, out, r)."""
    y = x @ weight
    return add_lowrank_(y, x, a, b, signs, scale)


def do_emb(idx: Tensor, weight: Tensor, a_rows: Tensor, b: Tensor, signs: Tensor, scale: float) -> Tensor:
    """(W + s·scale·A Bᵀ)[idx] for W stored (vocab, dim).

    a_rows (K, 2M, r) are the rows of A picked by each member's tokens (drawn on demand,
    never the whole (K, vocab, r) table); b (K, dim, r).
    """
    k, r = b.shape[0], b.shape[-1]
    y = F.embedding(idx, weight)
    m2 = a_rows.shape[1]
    coef = (signs.to(y.dtype) * scale).view(k, 2, 1, 1)
    left = a_rows.to(y.dtype).view(k, 2, m2 // 2, r).mul(coef).view(k, m2, r)
    yk = y.view(k, m2, -1)
    return torch.baddbmm(yk, left, b.to(y.dtype).transpose(1, 2)).view_as(y)


def get_noisy_standard(param: Tensor, noise: Tensor, signs: Tensor, sigma: float) -> Tensor:
    """(P, *shape) per-member copies param + s·σ·ε of a small tensor (bias, norm weight)."""
    k = noise.shape[0]
    coef = (signs.to(param.dtype) * sigma).view(k, 2, *([1] * param.dim()))
    return (param + noise.to(param.dtype).unsqueeze(1) * coef).view(2 * k, *param.shape)
