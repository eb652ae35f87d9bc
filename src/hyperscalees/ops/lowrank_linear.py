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


def _lowrank_operands(x: Tensor, x_factor: Tensor, y_factor: Tensor, signs: Tensor, scale: float,
                      vec_noise: Tensor | None, vec_scale: float, bias: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """left (K, 2M, nr) and right (K, nr, dout) with left @ right = each member's term.

    The term is s·scale·(x B)Aᵀ (+ s·vec_scale·e) (+ b): a bias's full-rank noise and the
    bias itself ride along as extra rank columns (left: the sign, or 1; right: e, or b),
    so the whole non-GEMM part of a perturbed linear is one batched GEMM. Built from few
    ops: at small widths their per-op overhead, not their bytes, is what costs.
    """
    k, din, r = x_factor.shape
    dt = x.dtype
    xk = x.reshape(k, -1, din)  # (K, 2M, din)
    m2 = xk.shape[1]
    if m2 % 2:
        raise ValueError(f"{x.shape[0]} input rows cannot be split evenly over {2 * k} members")
    m = m2 // 2
    # u = x B computed as (Bᵀ xᵀ): with a unit-stride (K, r, din) left operand the batched
    # GEMM streams x once; bmm(xk, B) was 1.5-3x slower on CPU for small M, and a strided
    # view of B (no copy) 4x slower than copying it first.
    bt = x_factor.to(dt).transpose(1, 2).contiguous()
    u = torch.bmm(bt, xk.transpose(1, 2)).view(k, r, 2, m)  # (K, r, 2, M)
    s = signs.to(dt).view(k, 1, 2, 1)
    cols, rows = [u * (s * scale)], [y_factor.to(dt).transpose(1, 2)]  # (K, r, 2, M), (K, r, dout)
    if vec_noise is not None:
        cols.append((s * vec_scale).expand(k, 1, 2, m))
        rows.append(vec_noise.to(dt).unsqueeze(1))
    if bias is not None:
        cols.append(torch.ones((), dtype=dt, device=x.device).expand(k, 1, 2, m))
        rows.append(bias.to(dt).expand(k, 1, bias.shape[-1]))
    left = (torch.cat(cols, dim=1) if len(cols) > 1 else cols[0]).view(k, -1, m2).transpose(1, 2)
    right = torch.cat(rows, dim=1) if len(rows) > 1 else rows[0].contiguous()
    return left, right


def add_lowrank_(y: Tensor, x: Tensor, x_factor: Tensor, y_factor: Tensor, signs: Tensor, scale: float,
                 vec_noise: Tensor | None = None, vec_scale: float = 0.0) -> Tensor:
    """y += s * scale * (x @ x_factor) @ y_factorᵀ  (+ s * vec_scale * vec_noise), per member.

    x (P*M.., din), y (P*M.., dout), x_factor (K, din, r), y_factor (K, dout, r),
    signs (K, 2), vec_noise (K, dout).
    """
    k = x_factor.shape[0]
    left, right = _lowrank_operands(x, x_factor, y_factor, signs, scale, vec_noise, vec_scale)
    yk = y.view(k, left.shape[1], y.shape[-1])
    if torch.is_grad_enabled() and (y.requires_grad or x.requires_grad):
        return torch.baddbmm(yk, left, right).view_as(y)
    yk.baddbmm_(left, right)
    return y


def lowrank_term_into(out: Tensor, x: Tensor, x_factor: Tensor, y_factor: Tensor, signs: Tensor, scale: float,
                      bias: Tensor | None = None, vec_noise: Tensor | None = None, vec_scale: float = 0.0) -> Tensor:
    """out = bias + s·scale·(x B)Aᵀ (+ s·vec_scale·e): everything of a perturbed linear but x Wᵀ.

    Written first so that the base GEMM can accumulate onto it (``out.addmm_(x, Wᵀ)``, see
    :func:`perturbed_linear`): the perturbation then costs one write of the output where
    ``F.linear`` spends one anyway on broadcasting the bias, instead of an extra
    read-modify-write pass after the GEMM.
    """
    k = x_factor.shape[0]
    # the bias is a rank column too: one write of ``out``, no broadcast copy before it
    left, right = _lowrank_operands(x, x_factor, y_factor, signs, scale, vec_noise, vec_scale, bias)
    torch.bmm(left, right, out=out.view(k, left.shape[1], out.shape[-1]))
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
