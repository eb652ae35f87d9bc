"""The d-eggs integer-only pre-norm transformer (d0rc/egg.c ``d-eggs``), as an ordinary module.

int8 weights and activations, int64 accumulators, lookup tables for every nonlinearity
(``ops/int8.py`` names each rounding). Per token, for a ``D``-wide stream in ``H`` heads::

    x = clip(E[tok] + b_emb)
    x = requant(x + down(gelu(up(LN0(x)))))                 # d-eggs' extra "init MLP" block (optional)
    per layer:
      q, k, v = Wq·h, Wk·h, Wv·h with h = LN1(x)           # raw int accumulators
      q, k = requant(rope(q)), requant(rope(k)); v = requant(v)   # max-abs over the whole D vector
      score_tj = q_t·k_j (per head, j <= t)
      w_tj = EXP[clamp((max_j score >> 8) - (score_tj >> 8), 0, 255)]   # EXP[i] = round(e^(-i/6)·2^18)
      a_t = clip(trunc(Σ_j w_tj v_j / Σ_j w_tj))
      x = requant(x + floor(Wo·a / d_o))
      x = requant(x + down(gelu(up(LN2(x)))))              # up: clip(floor(·/d_up) + b), GELU table;
                                                            # down: floor(·/d_down) + b, unclipped
    logits = floor(LN_f(x) · Eᵀ / d_head)                   # tied head, no bias; one unit = 1/6 nat

The divisors are d-eggs' shifts (9, 8, 10, 8) at D = 256, scaled with width (:func:`divisors`).

requant is round_half_away(v·127/max|v|) (exact in integers here; d-eggs does it in float32).
LN is the truncating mean-|x| norm with a bias (``Int8Norm(rounding="trunc", bias=True)``).
There is no 1/√d in attention: the temperature is fixed by the two shifts and the table.
Attention runs over the whole window with a causal mask (d-eggs walks it token by token with a
KV cache: the same numbers). RoPE tables are sized to the window, so no position reads past
them (d-eggs' generation did, past 64). No state crosses windows.

Dimensions: B streams, T tokens, D width, H heads of hd = D/H, V vocabulary.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from ..ops.int8 import (EXP_STEPS_PER_NAT, clip8, egg_divisor, exp_lut, float32_is_exact, gelu_int8,
                        maxabs_requantize, rope, rope_tables)
from .int8_modules import Int8Bias, Int8Embedding, Int8Linear, Int8Norm, vector_groups
from .lm import AbstractLM

TRANSFORMER_ES_DEFAULTS = {
    "distribution": "int_uniform",   # d-eggs' uniform integers in [-15, 15]
    "sigma": 2.0**-7,                # d-eggs' matrix shift 7 (FIXED_POINT 4 + SIGMA_SHIFT 3)
    "rank": 1,
    "shaping": "pair_sign_filtered", # chunk mean filter, then the 0.1·mean|diff| dead zone
    "update_rule": "int_adamw",      # float moments, fractional accumulator, ±1 steps
    "lr": 0.25,                      # d-eggs: 0.5 / 0.25 / 0.125 by step
    "noise_reuse": 1,
}
ATTN_SHIFT = 8


def divisors(dim: int, ratio: int) -> dict[str, int]:
    """The output divisors of O, up, down and the head: d-eggs' shifts 9, 8, 10, 8 at D = 256,
    scaled with width as 16·isqrt(fan_in) (x2 for O and down, as d-eggs) so small models keep
    the same activation scale."""
    return {"o": 2 * egg_divisor(dim), "up": egg_divisor(dim), "down": 2 * egg_divisor(ratio * dim),
            "head": egg_divisor(dim)}


class Int8MLP(nn.Module):
    """x -> floor(down(gelu(clip(floor(up(LN(x)) / d_up) + b_up))) / d_down) + b_down, unclipped."""

    def __init__(self, dim: int, ratio: int):
        super().__init__()
        d = divisors(dim, ratio)
        self.norm = Int8Norm(dim, rounding="trunc", bias=True)
        self.up = Int8Linear(dim, ratio * dim, divisor=d["up"], bias=True, init="uniform")
        self.down = Int8Linear(ratio * dim, dim, divisor=d["down"], bias=True, saturate=False, init="uniform")

    def forward(self, x: Tensor) -> Tensor:
        return self.down(clip8(gelu_int8(self.up(self.norm(x)))))


def attention(q: Tensor, k: Tensor, v: Tensor, heads: int) -> Tensor:
    """Integer causal attention of int8-range q, k, v (B, T, D) -> (B, T, D) int8 (module docstring)."""
    b, t, d = q.shape
    hd = d // heads
    split = lambda z: z.view(b, t, heads, hd).transpose(1, 2)                   # (B, H, T, hd)
    qh, kh, vh = split(q), split(k), split(v)
    # integer-valued floats throughout: q·k sums < 2^24 (float32) for hd <= 1040; the weighted
    # sums < 2^18·127·T, far below 2^53 (float64); floor/trunc of their quotients are exact
    exact = torch.float32 if float32_is_exact(hd) else torch.float64
    scores = torch.floor((qh.to(exact) @ kh.to(exact).transpose(-1, -2)) / 2**ATTN_SHIFT)  # (B, H, T, T): s >> 8
    causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    top = scores.masked_fill(~causal, -float(2**30)).amax(dim=-1, keepdim=True)
    idx = (top - scores).clamp_(0, 255).to(torch.int64)
    w = torch.take(exp_lut(q.device, torch.float64), idx).mul_(causal)       # (B, H, T, T), <= 2^18
    num = w @ vh.to(torch.float64)
    out = clip8(torch.trunc(num / w.sum(dim=-1, keepdim=True)))
    return out.transpose(1, 2).reshape(b, t, d)


class Int8TransformerBlock(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: int):
        super().__init__()
        self.heads = heads
        self.norm = Int8Norm(dim, rounding="trunc", bias=True)
        self.q, self.k, self.v = (Int8Linear(dim, dim, divisor=1, saturate=False, init="uniform") for _ in range(3))
        self.o = Int8Linear(dim, dim, divisor=divisors(dim, mlp_ratio)["o"], saturate=False, init="uniform")
        self.mlp = Int8MLP(dim, mlp_ratio)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        b, t, d = x.shape
        h = self.norm(x)
        hd = d // self.heads
        roped = lambda z: rope(z.view(b, t, self.heads, hd).transpose(1, 2), cos, sin).transpose(1, 2).reshape(b, t, d)
        q = maxabs_requantize(roped(self.q(h)))
        k = maxabs_requantize(roped(self.k(h)))
        v = maxabs_requantize(self.v(h))
        x = maxabs_requantize(self.o(attention(q, k, v, self.heads)).to(torch.float64).add_(x))
        return maxabs_requantize(self.mlp(x).to(torch.float64).add_(x))


class Int8Transformer(AbstractLM):
    """d-eggs' transformer; default 2 layers x 64 wide, 2 heads (d-eggs: 4 x 256, head_dim 64, vocab 8192)."""

    is_integer = True
    es_defaults = TRANSFORMER_ES_DEFAULTS

    def __init__(self, vocab_size: int = 256, dim: int = 64, layers: int = 2, heads: int = 2, mlp_ratio: int = 4,
                 init_mlp: bool = True, rope_base: float = 10000.0):
        super().__init__(vocab_size)
        if dim < 2 or layers < 1 or heads < 1 or dim % heads or (dim // heads) % 2:
            raise ValueError(f"int8-transformer needs dim divisible by heads into even head sizes and layers >= 1, "
                             f"got dim {dim}, heads {heads}, layers {layers}")
        self.dim, self.heads, self.rope_base = dim, heads, rope_base
        self.embed = Int8Embedding(vocab_size, dim, head_divisor=divisors(dim, mlp_ratio)["head"], init="uniform")
        self.embed_bias = Int8Bias(dim)
        self.init_mlp = Int8MLP(dim, mlp_ratio) if init_mlp else None
        self.blocks = nn.ModuleList(Int8TransformerBlock(dim, heads, mlp_ratio) for _ in range(layers))
        self.norm_out = Int8Norm(dim, rounding="trunc", bias=True)

    def es_groups(self) -> list[dict]:
        return vector_groups(self)

    def int_forward(self, tokens: Tensor) -> Tensor:
        """tokens (B, T) -> int64 logits (B, T, V) in 1/6-nat units."""
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be (batch, time), got shape {tuple(tokens.shape)}")
        cos, sin = rope_tables(tokens.shape[1], self.dim // self.heads, self.rope_base, tokens.device)
        x = clip8(self.embed_bias(self.embed(tokens)))
        if self.init_mlp is not None:
            x = maxabs_requantize(self.init_mlp(x).to(torch.float64).add_(x))
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.embed(self.norm_out(x), head=True)

    def forward(self, tokens: Tensor, state=None) -> tuple[Tensor, None]:
        return self.int_forward(tokens).to(torch.float32) / EXP_STEPS_PER_NAT, None


__all__ = ["Int8MLP", "Int8Transformer", "Int8TransformerBlock", "TRANSFORMER_ES_DEFAULTS", "attention"]
