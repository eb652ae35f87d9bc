"""Dumb twins of the fast ops: loop over members and build W + E_i explicitly.

Used only by tests, as the ground truth the batched paths must match.
"""
from __future__ import annotations

import torch
from torch import Tensor


def member_matrix(weight: Tensor, a: Tensor, b: Tensor, sign: float, scale: float) -> Tensor:
    return weight + sign * scale * a @ b.T


def do_mm_reference(x, weight, a, b, signs, scale, bias=None, bias_noise=None, sigma=0.0):
    k = a.shape[0]
    xs = x.reshape(2 * k, -1, x.shape[-1])
    outs = []
    for i in range(2 * k):
        s = float(signs.reshape(-1)[i])
        w = member_matrix(weight, a[i // 2], b[i // 2], s, scale)
        y = xs[i] @ w.T
        if bias is not None:
            y = y + bias
        if bias_noise is not None:
            y = y + s * sigma * bias_noise[i // 2]
        outs.append(y)
    return torch.stack(outs).reshape(*x.shape[:-1], weight.shape[0])


def do_Tmm_reference(x, weight, a, b, signs, scale):
    k = a.shape[0]
    xs = x.reshape(2 * k, -1, x.shape[-1])
    outs = [xs[i] @ member_matrix(weight, a[i // 2], b[i // 2], float(signs.reshape(-1)[i]), scale)
            for i in range(2 * k)]
    return torch.stack(outs).reshape(*x.shape[:-1], weight.shape[1])


def do_emb_reference(idx, weight, a_full, b, signs, scale):
    """a_full (K, vocab, r): the whole A table, so the on-demand row draw can be checked."""
    k = b.shape[0]
    ids = idx.reshape(2 * k, -1)
    outs = [member_matrix(weight, a_full[i // 2], b[i // 2], float(signs.reshape(-1)[i]), scale)[ids[i]]
            for i in range(2 * k)]
    return torch.stack(outs).reshape(*idx.shape, weight.shape[1])


def gradient_reference(eps_list: list[Tensor], fitness: Tensor, sigma: float) -> Tensor:
    """(1/(Nσ)) Σ_i f_i ε_i with every ε_i materialized."""
    total = sum(float(f) * e for f, e in zip(fitness, eps_list))
    return total / (len(eps_list) * sigma)
