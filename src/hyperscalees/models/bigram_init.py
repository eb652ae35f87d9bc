"""Start an integer LM as a bigram: its embedding and head set from counts, its blocks neutral.

Why: a byte-level egg learns first what a bigram table already knows (which byte follows which),
and on a CPU budget that costs most of the run: 20 minutes of ES bring the default egg only to
about the bigram's bits/byte (issue #20). Counting bigrams costs a pass over the training split,
no gradients; the ES run then spends its steps on what the bigram cannot do (context).

How, for a model whose path from token to logits, with the blocks' contributions zero, is
``head(norm_out(embed(token)))`` (egg):

1. The target logits: 16·log2 P(next | prev) (the head's unit is 1/16 bit), each row shifted so its
   largest value is just under the int8 limit (softmax does not see the shift; the clip then only
   flattens odds below 2^-15.9, which cost nothing measurable).
2. The embedding: the rank-D SVD directions of those logits, scaled to the int8 range.
3. The head: least squares, weighted by how often each byte precedes, from the normalised
   embedding rows (computed by the model's own norm) to the target logits, rounded to int8; the
   output norm's gain is chosen among a few values by the expected bits under the bigram itself.
4. The blocks add nothing: recurrent candidate (``wh``, ``uh``) and MLP output (``down``) weights 0,
   so the state stays 0 and the residual stream passes through; ES perturbations of those zeros
   are what it learns context from.

Rank D caps what this can reach: on the default corpus the rank-32 bigram scores 3.75 bits/byte
against the full table's 3.64, the rank-64 one 3.64 (so ``--hidden 64`` starts at the bigram).

A tied head (the int8 transformer: its head is its embedding) cannot take a head of its own; how its
start is fitted instead is told where it is, at :func:`init_tied_from_bigram`.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from ..ops.int8 import EXP_STEPS_PER_NAT, QMAX

GAINS = (8, 12, 16, 24, 32, 48, 64)  # output-norm gains tried (16 = 1.0 in 4-bit fixed point)


def bigram_log2(tokens: Tensor, vocab: int) -> tuple[Tensor, Tensor]:
    """(log2 P(next | prev) with add-one smoothing (vocab, vocab), how often each token precedes (vocab,))."""
    t = tokens.reshape(-1).long().cpu()
    counts = torch.zeros(vocab * vocab, dtype=torch.float64)
    counts.index_add_(0, t[:-1] * vocab + t[1:], torch.ones(t.numel() - 1, dtype=torch.float64))
    counts = counts.view(vocab, vocab)
    probs = (counts + 1) / (counts.sum(1, keepdim=True) + vocab)
    return probs.log2(), counts.sum(1)


def target_logits(log2_probs: Tensor) -> Tensor:
    """The head's int8 target: 16·log2 P, each row's maximum moved to QMAX - 0.5, clipped below."""
    shifted = 16.0 * (log2_probs - log2_probs.max(1, keepdim=True).values) + (QMAX - 0.5)
    return shifted.clamp(-QMAX, QMAX)


def expected_bits(logits16: Tensor, log2_probs: Tensor, weights: Tensor) -> float:
    """Bits per token under the bigram itself of int logits in 1/16-bit units, rows weighted by ``weights``."""
    logq = torch.log_softmax(logits16.double() * (math.log(2) / 16), dim=1) / math.log(2)
    per_row = -(log2_probs.exp2() * logq).sum(1)
    return float((per_row * weights).sum() / weights.sum())


def _check_table(model, log2_probs: Tensor) -> None:
    vocab = model.vocab_size
    if log2_probs.shape != (vocab, vocab):
        raise ValueError(f"log2_probs must be ({vocab}, {vocab}), got {tuple(log2_probs.shape)}")


def init_from_bigram(model, log2_probs: Tensor, weights: Tensor) -> float:
    """Set ``model`` (an :class:`~hyperscalees.models.egg.Egg`, or a tied-head
    :class:`~hyperscalees.models.int8_transformer.Int8Transformer`) to start as a rank-D bigram of
    ``log2_probs``; returns the expected bits per token of the result under that bigram."""
    _check_table(model, log2_probs)
    if getattr(model, "head", None) is None:                           # tied head: the embedding is the head
        return init_tied_from_bigram(model, log2_probs, weights)
    return _init_egg(model, log2_probs, weights)


@torch.no_grad()
def _init_egg(model, log2_probs: Tensor, weights: Tensor) -> float:
    vocab, dim = model.vocab_size, model.dim
    target = target_logits(log2_probs.double())
    u, s, _ = torch.linalg.svd(target)
    k = min(dim, vocab)                                                 # a width past the vocabulary adds nothing
    a = torch.zeros(vocab, dim, dtype=torch.float64)
    a[:, :k] = u[:, :k] * s[:k].sqrt()
    embed = (a * (QMAX / a.abs().max())).round().clamp(-QMAX, QMAX).to(torch.int8)
    w = weights.double().clamp_min(1.0).sqrt()[:, None]
    best = None
    for gain in GAINS:
        model.norm_out.weight.fill_(gain)
        x = model.norm_out(embed).double()                              # (V, D), exactly as the forward
        # columns past k are zero: solve on the first k only (full rank). On the rank-deficient whole,
        # LAPACK's solution varied from call to call and once cost 0.3 bits after int8 rounding.
        head = torch.zeros(vocab, dim, dtype=torch.float64)
        head[:, :k] = torch.linalg.lstsq(w * x[:, :k], w * target * model.head.divisor).solution.T
        head = head.round().clamp(-QMAX, QMAX).to(torch.int8)
        model.head.weight.copy_(head)
        logits = model.head(model.norm_out(embed)).double()
        bits = expected_bits(logits, log2_probs.double(), weights.double())
        if best is None or bits < best[0]:
            best = (bits, gain, head)
    bits, gain, head = best
    model.embed.weight.copy_(embed)
    model.norm_out.weight.fill_(gain)
    model.head.weight.copy_(head)
    for block in model.blocks:
        for layer in (block.wh, block.uh, block.down):
            layer.weight.zero_()
    return bits


# -- a tied head (int8 transformer) ------------------------------------------------------------------
# With every residual branch adding nothing, token i's logits over j are LN_f(requant(E_i)) · E_j / d_head:
# E_i on both sides, so the form is E_i diag(g / m_i) E_jᵀ + b·E_j (g, b: the output norm's gain and
# bias; m_i: the mean |x| it divides by). That is symmetric up to a per-row temperature and a per-column
# bias, and a bigram is not ("q" -> "u" is likely, "u" -> "q" is not). The token's own path has one more
# piece that can break the symmetry: d-eggs' init MLP, a function of the token alone, x_i = requant(E_i +
# MLP(E_i)), so the left factor need not be E. The fit is Adam on expected bits under the bigram, in two
# stages: the symmetric form (embedding, output gain and bias; signed gains make it indefinite, as the
# symmetrised log-odds are) on a smooth image of the path, then everything with the init MLP through
# every rounding of the int8 path (straight-through); each is scored exactly in int8, the better kept.
# On the default corpus (expected bits/byte on the train split; the full table: 3.51): symmetric 3.71 at
# width 32 and 3.65 at width 64; with the init MLP 3.56 at width 32.
TIED_FIT_STEPS = 1000
TIED_GAIN_SCALES = (0.71, 1.0, 1.41)  # the fitted output gain times these, picked by exact int8 bits


def _ste(t: Tensor, rounded: Tensor) -> Tensor:
    """``rounded`` forward, the identity backward (straight through): the fit sees the int8 path's
    roundings, which cost the unrounded fit's init MLP 0.5 bits/byte when it was rounded afterwards."""
    return t + (rounded - t).detach()


def _int8(t: Tensor) -> Tensor:
    return _ste(t, t.round().clamp(-QMAX, QMAX))


def _requant(x: Tensor) -> Tensor:
    v = x * (QMAX / x.abs().amax(-1, keepdim=True).clamp_min(1e-6))
    return _ste(v, v.abs().add(0.5).floor().copysign(v))              # round half away from zero


def _norm(x: Tensor, gain: Tensor, bias: Tensor) -> Tensor:
    m = x.abs().sum(-1, keepdim=True).div(x.shape[-1]).floor().clamp_min(1.0).detach()
    v = x * _int8(gain) / m
    return (_ste(v, v.trunc()) + _int8(bias)).clamp(-QMAX, QMAX)


def _floor_div(x: Tensor, d: int) -> Tensor:
    v = x / d
    return _ste(v, v.floor())


def _smooth_logits(p: dict, div: dict) -> Tensor:
    """The symmetric stage's image of the path: no roundings (a smoother fit, 0.08 bits/byte better than
    one through them; its rounding then costs 0.05), the clips kept. In nats."""
    e = p["embed"]
    x = e * (QMAX / e.abs().amax(-1, keepdim=True).clamp_min(1e-6))
    n = (x * p["gain"] / x.abs().mean(-1, keepdim=True).clamp_min(1.0) + p["bias"]).clamp(-QMAX, QMAX)
    return n @ e.T / div["head"] / EXP_STEPS_PER_NAT


def _tied_logits(p: dict, div: dict) -> Tensor:
    """The token-alone path of an int8 transformer with neutral blocks (embedding, init MLP, requant,
    output norm, tied head), in float64 with every rounding of the int8 forward (straight-through
    gradients), in nats: the same numbers as ``int_forward`` on each token alone (tested)."""
    e = _int8(p["embed"])
    u = (_floor_div(_norm(e, p["gain0"], p["bias0"]) @ _int8(p["up"]).T, div["up"]) + _int8(p["up_bias"]))
    g = torch.nn.functional.gelu(u.clamp(-QMAX, QMAX) / 16) * 16
    g = _ste(g, g.abs().add(0.5).floor().copysign(g))                # the GELU table
    x = _requant(e + _floor_div(g @ _int8(p["down"]).T, div["down"]) + _int8(p["down_bias"]))
    return _floor_div(_norm(x, p["gain"], p["bias"]) @ e.T, div["head"]) / EXP_STEPS_PER_NAT


def _fit(p: dict, div: dict, log2_probs: Tensor, weights: Tensor, logits_of, steps: int = TIED_FIT_STEPS) -> None:
    """Adam on every tensor of ``p`` (in place, kept in the int8 range) for the fewest expected bits per
    token of ``logits_of(p, div)``."""
    probs, w = log2_probs.exp2(), weights.clamp_min(1.0) / weights.clamp_min(1.0).sum()
    params = [t.requires_grad_() for t in p.values()]
    opt = torch.optim.Adam(params, lr=0.5)
    for _ in range(steps):
        logq = torch.log_softmax(logits_of(p, div), dim=1) / math.log(2)
        loss = (-(probs * logq).sum(1) * w).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            for t in params:
                t.clamp_(-QMAX, QMAX)
    for t in params:
        t.requires_grad_(False)


def _symmetric_start(log2_probs: Tensor, dim: int) -> dict:
    """Embedding and output gain from the leading eigenvectors of the symmetrised, row-centred log-odds."""
    target = log2_probs - log2_probs.mean(1, keepdim=True)
    vals, vecs = torch.linalg.eigh((target + target.T) / 2)
    top = vals.abs().argsort(descending=True)[:min(dim, len(vals))]
    e = torch.zeros(len(vals), dim, dtype=torch.float64)
    e[:, :len(top)] = vecs[:, top] * vals[top].abs().sqrt()
    gain = torch.full((dim,), 16.0, dtype=torch.float64)
    gain[:len(top)] *= vals[top].sign()
    return {"embed": e * (QMAX / e.abs().max()), "gain": gain, "bias": torch.zeros(dim, dtype=torch.float64)}


def _to_int8(t: Tensor) -> Tensor:
    return t.round().clamp(-QMAX, QMAX).to(torch.int8)


def neutralise_blocks(model) -> None:
    """Zero what each residual branch of an int8 transformer adds (attention's O, the MLPs' down
    projection and bias), so every requant passes the stream through and the logits of a token do not
    depend on the tokens before it; ES perturbations of those zeros are what it learns context from."""
    mlps = [block.mlp for block in model.blocks] + ([model.init_mlp] if model.init_mlp is not None else [])
    for layer in [block.o for block in model.blocks] + [mlp.down for mlp in mlps]:
        layer.weight.zero_()
        if layer.bias is not None:
            layer.bias.zero_()
    model.embed_bias.weight.zero_()


def _tensors(model) -> dict:
    """The model's int8 tensors the fit sets, by the fit's names."""
    out = {"embed": model.embed.weight, "gain": model.norm_out.weight, "bias": model.norm_out.bias}
    if model.init_mlp is not None:
        m = model.init_mlp
        out.update(gain0=m.norm.weight, bias0=m.norm.bias, up=m.up.weight, up_bias=m.up.bias,
                   down=m.down.weight, down_bias=m.down.bias)
    return out


def _load_and_score(model, p: dict, lp: Tensor, w: Tensor) -> tuple[float, dict]:
    """Round ``p`` into ``model`` with the best of TIED_GAIN_SCALES; (exact expected bits, the int8 tensors)."""
    tensors, best = _tensors(model), None
    for name, value in p.items():
        tensors[name].copy_(_to_int8(value))
    tokens = torch.arange(model.vocab_size)[:, None]                  # each token alone: no context
    for scale in TIED_GAIN_SCALES:
        tensors["gain"].copy_(_to_int8(p["gain"] * scale))
        logits = model.int_forward(tokens)[:, 0].double() * (16 / (EXP_STEPS_PER_NAT * math.log(2)))
        bits = expected_bits(logits, lp, w)                            # expected_bits reads 1/16-bit units
        if best is None or bits < best[0]:
            best = (bits, {k: t.clone() for k, t in tensors.items()})
    return best


@torch.no_grad()
def init_tied_from_bigram(model, log2_probs: Tensor, weights: Tensor) -> float:
    """Set an :class:`~hyperscalees.models.int8_transformer.Int8Transformer` to start from the bigram of
    ``log2_probs`` (embedding, output norm and init MLP fitted; blocks neutral); returns the exact
    expected bits per token of the int8 result under that bigram."""
    lp, w = log2_probs.double(), weights.double()
    div = {"head": model.embed.head_divisor}
    neutralise_blocks(model)
    p = _symmetric_start(lp, model.dim)
    with torch.enable_grad():
        _fit(p, div, lp, w, _smooth_logits)
    best = _load_and_score(model, p, lp, w)
    if model.init_mlp is not None:
        m = model.init_mlp
        div.update(up=m.up.divisor, down=m.down.divisor)
        p = {k: t.double() for k, t in best[1].items()}               # down is 0: the same start
        with torch.enable_grad():
            _fit(p, div, lp, w, _tied_logits)
        best = min(best, _load_and_score(model, p, lp, w), key=lambda r: r[0])
    for name, t in _tensors(model).items():
        t.copy_(best[1][name])
    return best[0]
