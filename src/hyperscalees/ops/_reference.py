"""Dumb twins of the fast ops: loop over members and build W + E_i explicitly.

Used only by tests, as the ground truth the batched paths must match.
"""
from __future__ import annotations

import math

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


# -- integer models: materialized member weights, int64 throughout, one token at a time ----------
def int_round_half_up(num: Tensor, k: int) -> Tensor:
    """floor(num / 2^k + 1/2), written as a float64 floor (exact for |num| < 2^52)."""
    return torch.floor(num.to(torch.float64) / 2.0**k + 0.5).to(torch.int64)


def int_member_matrix(weight: Tensor, a: Tensor, b: Tensor, sign: int, k: int) -> Tensor:
    """W·2^k + s·A Bᵀ: member i's matrix in 2^-k fixed point (int64); k < 0: W + s·2^-k·A Bᵀ (k = 0)."""
    ab = a.to(torch.int64) @ b.to(torch.int64).T
    if k < 0:
        return weight.to(torch.int64) + sign * ab * 2**-k
    return weight.to(torch.int64) * 2**k + sign * ab


def int_member_table(weight: Tensor, a: Tensor, b: Tensor, sign: int, k: int) -> Tensor:
    """Member i's perturbed int8 table: clip(E + round_half_up(s·A Bᵀ / 2^k)), every row."""
    return (weight.to(torch.int64) + int_round_half_up(sign * (a.to(torch.int64) @ b.to(torch.int64).T), k)).clamp(-127, 127)


def int_member_vector(v: Tensor, eps: Tensor, sign: int, k: int) -> Tensor:
    return (v.to(torch.int64) + int_round_half_up(sign * eps.to(torch.int64), k)).clamp(-127, 127)


def int_linear_reference(x: Tensor, w_fixed: Tensor, k: int, divisor: int, saturate: bool = True) -> Tensor:
    """clip(floor((x·W2ᵀ + 2^(k-1)) / (2^k·divisor))) for the fixed-point member matrix W2 (one division)."""
    z = x.to(torch.int64) @ w_fixed.T + (2 ** (k - 1) if k else 0)
    y = torch.div(z, 2**k * divisor, rounding_mode="floor")
    return y.clamp(-127, 127) if saturate else y


def egg_norm_reference(x: Tensor, w: Tensor) -> Tensor:
    d = x.shape[-1]
    m = max(int(x.abs().sum()) // d, 1)
    return torch.div(x * w, m, rounding_mode="floor").clamp(-127, 127)


def egg_reference(member: dict[str, Tensor], shifts: dict[str, int], tokens: Tensor, state: Tensor,
                  layers: int, dim: int) -> tuple[Tensor, Tensor]:
    """One member of EGG, stream by stream and token by token, from its materialized weights.

    ``member`` maps parameter names to: the perturbed table (``embed.weight``), W·2^k + s·A Bᵀ
    for matrices (with ``shifts[name] = k``), perturbed vectors for the rest. Returns int
    logits (R, T, V) and the last state (R, L, D).
    """
    isq = lambda n: 16 * math.isqrt(n)

    def lin(name, x):
        w = member[name + ".weight"]
        return int_linear_reference(x, w, shifts[name + ".weight"], isq(w.shape[1]))

    logits, states = [], []
    for r in range(tokens.shape[0]):
        s = [state[r, l].to(torch.int64) for l in range(layers)]
        row = []
        for t in range(tokens.shape[1]):
            tok = int(tokens[r, t])
            if tok == 0:
                s = [torch.zeros(dim, dtype=torch.int64) for _ in range(layers)]
            x = member["embed.weight"][tok].to(torch.int64)
            for l in range(layers):
                p = f"blocks.{l}."
                xn = egg_norm_reference(x, member[p + "norm1.weight"])
                f = (lin(p + "wf", xn) + lin(p + "uf", s[l]) + member[p + "bias_f.weight"]).clamp(-127, 127)
                g = torch.div((f + 127) * s[l], 256, rounding_mode="floor")
                h = (lin(p + "wh", xn) + lin(p + "uh", g) + member[p + "bias_h.weight"]).clamp(-127, 127)
                s[l] = s[l] + torch.div((f + 127) * (h - s[l]), 256, rounding_mode="floor")
                assert int(s[l].abs().max()) <= 127
                x = (x + s[l]).clamp(-127, 127)
                x = (x + lin(p + "down", lin(p + "up", egg_norm_reference(x, member[p + "norm2.weight"])))).clamp(-127, 127)
            row.append(lin("head", egg_norm_reference(x, member["norm_out.weight"])))
        logits.append(torch.stack(row))
        states.append(torch.stack(s))
    return torch.stack(logits), torch.stack(states)


def _requant_reference(v: Tensor) -> Tensor:
    """round_half_away(v·127/max|v|) written with exact Python fractions, one element at a time."""
    from fractions import Fraction
    m = int(v.abs().max())
    if m == 0:
        return torch.zeros_like(v)
    out = []
    for e in v.tolist():
        q = Fraction(abs(e) * 127, m)
        r = int(q) + (1 if q - int(q) >= Fraction(1, 2) else 0)
        out.append(min(127, r) * (1 if e >= 0 else -1))
    return torch.tensor(out, dtype=torch.int64)


def _trunc_norm_reference(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
    m = max(int(x.abs().sum()) // x.shape[-1], 1)
    return (torch.div(x * w, m, rounding_mode="trunc") + b).clamp(-127, 127)


def transformer_reference(member: dict[str, Tensor], shifts: dict[str, int], tokens: Tensor, layers: int,
                          heads: int, init_mlp: bool = True, rope_base: float = 10000.0, ratio: int = 4) -> Tensor:
    """One member of the int8 transformer, stream by stream, token by token with a KV cache.

    ``member`` as in :func:`egg_reference`. Tables are recomputed here from ``math``; returns
    int64 logits (R, T, V) in 1/6-nat units.
    """
    table = member["embed.weight"]
    d = table.shape[1]
    hd = d // heads
    isq = lambda n: 16 * math.isqrt(n)
    exp_table = [max(0, int(math.floor(math.exp(-i / 6) * 2**18 + 0.5))) for i in range(256)]
    exp_table = [e if e >= 1 else 0 for e in exp_table]

    def gelu(q):
        g = 0.5 * (q / 16) * (1 + math.erf(q / 16 / math.sqrt(2))) * 16
        return int(math.copysign(math.floor(abs(g) + 0.5), g))

    def lin(name, x, divisor, saturate, bias=True):
        w = member[name + ".weight"]
        y = int_linear_reference(x, w, shifts[name + ".weight"], divisor, saturate=False)
        if bias and name + ".bias" in member:
            y = y + member[name + ".bias"]
        return y.clamp(-127, 127) if saturate else y

    def mlp(p, x):
        h = _trunc_norm_reference(x, member[p + "norm.weight"], member[p + "norm.bias"])
        up = lin(p + "up", h, isq(d), True)
        return lin(p + "down", torch.tensor([gelu(int(u)) for u in up], dtype=torch.int64).clamp(-127, 127),
                   2 * isq(ratio * d), False)

    def rotate(z, t):
        out = z.clone()
        for hh in range(heads):
            for i in range(hd // 2):
                theta = t * rope_base ** (-2.0 * i / hd)
                c = int(math.floor(math.cos(theta) * 2**20 + 0.5))
                s = int(math.floor(math.sin(theta) * 2**20 + 0.5))
                e, o = int(z[hh * hd + 2 * i]), int(z[hh * hd + 2 * i + 1])
                out[hh * hd + 2 * i] = (e * c - o * s + 2**19) >> 20
                out[hh * hd + 2 * i + 1] = (e * s + o * c + 2**19) >> 20
        return out

    logits = []
    for r in range(tokens.shape[0]):
        cache = [([], []) for _ in range(layers)]
        row = []
        for t in range(tokens.shape[1]):
            x = (table[int(tokens[r, t])] + member["embed_bias.weight"]).clamp(-127, 127)
            if init_mlp:
                x = _requant_reference(x + mlp("init_mlp.", x))
            for l in range(layers):
                p = f"blocks.{l}."
                h = _trunc_norm_reference(x, member[p + "norm.weight"], member[p + "norm.bias"])
                q = _requant_reference(rotate(lin(p + "q", h, 1, False), t))
                k = _requant_reference(rotate(lin(p + "k", h, 1, False), t))
                v = _requant_reference(lin(p + "v", h, 1, False))
                cache[l][0].append(k)
                cache[l][1].append(v)
                att = torch.zeros(d, dtype=torch.int64)
                for hh in range(heads):
                    sl = slice(hh * hd, (hh + 1) * hd)
                    scores = [int((q[sl] * kj[sl]).sum()) for kj in cache[l][0]]
                    top = max(scores)
                    ws = [exp_table[min(max((top >> 8) - (s >> 8), 0), 255)] for s in scores]
                    num = sum(w * vj[sl] for w, vj in zip(ws, cache[l][1]))
                    att[sl] = torch.div(num, sum(ws), rounding_mode="trunc").clamp(-127, 127)
                x = _requant_reference(x + lin(p + "o", att, 2 * isq(d), False))
                x = _requant_reference(x + mlp(p + "mlp.", x))
            hf = _trunc_norm_reference(x, member["norm_out.weight"], member["norm_out.bias"])
            row.append(int_linear_reference(hf, table_fixed(member, shifts), shifts["embed.weight#head"], isq(d), False))
        logits.append(torch.stack(row))
    return torch.stack(logits)


def table_fixed(member: dict[str, Tensor], shifts: dict[str, int]) -> Tensor:
    """The tied head's matrix: E·2^k + s·A Bᵀ (``member['embed.weight#head']``), or E when unperturbed."""
    return member.get("embed.weight#head", member["embed.weight"])
