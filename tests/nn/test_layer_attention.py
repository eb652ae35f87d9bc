"""nn.MultiheadAttention (and torch's Transformer layers built on it) as a population.

Every check compares the one batched population forward with the stock torch module
holding member i's materialized weights (``member_model``), run on member i's rows. Every
member gets the same B rows (tiled), so "members differ" can only come from their weights.
Sizes: P members, B rows per member, L target / S source length, E embed dim, H heads.
"""
import pytest
import torch
from torch import nn

import hyperscalees as hs

from members import member_model

P, B, L, S, E, H = 4, 2, 5, 6, 8, 2
STRATEGIES = [(hs.EGGROLL, 1), (hs.EGGROLL, 3), (hs.OpenES, 1)]
TOL = dict(rtol=1e-5, atol=1e-5)


def _rows(t, i, dim=0, m=B):
    """Member i's rows of a member-major tensor."""
    return t.narrow(dim, i * m, m)


def _tiled(*shape, dim=0):
    """A member-major tensor whose P members all hold the same random rows."""
    return torch.cat([torch.randn(shape)] * P, dim=dim)


def _assert_distinct(members, base):
    """Each member's output differs from the unperturbed model's and from every other member's."""
    for i, yi in enumerate(members):
        assert not torch.allclose(yi, base, atol=1e-4), f"member {i} is not perturbed"
        for j in range(i + 1, len(members)):
            assert not torch.allclose(yi, members[j], atol=1e-4), f"members {i} and {j} coincide"


def _member_args(args, i, bdim):
    """Member i's slice of (query, key, value), keeping which of them are the same tensor."""
    sliced = {id(t): _rows(t, i, bdim) for t in args}
    return [sliced[id(t)] for t in args]


def _member_masks(masks, i):
    """Member i's key_padding_mask rows (N, S) and 3-D attn_mask rows (N·H, L, S); a 2-D mask is shared."""
    out = dict(masks)
    if masks.get("key_padding_mask") is not None:
        out["key_padding_mask"] = _rows(masks["key_padding_mask"], i)
    am = masks.get("attn_mask")
    if am is not None and am.dim() == 3:
        out["attn_mask"] = _rows(am, i, m=B * H)
    return out


def _check_mha(m, es, qkv, masks, need_weights, refs=None):
    """Population forward == per-member stock forwards (output and weights); members really differ.

    ``refs``: the materialized members, if the caller already made them."""
    bdim = 0 if m.batch_first else 1
    refs = refs or [member_model(m, es, i) for i in range(P)]
    with es.perturbed():
        y, w = m(*qkv, need_weights=need_weights, **masks)
    base, _ = m(*qkv, need_weights=need_weights, **masks)
    assert y.shape == base.shape
    base = _rows(base, 0, bdim)  # every member's unperturbed output
    for i in range(P):
        ref, ref_w = refs[i](*_member_args(qkv, i, bdim), need_weights=need_weights, **_member_masks(masks, i))
        torch.testing.assert_close(_rows(y, i, bdim), ref, **TOL)
        if need_weights:
            torch.testing.assert_close(_rows(w, i), ref_w, **TOL)
        else:
            assert w is None and ref_w is None
    _assert_distinct([_rows(y, i, bdim) for i in range(P)], base)


def _mha(layout, batch_first, **kw):
    """An MHA and member-major (query, key, value) for a layout: self-attention, cross-attention
    (key is value, packed in_proj_weight) or separate q/k/v weights (kdim, vdim != E)."""
    dims = dict(kdim=5, vdim=7) if layout == "kdim" else {}
    m = nn.MultiheadAttention(E, H, batch_first=batch_first, **dims, **kw)

    def x(t, f):
        return _tiled(B, t, f) if batch_first else _tiled(t, B, f, dim=1)

    q = x(L, E)
    if layout == "self":
        return m, (q, q, q)
    if layout == "cross":
        kv = x(S, E)
        return m, (q, kv, kv)
    return m, (q, x(S, 5), x(S, 7))


def _bool_masks(src_len):
    """A padded last key for every other row and an upper-triangular attn_mask (True = masked out)."""
    kpm = torch.zeros(P * B, src_len, dtype=torch.bool)
    kpm[::2, -1] = True
    return {"key_padding_mask": kpm, "attn_mask": torch.ones(L, src_len).triu(2).bool()}


@pytest.mark.parametrize("cls,rank", STRATEGIES)
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("layout", ["self", "cross", "kdim"])
def test_mha_population_matches_members(cls, rank, batch_first, layout):
    torch.manual_seed(0)
    m, qkv = _mha(layout, batch_first)
    es = cls(m, population=P, sigma=0.05, rank=rank, seed=1)
    masks = _bool_masks(L if layout == "self" else S)
    refs = [member_model(m, es, i) for i in range(P)]
    _check_mha(m, es, qkv, masks, True, refs)
    _check_mha(m, es, qkv, masks, False, refs)
    _check_mha(m, es, qkv, {}, False, refs)


@pytest.mark.parametrize("kind", ["float_3d", "float_kpm", "causal_hint"])
def test_mha_masks_and_is_causal_match_members(kind):
    """Float masks, a per-row (N·H, L, S) attn_mask and torch's is_causal hint (SDPA's causal path)."""
    torch.manual_seed(1)
    m, qkv = _mha("self", True)
    es = hs.EGGROLL(m, population=P, sigma=0.05, rank=2, seed=2)
    if kind == "float_3d":
        masks = {"attn_mask": _tiled(B * H, L, L)}
    elif kind == "float_kpm":
        masks = {"key_padding_mask": torch.where(_tiled(B, L) < -0.5, -1e4, 0.0),
                 "attn_mask": torch.randn(L, L)}
    else:
        masks = {"attn_mask": nn.Transformer.generate_square_subsequent_mask(L), "is_causal": True}
    refs = [member_model(m, es, i) for i in range(P)]
    for need_weights in (True, False):
        _check_mha(m, es, qkv, masks, need_weights, refs)


def test_mha_average_attn_weights_false_gives_per_head_weights():
    torch.manual_seed(2)
    m, qkv = _mha("cross", True)
    es = hs.EGGROLL(m, population=P, sigma=0.05, rank=1, seed=3)
    with es.perturbed():
        _, w = m(*qkv, average_attn_weights=False)
    assert w.shape == (P * B, H, L, S)
    for i in range(P):
        _, ref_w = member_model(m, es, i)(*_member_args(qkv, i, 0), average_attn_weights=False)
        torch.testing.assert_close(_rows(w, i), ref_w, **TOL)


@pytest.mark.parametrize("cls,rank", [(hs.EGGROLL, 2), (hs.OpenES, 1)])
def test_mha_bias_kv_and_zero_attn_are_per_member(cls, rank):
    """bias_k/bias_v are full-rank per-member vectors; the appended keys are never masked."""
    torch.manual_seed(3)
    m, qkv = _mha("cross", False, add_bias_kv=True, add_zero_attn=True)
    es = cls(m, population=P, sigma=0.05, rank=rank, seed=4)
    assert {"bias_k", "bias_v"} <= set(es.specs)
    refs = [member_model(m, es, i) for i in range(P)]
    for need_weights in (True, False):
        _check_mha(m, es, qkv, _bool_masks(S), need_weights, refs)


@pytest.mark.parametrize("layout", ["self", "kdim"])
def test_mha_without_biases_matches_members(layout):
    torch.manual_seed(11)
    m, qkv = _mha(layout, True, bias=False)
    es = hs.EGGROLL(m, population=P, sigma=0.05, rank=2, seed=11)
    assert not any("bias" in name for name in es.specs)
    _check_mha(m, es, qkv, _bool_masks(L if layout == "self" else S), False)


def _encoder_layer(dropout=0.0):
    return nn.TransformerEncoderLayer(E, H, dim_feedforward=16, dropout=dropout, batch_first=True)


@pytest.mark.parametrize("train", [True, False])
def test_encoder_layer_matches_members_and_learns(train):
    """Eval mode included: torch's fused encoder fast path must not bypass the perturbation."""
    torch.manual_seed(4)
    model = _encoder_layer().train(train)
    es = hs.EGGROLL(model, population=P, sigma=0.05, rank=2, seed=5)
    x = _tiled(B, L, E)
    with es.perturbed():
        y = model(x)
    with torch.no_grad():  # the references may take torch's fast path
        base = _rows(model(x), 0)
        for i in range(P):
            torch.testing.assert_close(_rows(y, i), member_model(model, es, i)(_rows(x, i)), **TOL)
    _assert_distinct([_rows(y, i) for i in range(P)], base)

    fitness = -y.reshape(P, -1).pow(2).mean(1)
    names = ["self_attn.in_proj_weight", "self_attn.out_proj.weight", "linear1.weight", "norm1.weight"]
    grads = es.gradient_estimate(fitness)
    assert all(grads[n].norm() > 0 for n in names)
    params = dict(model.named_parameters())
    before = {n: params[n].detach().clone() for n in names}
    es.tell(fitness)
    assert all(not torch.equal(before[n], params[n]) for n in names)


def test_encoder_stack_eval_matches_members_on_unpadded_positions():
    """TransformerEncoder in eval mode with a padding mask: torch's nested-tensor path in the
    reference (which zeroes padded positions) agrees with the population on every real token."""
    torch.manual_seed(5)
    model = nn.TransformerEncoder(_encoder_layer(), num_layers=2).eval()
    es = hs.EGGROLL(model, population=P, sigma=0.05, rank=1, seed=6)
    x = _tiled(B, L, E)
    pad = torch.zeros(P * B, L, dtype=torch.bool)
    pad[1::2, -2:] = True  # left-aligned padding, as the nested path needs
    keep = ~pad[:B]        # (B, L) every member's real tokens
    with es.perturbed():
        y = model(x, src_key_padding_mask=pad)
    with torch.no_grad():
        base = model(x, src_key_padding_mask=pad)[:B][keep]
        for i in range(P):
            ref = member_model(model, es, i)(_rows(x, i), src_key_padding_mask=_rows(pad, i))
            torch.testing.assert_close(_rows(y, i)[keep], ref[keep], **TOL)
    _assert_distinct([_rows(y, i)[keep] for i in range(P)], base)


def test_transformer_with_causal_decoder_matches_members():
    """nn.Transformer: encoder self-attention, decoder causal self-attention and cross-attention."""
    torch.manual_seed(6)
    model = nn.Transformer(E, H, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=16,
                           dropout=0.0, batch_first=True).eval()
    es = hs.EGGROLL(model, population=P, sigma=0.05, rank=1, seed=7)
    src, tgt = _tiled(B, S, E), _tiled(B, L, E)
    mask = nn.Transformer.generate_square_subsequent_mask(L)
    with es.perturbed():
        y = model(src, tgt, tgt_mask=mask, tgt_is_causal=True)
    with torch.no_grad():
        base = _rows(model(src, tgt, tgt_mask=mask, tgt_is_causal=True), 0)
        for i in range(P):
            ref = member_model(model, es, i)(_rows(src, i), _rows(tgt, i), tgt_mask=mask, tgt_is_causal=True)
            torch.testing.assert_close(_rows(y, i), ref, **TOL)
    _assert_distinct([_rows(y, i) for i in range(P)], base)
    assert es.store().unapplied() == []


def test_out_proj_is_perturbed_when_in_proj_is_excluded():
    torch.manual_seed(7)
    m, qkv = _mha("self", True)
    es = hs.EGGROLL(m, population=P, sigma=0.05, rank=2, seed=8, es_map={"*in_proj*": "excluded"})
    assert set(es.specs) >= {"out_proj.weight", "out_proj.bias"}
    _check_mha(m, es, qkv, {}, need_weights=False)
    assert es.store().unapplied() == []


def test_dropout_in_train_mode_runs():
    """Default dropout 0.1: no exact reference, but the forward is finite, shaped, and stochastic."""
    torch.manual_seed(8)
    model = nn.TransformerEncoderLayer(E, H, dim_feedforward=16, batch_first=True).train()
    m, qkv = _mha("self", True, dropout=0.1)
    m.train()
    for mod, args in ((model, (qkv[0],)), (m, qkv)):
        es = hs.EGGROLL(mod, population=P, sigma=0.05, rank=1, seed=9)
        with es.perturbed():
            first, second = mod(*args), mod(*args)
        first, second = (o[0] if isinstance(o, tuple) else o for o in (first, second))
        assert first.shape == (P * B, L, E) and torch.isfinite(first).all()
        assert not torch.equal(first, second)


def test_mha_weights_with_dropout_are_returned_after_dropout():
    torch.manual_seed(9)
    m, qkv = _mha("self", True, dropout=0.5)
    es = hs.EGGROLL(m.train(), population=P, sigma=0.05, rank=1, seed=10)
    with es.perturbed():
        y, w = m(*qkv, average_attn_weights=False)
    assert torch.isfinite(y).all() and (w == 0).any()  # dropped weights, as torch returns them


@pytest.mark.parametrize("batch_first", [True, False])
def test_unbatched_and_non_member_major_inputs_are_refused(batch_first):
    torch.manual_seed(10)
    m, _ = _mha("self", batch_first)
    es = hs.EGGROLL(m, population=P, sigma=0.05, rank=1)
    with es.perturbed():
        x = torch.randn(L, E)
        with pytest.raises(ValueError, match="unbatched"):
            m(x, x, x)
        x = torch.randn((P * B + 1, L, E) if batch_first else (L, P * B + 1, E))
        with pytest.raises(ValueError, match="member-major"):
            m(x, x, x)
        x = torch.randn((P * B, L, E) if batch_first else (L, P * B, E))
        with pytest.raises(ValueError, match="is_causal"):
            m(x, x, x, is_causal=True)
        with pytest.raises(ValueError, match="key_padding_mask"):
            m(x, x, x, key_padding_mask=torch.zeros(P * B, L + 1, dtype=torch.bool))
