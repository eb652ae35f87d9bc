"""``nn.MultiheadAttention`` (and through it torch's Transformer layers) as a population.

torch's own forward hands ``out_proj.weight`` straight to ``F.multi_head_attention_forward``,
so a perturbed ``out_proj`` would never see its noise. This layer re-states the forward with
torch's semantics on member-major rows: every projection goes through
:func:`population_linear` (the q/k/v thirds of a packed ``in_proj_weight`` as ``rows``
slices, so the noise is sliced alike), and the output projection is *called*
(``module.out_proj(x)``) so that its own installed forward applies its noise.

Dimensions: N = P·M member-major rows, L target length, S source length, E embed_dim,
H heads, D = E / H. Internally everything is batch-first: (N, L, E).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...ops.member import add_vector_noise
from .base import AbstractLayer, PopulationContext
from .matmul import population_linear

_SEPARATE = ("q_proj_weight", "k_proj_weight", "v_proj_weight")


def _batch_first(t: Tensor, batch_first: bool) -> Tensor:
    return t if batch_first else t.transpose(0, 1)


def _add_bias(ctx: PopulationContext, y: Tensor, bias: Tensor | None, bname: str | None, part: slice) -> Tensor:
    """y (N, T, E) + each member's ``part`` of the packed (3E,) in_proj_bias.

    The separate q/k/v weights are not slices of one matrix but their bias still is, so it
    cannot ride along with ``population_linear``'s ``rows``.
    """
    if bias is None:
        return y
    y = y + bias[part]
    if bname is None:
        return y
    n = ctx.noise(bname)
    return add_vector_noise(y, n.eps[:, part], n.signs, n.scale)


def _projections(ctx, module, active, xq, xk, xv, self_attn: bool, same_kv: bool):
    """(q (N, L, E), k (N, S, E), v (N, S, E)): one GEMM per distinct input, as torch does."""
    e, what = module.embed_dim, type(module).__name__
    bias, bname = module.in_proj_bias, active.get("in_proj_bias")
    if not module._qkv_same_embed_dim:
        return tuple(_add_bias(ctx, population_linear(ctx, x, getattr(module, attr), active.get(attr), what=what),
                               bias, bname, slice(i * e, (i + 1) * e))
                     for i, (x, attr) in enumerate(zip((xq, xk, xv), _SEPARATE)))
    w, wname = module.in_proj_weight, active.get("in_proj_weight")

    def proj(x, lo, hi):  # features [lo·E, hi·E) of the packed projection
        return population_linear(ctx, x, w, wname, bias, bname, rows=slice(lo * e, hi * e), what=what)

    if self_attn:
        return proj(xq, 0, 3).chunk(3, dim=-1)
    if same_kv:
        return (proj(xq, 0, 1), *proj(xk, 1, 3).chunk(2, dim=-1))
    return proj(xq, 0, 1), proj(xk, 1, 2), proj(xv, 2, 3)


def _member_rows(ctx: PopulationContext, param: Tensor, name: str | None, n: int, dtype) -> Tensor:
    """(N, 1, E): a (1, 1, E) bias_k/bias_v as each row's member sees it."""
    v = ctx.vector(param, name, dtype).reshape(-1, 1, param.shape[-1])  # (P, 1, E) or (1, 1, E)
    return v.repeat_interleave(n // v.shape[0], dim=0)


def _extend_kv(ctx, module, active, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, int]:
    """k, v (N, S', E) with bias_k/bias_v and then a zero key/value appended; S' - S extra columns."""
    n, extra = k.shape[0], 0
    if module.bias_k is not None:
        k = torch.cat([k, _member_rows(ctx, module.bias_k, active.get("bias_k"), n, k.dtype)], dim=1)
        v = torch.cat([v, _member_rows(ctx, module.bias_v, active.get("bias_v"), n, v.dtype)], dim=1)
        extra += 1
    if module.add_zero_attn:
        k, v = (torch.cat([t, t.new_zeros(n, 1, t.shape[-1])], dim=1) for t in (k, v))
        extra += 1
    return k, v, extra


def _additive(mask: Tensor, dtype: torch.dtype, what: str) -> Tensor:
    """A bool (True = masked out) or float mask as the float added to the scores."""
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(mask, float("-inf"))
    if not mask.is_floating_point():
        raise ValueError(f"{what} must be bool or floating point, got {mask.dtype}")
    return mask.to(dtype)


def _merged_mask(attn_mask, key_padding_mask, shape: tuple, extra: int, dtype) -> Tensor | None:
    """One additive mask broadcastable to the scores (N, H, L, S + extra), or None."""
    n, h, l, s = shape
    out = None
    if attn_mask is not None:
        if tuple(attn_mask.shape) not in ((l, s), (n * h, l, s)):
            raise ValueError(f"attn_mask has shape {tuple(attn_mask.shape)}; expected (L, S) = {(l, s)} or "
                             f"(N·H, L, S) = {(n * h, l, s)} with N the member-major batch")
        out = _additive(attn_mask, dtype, "attn_mask").view(-1, 1 if attn_mask.dim() == 2 else h, l, s)
    if key_padding_mask is not None:
        if tuple(key_padding_mask.shape) != (n, s):
            raise ValueError(f"key_padding_mask has shape {tuple(key_padding_mask.shape)}, expected (N, S) = "
                             f"{(n, s)} with N the member-major batch")
        kpm = _additive(key_padding_mask, dtype, "key_padding_mask").view(n, 1, 1, s)
        out = kpm if out is None else out + kpm
    return out if out is None or not extra else F.pad(out, (0, extra))  # appended keys are never masked


def _attend(q, k, v, mask, p: float, need_weights: bool, causal: bool) -> tuple[Tensor, Tensor | None]:
    """(N, H, L, D) attention output and, if asked, the (post-dropout, as torch) weights (N, H, L, S)."""
    if not need_weights:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=causal), None
    scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)  # (N, H, L, S)
    w = (scores if mask is None else scores + mask).softmax(dim=-1)
    if p > 0.0:
        w = F.dropout(w, p=p)
    return w @ v, w


def _heads(t: Tensor, h: int) -> Tensor:
    n, s, e = t.shape
    return t.view(n, s, h, e // h).transpose(1, 2)  # (N, H, S, D)


def _check_inputs(ctx, module, query, key, value) -> None:
    """Refuse what cannot be split into members before any noise is drawn."""
    what = type(module).__name__
    if query.dim() != 3 or key.dim() != 3 or value.dim() != 3:
        raise ValueError(f"{what}: got unbatched ({query.dim()}-D) inputs, which cannot be member-major: under "
                         "ES every member needs its own rows of the batch dimension; add a batch dimension "
                         f"(dim {0 if module.batch_first else 1}) holding the members")
    bdim = 0 if module.batch_first else 1
    ctx.check_rows(query, what, bdim)
    if key.shape[:2] != value.shape[:2] or key.shape[bdim] != query.shape[bdim]:
        raise ValueError(f"{what}: query {tuple(query.shape)}, key {tuple(key.shape)} and value "
                         f"{tuple(value.shape)} must share the member-major batch (dim {bdim}), and key and "
                         "value their length")


class MultiheadAttentionLayer(AbstractLayer):
    """torch's MultiheadAttention, packed or separate q/k/v, bias_k/bias_v and add_zero_attn included."""

    def params(self, module):
        return ("in_proj_weight", "in_proj_bias", *_SEPARATE, "bias_k", "bias_v")

    def lowrank(self, module):
        if module._qkv_same_embed_dim:
            return {"in_proj_weight": "out_in"}
        return {attr: "out_in" for attr in _SEPARATE}

    def routes_children(self, module) -> bool:
        """torch's forward reads out_proj.weight without calling out_proj: run this layer whenever
        out_proj is perturbed, even with every own parameter excluded."""
        return True

    def forward(self, ctx: PopulationContext, module: nn.MultiheadAttention, active: dict[str, str]):
        def forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                    average_attn_weights=True, is_causal=False):
            _check_inputs(ctx, module, query, key, value)
            if is_causal and attn_mask is None:
                raise ValueError(f"{type(module).__name__}: is_causal is a hint that attn_mask is causal, "
                                 "and needs attn_mask (as torch does)")
            self_attn, same_kv = query is key and key is value, key is value
            xq, xk, xv = (_batch_first(t, module.batch_first) for t in (query, key, value))
            q, k, v = _projections(ctx, module, active, xq, xk, xv, self_attn, same_kv)
            k, v, extra = _extend_kv(ctx, module, active, k, v)
            (n, l, e), h = q.shape, module.num_heads
            causal = is_causal and key_padding_mask is None and not need_weights and not extra
            mask = None if causal else _merged_mask(attn_mask, key_padding_mask, (n, h, l, xk.shape[1]),
                                                    extra, q.dtype)
            p = module.dropout if module.training else 0.0
            out, w = _attend(_heads(q, h), _heads(k, h), _heads(v, h), mask, p, need_weights, causal)
            out = module.out_proj(out.transpose(1, 2).reshape(n, l, e))  # its own (perturbed) forward
            if w is not None and average_attn_weights:
                w = w.mean(dim=1)  # (N, L, S)
            return _batch_first(out, module.batch_first), w
        return forward
