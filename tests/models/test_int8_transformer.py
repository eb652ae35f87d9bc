"""The int8 transformer: integer forward equals the slow token-by-token reference bit for bit."""
import pytest
import torch

import hyperscalees as hs
from hyperscalees.models.int8_transformer import Int8Transformer
from hyperscalees.models.int8_transformer import attention
from hyperscalees.models.registry import LM_MODELS
from hyperscalees.ops._reference import transformer_reference

from int_members import member_weights


def test_registered_and_contract():
    assert LM_MODELS["int8-transformer"] is Int8Transformer
    torch.manual_seed(0)
    m = Int8Transformer(dim=16, layers=1, heads=2)
    tok = torch.randint(0, 256, (2, 5))
    logits, state = m(tok)
    assert state is None and logits.shape == (2, 5, 256) and logits.dtype == torch.float32
    assert torch.equal(logits * 6, m.int_forward(tok).float())            # one logit unit = 1/6 nat
    assert all(p.dtype == torch.int8 for p in m.parameters())
    with pytest.raises(ValueError, match="even head sizes"):
        Int8Transformer(dim=12, heads=4)


def test_causal_attention_never_reads_the_future():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randint(-127, 128, (1, 6, 8), generator=g) for _ in range(3))
    out = attention(q, k, v, heads=2)
    k2, v2 = k.clone(), v.clone()
    k2[:, 4:], v2[:, 4:] = 0, 99
    assert torch.equal(attention(q, k2, v2, heads=2)[:, :4], out[:, :4])


@pytest.mark.parametrize("init_mlp", [True, False])
def test_unperturbed_forward_matches_reference(init_mlp):
    torch.manual_seed(2)
    m = Int8Transformer(dim=16, layers=2, heads=2, init_mlp=init_mlp)
    tok = torch.randint(0, 256, (2, 6), generator=torch.Generator().manual_seed(3))
    es = hs.EGGROLL(m, population=2, groups=m.es_groups(), **m.es_defaults)
    want = transformer_reference(*member_weights(m, es, None), tok, 2, 2, init_mlp=init_mlp)
    got = m.int_forward(tok)
    assert torch.equal(got, want)
    assert len(torch.unique(got)) > 30, torch.unique(got)   # the head is not saturated or flat


def check_members(m, es, pop, rows, layers, seed):
    tok = torch.randint(0, 256, (rows, 5), generator=torch.Generator().manual_seed(seed)).repeat(pop, 1)
    with es.perturbed():
        y = m.int_forward(tok)
    for i in range(pop):
        sl = slice(i * rows, (i + 1) * rows)
        want = transformer_reference(*member_weights(m, es, i), tok[sl], layers, 2)
        assert torch.equal(y[sl], want), f"member {i}"
    assert not torch.equal(y[:rows], y[rows:2 * rows])                   # the noise reached the forward
    return y


@pytest.mark.parametrize("distribution,sigma,rank,pop", [("int_uniform", 2.0**-4, 1, 4), ("int", 2.0**-6, 1, 4),
                                                         ("int_uniform", 2.0**-3, 4, 6)])
def test_population_forward_matches_each_materialized_member(distribution, sigma, rank, pop):
    torch.manual_seed(4)
    m = Int8Transformer(dim=16, layers=1, heads=2)
    es = hs.EGGROLL(m, population=pop, groups=m.es_groups(),
                    **dict(m.es_defaults, distribution=distribution, sigma=sigma, rank=rank), seed=3)
    check_members(m, es, pop, 2, 1, 5)


def test_adaptive_noise_overlays_reach_the_forward_exactly():
    """Rows/columns faded by the rule's overlays: the population forward still equals each member."""
    torch.manual_seed(6)
    m = Int8Transformer(dim=16, layers=1, heads=2)
    es = hs.EGGROLL(m, population=4, groups=m.es_groups(),
                    **dict(m.es_defaults, update_rule="int_adamw", sigma=2.0**-4), seed=2)
    g = torch.Generator().manual_seed(0)
    for ovs in es.strategy.rule.overlays.values():
        for ov in ovs:
            ov.copy_(torch.randint(-20, 100, ov.shape, generator=g))
    es.strategy._store = None                        # the next store reads the new overlays
    assert es.store().overlay("blocks.0.q.weight") is not None
    check_members(m, es, 4, 2, 1, 8)


def test_openes_dense_integer_noise_matches_members():
    """Full-rank integer noise (OpenES) through the same layers: each member equals its materialized weights."""
    torch.manual_seed(7)
    m = Int8Transformer(dim=16, layers=1, heads=2)
    es = hs.OpenES(m, population=4, groups=m.es_groups(), **dict(m.es_defaults, sigma=2.0**-4), seed=5)
    check_members(m, es, 4, 1, 1, 3)
