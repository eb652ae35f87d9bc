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


def _isq(n: int) -> int:
    return 16 * math.isqrt(n)


def _exp_table() -> list[int]:
    """The softmax weights' table: round(exp(-i/6) * 2^18) for i in 0..255 (i in 1/6-nat steps)."""
    return [max(0, int(math.floor(math.exp(-i / 6) * 2**18 + 0.5))) for i in range(256)]


def _gelu_reference(q: int) -> int:
    g = 0.5 * (q / 16) * (1 + math.erf(q / 16 / math.sqrt(2))) * 16
    return int(math.copysign(math.floor(abs(g) + 0.5), g))


def _lin_reference(member, shifts, name: str, x: Tensor, divisor: int, saturate: bool) -> Tensor:
    """Layer ``name`` (its weight, its bias if it has one) on one int8 vector."""
    y = int_linear_reference(x, member[name + ".weight"], shifts[name + ".weight"], divisor, saturate=False)
    if name + ".bias" in member:
        y = y + member[name + ".bias"]
    return y.clamp(-127, 127) if saturate else y


def _mlp_reference(member, shifts, p: str, x: Tensor, ratio: int) -> Tensor:
    """Norm, up projection, integer GELU, down projection (the block's residual branch)."""
    d = x.shape[0]
    h = _trunc_norm_reference(x, member[p + "norm.weight"], member[p + "norm.bias"])
    up = _lin_reference(member, shifts, p + "up", h, _isq(d), True)
    gelu = torch.tensor([_gelu_reference(int(u)) for u in up], dtype=torch.int64).clamp(-127, 127)
    return _lin_reference(member, shifts, p + "down", gelu, 2 * _isq(ratio * d), False)


def _rotate_reference(z: Tensor, t: int, heads: int, rope_base: float) -> Tensor:
    """Rotary position ``t`` on each head's (even, odd) pairs, cos and sin in 2^-20 fixed point."""
    hd = z.shape[0] // heads
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


def _attend_reference(q: Tensor, keys: list[Tensor], values: list[Tensor], heads: int) -> Tensor:
    """Each head's query against every cached key: table softmax weights, truncated weighted mean."""
    d = q.shape[0]
    hd, exp_table = d // heads, _exp_table()
    att = torch.zeros(d, dtype=torch.int64)
    for hh in range(heads):
        sl = slice(hh * hd, (hh + 1) * hd)
        scores = [int((q[sl] * kj[sl]).sum()) for kj in keys]
        top = max(scores)
        ws = [exp_table[min(max((top >> 8) - (s >> 8), 0), 255)] for s in scores]
        num = sum(w * vj[sl] for w, vj in zip(ws, values))
        att[sl] = torch.div(num, sum(ws), rounding_mode="trunc").clamp(-127, 127)
    return att


def _block_reference(member, shifts, p: str, x: Tensor, t: int, cache: tuple[list, list], heads: int,
                     rope_base: float, ratio: int) -> Tensor:
    """Block ``p`` on token ``t``'s vector: attention over the cache (this token's key and value added),
    then the MLP, each a requantised residual."""
    h = _trunc_norm_reference(x, member[p + "norm.weight"], member[p + "norm.bias"])
    q, k, v = (_lin_reference(member, shifts, p + name, h, 1, False) for name in ("q", "k", "v"))
    q = _requant_reference(_rotate_reference(q, t, heads, rope_base))
    cache[0].append(_requant_reference(_rotate_reference(k, t, heads, rope_base)))
    cache[1].append(_requant_reference(v))
    att = _attend_reference(q, cache[0], cache[1], heads)
    x = _requant_reference(x + _lin_reference(member, shifts, p + "o", att, 2 * _isq(x.shape[0]), False))
    return _requant_reference(x + _mlp_reference(member, shifts, p + "mlp.", x, ratio))


def transformer_reference(member: dict[str, Tensor], shifts: dict[str, int], tokens: Tensor, layers: int,
                          heads: int, init_mlp: bool = True, rope_base: float = 10000.0, ratio: int = 4) -> Tensor:
    """One member of the int8 transformer, stream by stream, token by token with a KV cache.

    ``member`` as in :func:`egg_reference`. Tables are recomputed here from ``math``; returns
    int64 logits (R, T, V) in 1/6-nat units.
    """
    table = member["embed.weight"]
    d = table.shape[1]
    logits = []
    for r in range(tokens.shape[0]):
        cache = [([], []) for _ in range(layers)]
        row = []
        for t in range(tokens.shape[1]):
            x = (table[int(tokens[r, t])] + member["embed_bias.weight"]).clamp(-127, 127)
            if init_mlp:
                x = _requant_reference(x + _mlp_reference(member, shifts, "init_mlp.", x, ratio))
            for l in range(layers):
                x = _block_reference(member, shifts, f"blocks.{l}.", x, t, cache[l], heads, rope_base, ratio)
            hf = _trunc_norm_reference(x, member["norm_out.weight"], member["norm_out.bias"])
            row.append(int_linear_reference(hf, table_fixed(member, shifts), shifts["embed.weight#head"], _isq(d),
                                            False))
        logits.append(torch.stack(row))
    return torch.stack(logits)


def table_fixed(member: dict[str, Tensor], shifts: dict[str, int]) -> Tensor:
    """The tied head's matrix: E·2^k + s·A Bᵀ (``member['embed.weight#head']``), or E when unperturbed."""
    return member.get("embed.weight#head", member["embed.weight"])
