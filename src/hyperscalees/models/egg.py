"""EGG: nano-egg's byte-level int8 minGRU language model (paper §6.1, App. G).

Everything is an integer: int8 weights and activations (16x their real value), int32/int64
accumulators, saturation to ±127 and floor divisions as the only nonlinearities -- no
activation function anywhere. Per layer (``D`` wide, state ``s`` in the full int8 range)::

    x' = LN1(x)                                   # mean-|x| norm, floor (ops.int8.mean_abs_norm)
    f  = clip(Wf x' + Uf s + bf)                  # each W·, U· is clip(floor(acc / (16·isqrt(D))))
    ĝ  = ((f + 127) · s) >> 8                     # (f+127)/256 in [0, 0.992] is the gate
    h̃  = clip(Wh x' + Uh ĝ + bh)
    s' = s + (((f + 127) · (h̃ - s)) >> 8)         # stays in [-127, 127]: computed in int64, cast once
    x  = clip(x + s');  x = clip(x + Wdown(Wup(LN2(x))))     # MLP D -> 4D -> D, no activation

then ``LN_out`` and the head (D -> vocab), whose int8 outputs are base-2 log-probabilities in
1/16-bit units (returned on the natural-log scale). The state (B, layers, D) is carried from
window to window and reset to 0 before any byte 0 (nano-egg's document separator).

Dimensions: B streams, T tokens, L layers, D width, V vocabulary.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from ..ops.int8 import QMAX, clip8
from .int8_modules import Int8Bias, Int8Embedding, Int8Linear, Int8Norm, vector_groups
from .lm import AbstractLM, natural_logits_from_log2_sixteenths

EGG_ES_DEFAULTS = {
    "distribution": "int",      # trunc(16·N(0,1)): nano-egg's noise table
    "sigma": 2.0**-8,           # noise shift 8 = nano-egg's 4 + sigma_shift 4: σ 1/16 in real units
    "rank": 1,
    "shaping": "pair_sign",     # nano-egg's fast_fitness: the sign of each pair's difference
    "update_rule": "int_ztest",
    "lr": 1.0,                  # α_0 of the z-test rule (the fraction of weights that may move)
    "noise_reuse": 1,
}
class EggBlock(nn.Module):
    """One recurrent layer and its MLP (see the module docstring)."""

    def __init__(self, dim: int, mlp_ratio: int = 4):
        super().__init__()
        self.norm1, self.norm2 = Int8Norm(dim), Int8Norm(dim)
        self.wf, self.uf, self.wh, self.uh = (Int8Linear(dim, dim) for _ in range(4))
        self.bias_f, self.bias_h = Int8Bias(dim), Int8Bias(dim)
        self.up, self.down = Int8Linear(dim, mlp_ratio * dim), Int8Linear(mlp_ratio * dim, dim)

    def forward(self, x: Tensor, state: Tensor, reset: Tensor) -> tuple[Tensor, Tensor]:
        """x (B, T, D) int8, state (B, D) int8, reset (B, T) bool -> (x, last state)."""
        xn = self.norm1(x)
        fx = self.bias_f(self.wf(xn))                                 # (B, T, D), bias added once
        hx = self.bias_h(self.wh(xn))
        # the recurrence in integer-valued float32: every value below 254·254 < 2^24, so exact;
        # floor(v / 256) is the arithmetic shift v >> 8
        s = state.to(torch.float32)
        keep = (~reset).to(torch.float32)
        outs = []
        for t in range(x.shape[1]):
            s = s * keep[:, t, None]                                  # byte 0: the state restarts at 0
            f = (fx[:, t] + self.uf(s)).clamp(-QMAX, QMAX)
            gate = f + QMAX                                           # [0, 254]
            g = torch.floor(gate * s / 256)
            h = (hx[:, t] + self.uh(g)).clamp(-QMAX, QMAX)
            s = s + torch.floor(gate * (h - s) / 256)
            outs.append(s)
        states = clip8(torch.stack(outs, dim=1))                     # already in range: the cast is exact
        x = clip8(x.to(torch.float32) + states)
        x = clip8(x.to(torch.float32) + self.down(self.up(self.norm2(x))))
        return x, states[:, -1]


class Egg(AbstractLM):
    """nano-egg's EGG; default 2 layers x 128 wide (nano-egg's paper model is 6 x 256)."""

    is_integer = True
    es_defaults = EGG_ES_DEFAULTS

    def __init__(self, vocab_size: int = 256, dim: int = 128, layers: int = 2, mlp_ratio: int = 4):
        super().__init__(vocab_size)
        if dim < 1 or layers < 1 or mlp_ratio < 1:
            raise ValueError(f"egg needs dim, layers, mlp_ratio >= 1, got {dim}, {layers}, {mlp_ratio}")
        self.dim, self.layers = dim, layers
        self.embed = Int8Embedding(vocab_size, dim)
        self.blocks = nn.ModuleList(EggBlock(dim, mlp_ratio) for _ in range(layers))
        self.norm_out = Int8Norm(dim)
        self.head = Int8Linear(dim, vocab_size)

    def es_groups(self) -> list[dict]:
        return vector_groups(self)

    def init_state(self, batch: int, device=None) -> Tensor:
        return torch.zeros(batch, self.layers, self.dim, dtype=torch.int8, device=device)

    def int_forward(self, tokens: Tensor, state: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """tokens (B, T) -> (int8 logits (B, T, V) in 1/16-bit base-2 units, state (B, L, D) int8)."""
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be (batch, time), got shape {tuple(tokens.shape)}")
        b = tokens.shape[0]
        state = self.init_state(b, tokens.device) if state is None else state
        if state.shape != (b, self.layers, self.dim):
            raise ValueError(f"state must be ({b}, {self.layers}, {self.dim}), got {tuple(state.shape)}")
        reset = tokens == 0
        x = self.embed(tokens)
        last = []
        for i, block in enumerate(self.blocks):
            x, s = block(x, state[:, i], reset)
            last.append(s)
        return self.head(self.norm_out(x)), torch.stack(last, dim=1)

    def forward(self, tokens: Tensor, state: Tensor | None = None) -> tuple[Tensor, Tensor]:
        y, state = self.int_forward(tokens, state)
        return natural_logits_from_log2_sixteenths(y), state


__all__ = ["EGG_ES_DEFAULTS", "Egg", "EggBlock"]
