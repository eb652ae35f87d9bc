"""EGG: the integer forward equals the slow reference bit for bit, unperturbed and member by member."""
import pytest
import torch

import hyperscalees as hs
from hyperscalees.models.egg import Egg
from hyperscalees.models.registry import LM_MODELS, build_lm
from hyperscalees.ops._reference import egg_reference

from int_members import member_weights


def tokens_with_resets(rows, t, seed):
    g = torch.Generator().manual_seed(seed)
    tok = torch.randint(1, 256, (rows, t), generator=g)
    tok[0, 3] = 0          # a document separator mid-window resets the state
    tok[-1, 0] = 0
    return tok


def random_state(rows, layers, dim, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-127, 128, (rows, layers, dim), generator=g).to(torch.int8)


def test_registered_and_integer():
    assert LM_MODELS["egg"] is Egg
    m = build_lm("egg", 256, dim=8, layers=1)
    assert m.is_integer and all(p.dtype == torch.int8 for p in m.parameters())
    assert m.es_defaults["update_rule"] in hs.strategies.RULES


def test_unperturbed_forward_matches_reference():
    torch.manual_seed(0)
    m = Egg(dim=16, layers=2)
    tok, state = tokens_with_resets(3, 9, 1), random_state(3, 2, 16, 2)
    y, s = m.int_forward(tok, state)
    es = hs.EGGROLL(m, population=2, groups=m.es_groups(), **m.es_defaults)
    ref_y, ref_s = egg_reference(*member_weights(m, es, None), tok, state, 2, 16)
    assert torch.equal(y.to(torch.int64), ref_y) and torch.equal(s.to(torch.int64), ref_s)
    assert y.dtype == torch.int8 and int(y.abs().max()) <= 127
    assert len(torch.unique(y)) > 20                      # not all saturated
    logits, s2 = m(tok, state)                           # the contract: natural-log float logits
    assert logits.dtype == torch.float32 and torch.equal(s2, s)
    torch.testing.assert_close(logits, y.float() * (torch.log(torch.tensor(2.0)) / 16))


@pytest.mark.parametrize("distribution,sigma,rank", [("int", 2.0**-6, 1), ("int_uniform", 2.0**-3, 4)])
def test_population_forward_matches_each_materialized_member(distribution, sigma, rank):
    torch.manual_seed(3)
    m = Egg(dim=16, layers=2)
    pop, rows = 6, 2
    es = hs.EGGROLL(m, population=pop, groups=m.es_groups(), **dict(m.es_defaults, distribution=distribution,
                                                                        sigma=sigma, rank=rank), seed=7)
    tok = tokens_with_resets(rows, 7, 4).repeat(pop, 1)          # both members of a pair see the same bytes
    state = random_state(rows * pop, 2, 16, 5)
    with es.perturbed():
        y, s = m.int_forward(tok, state)
    outs = []
    for i in range(pop):
        sl = slice(i * rows, (i + 1) * rows)
        ref_y, ref_s = egg_reference(*member_weights(m, es, i), tok[sl], state[sl], 2, 16)
        assert torch.equal(y[sl].to(torch.int64), ref_y), f"member {i}: logits differ"
        assert torch.equal(s[sl].to(torch.int64), ref_s), f"member {i}: state differs"
        outs.append(y[sl])
    assert not torch.equal(outs[0], outs[1]) and not torch.equal(outs[0], outs[2])  # the noise reached the forward


def test_non_integer_noise_and_scales_are_refused():
    m = Egg(dim=8, layers=1)
    tok = torch.randint(0, 256, (4, 3))
    es = hs.EGGROLL(m, population=4, groups=m.es_groups(), **dict(m.es_defaults, distribution="gaussian"))
    with pytest.raises(ValueError, match="integer-valued noise.*gaussian"), es.perturbed():
        m(tok)
    es = hs.EGGROLL(m, population=4, groups=m.es_groups(), **dict(m.es_defaults, sigma=0.003))
    with pytest.raises(ValueError, match="power of two.*0.003"), es.perturbed():
        m(tok)


def test_bad_inputs_are_named():
    m = Egg(dim=8, layers=1)
    with pytest.raises(ValueError, match="state must be"):
        m(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 2, 8, dtype=torch.int8))
    with pytest.raises(ValueError, match="tokens must be"):
        m(torch.zeros(3, dtype=torch.long))


def test_adaptive_noise_overlays_reach_the_forward_exactly():
    """Rows/columns faded by the rule's overlays: the population forward still equals each member."""
    torch.manual_seed(6)
    m = Egg(dim=16, layers=1)
    pop, rows = 4, 2
    es = hs.EGGROLL(m, population=pop, groups=m.es_groups(), **dict(m.es_defaults, update_rule="int_adamw",
                                                                        sigma=2.0**-5), seed=2)
    rule = es.strategy.rule
    g = torch.Generator().manual_seed(0)
    for ovs in rule.overlays.values():
        for ov in ovs:
            ov.copy_(torch.randint(-20, 100, ov.shape, generator=g))
    es.strategy._store = None                        # the next store reads the new overlays
    store = es.store()
    assert store.overlay("blocks.0.wf.weight") is not None
    tok = tokens_with_resets(rows, 5, 8).repeat(pop, 1)
    state = random_state(rows * pop, 1, 16, 9)
    with es.perturbed():
        y, s = m.int_forward(tok, state)
    for i in range(pop):
        sl = slice(i * rows, (i + 1) * rows)
        ref_y, ref_s = egg_reference(*member_weights(m, es, i), tok[sl], state[sl], 1, 16)
        assert torch.equal(y[sl].to(torch.int64), ref_y) and torch.equal(s[sl].to(torch.int64), ref_s)


def test_openes_dense_integer_noise_matches_members():
    """Full-rank integer noise (OpenES) through the same layers: each member equals its materialized weights."""
    torch.manual_seed(7)
    m = Egg(dim=8, layers=1)
    pop, rows = 4, 1
    es = hs.OpenES(m, population=pop, groups=m.es_groups(), **dict(m.es_defaults, sigma=2.0**-4), seed=5)
    tok = tokens_with_resets(rows, 4, 3).repeat(pop, 1)
    state = random_state(rows * pop, 1, 8, 4)
    with es.perturbed():
        y, _ = m.int_forward(tok, state)
    for i in range(pop):
        ref_y, _ = egg_reference(*member_weights(m, es, i), tok[i:i + 1], state[i:i + 1], 1, 8)
        assert torch.equal(y[i:i + 1].to(torch.int64), ref_y), f"member {i}"
