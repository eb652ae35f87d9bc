"""Population matmuls with rank-r noise, never materializing a per-member matrix.

Dimensions: K antithetic pairs, P = 2K members, M rows per member (batch x tokens),
r rank. Inputs are member-major: rows [i*M, (i+1)*M) of ``x`` belong to member i.
Both members of a pair share one draw, so ``x`` is viewed as (K, 2M, in) and the
factor products run once per pair; the sign is applied to the small (K, 2, M, r) term.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .lowrank_plan import lowrank_plan, plan_term, plan_term_into
from .member import member_coef


def add_lowrank_(y: Tensor, x: Tensor, x_factor: Tensor, y_factor: Tensor, signs: Tensor, scale: float,
                 vec_noise: Tensor | None = None, vec_scale: float = 0.0) -> Tensor:
    """y += s * scale * (x @ x_factor) @ y_factorᵀ  (+ s * vec_scale * vec_noise), per member.

    x (P*M.., din), y (P*M.., dout), x_factor (K, din, r), y_factor (K, dout, r),
    signs (K, 2), vec_noise (K, dout).
    """
    plan = lowrank_plan(x_factor, y_factor, signs, scale, vec_noise, vec_scale, dtype=x.dtype)
    term = plan_term(x, plan).view_as(y)
    if torch.is_grad_enabled() and (y.requires_grad or x.requires_grad):  # out-of-place, differentiable
        return y + term
    return y.add_(term)


def lowrank_term_into(out: Tensor, x: Tensor, x_factor: Tensor, y_factor: Tensor, signs: Tensor, scale: float,
                      bias: Tensor | None = None, vec_noise: Tensor | None = None, vec_scale: float = 0.0) -> Tensor:
    """out = bias + s·scale·(x B)Aᵀ (+ s·vec_scale·e): everything of a perturbed linear but x Wᵀ.

    Written first so that the base GEMM can accumulate onto it (``out.addmm_(x, Wᵀ)``, see
    :func:`perturbed_linear`): the perturbation then costs one write of the output where
    ``F.linear`` spends one anyway on broadcasting the bias, instead of an extra
    read-modify-write pass after the GEMM.
    """
    return plan_term_into(out, x, lowrank_plan(x_factor, y_factor, signs, scale, vec_noise, vec_scale, bias, x.dtype))


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


def add_emb_lowrank(y: Tensor, a_rows: Tensor, b: Tensor, signs: Tensor, scale: float) -> Tensor:
    """y + s·scale·(A Bᵀ)[idx] for looked-up rows y (P·T.., dim) of a table stored (vocab, dim).

    a_rows (K, 2T, r) are the rows of A picked by each pair's tokens (drawn on demand, never
    the whole (K, vocab, r) table); b (K, dim, r). One batched GEMM pass, no separate delta.
    """
    k, r = b.shape[0], b.shape[-1]
    m2 = a_rows.shape[1]
    g = signs.shape[1]
    left = a_rows.to(y.dtype).view(k, g, m2 // g, r).mul(member_coef(signs, scale, 1, y.dtype)).view(k, m2, r)
    yk = y.reshape(k, m2, -1)
    return torch.baddbmm(yk, left, b.to(y.dtype).transpose(1, 2)).view_as(y)


def do_emb(idx: Tensor, weight: Tensor, a_rows: Tensor, b: Tensor, signs: Tensor, scale: float) -> Tensor:
    """(W + s·scale·A Bᵀ)[idx] for W stored (vocab, dim); see :func:`add_emb_lowrank`."""
    return add_emb_lowrank(F.embedding(idx, weight), a_rows, b, signs, scale)
