"""ESConfig.antithetic=False (issue 42): every member its own draw; estimator unbiased at both settings.

The unbiasedness checks average the estimate of many seeds on a quadratic whose gradient is known
and bound every coordinate's z-score: a wrong normalisation (dividing by pairs instead of
members, say) or a member reusing another's draw moves the mean by many standard errors.
"""
import math

import pytest
import torch
from torch import nn

import hyperscalees as hs
from hyperscalees.distributed import LocalBackend
from hyperscalees.engine import load_run, make_config, run
from hyperscalees.nn.module_es import member_delta
from hyperscalees.strategies.config import ESConfig

TARGET = torch.linspace(-1, 1, 12).view(3, 4)


def es_for(seed, antithetic, population=8, rank=1, **kw):
    torch.manual_seed(0)
    model = nn.Linear(4, 3, bias=False)
    return hs.EGGROLL(model, population=population, sigma=0.1, rank=rank, lr=0.01, seed=seed, shaping="raw",
                      antithetic=antithetic, **kw)


def deltas(es):
    pop = es.ask()
    store = es.strategy.store(pop)
    return [member_delta(store, "weight", i).float() for i in range(pop.size)]


@pytest.mark.parametrize("antithetic,population", [(True, 8), (False, 8), (False, 7)])
def test_the_estimate_is_unbiased_on_a_quadratic(antithetic, population):
    """f(W) = 5 − |W − T|²: ∇f = −2(W − T); Gaussian smoothing leaves a quadratic's gradient as it is."""
    estimates = []
    for seed in range(300):
        es = es_for(seed, antithetic, population)
        w = es.model.weight.detach()
        f = torch.stack([5 - ((w + d - TARGET) ** 2).sum() for d in deltas(es)])
        estimates.append(es.gradient_estimate(f)["weight"])
    g = torch.stack(estimates).double()                          # (seeds, 3, 4)
    truth = (-2 * (es.model.weight.detach() - TARGET)).double()
    z = (g.mean(0) - truth) / (g.std(0) / math.sqrt(g.shape[0]))
    assert z.abs().max() < 4.5, z
    assert (g.mean(0) - truth).abs().max() < 0.25 * truth.abs().max()  # not unbiased by a huge variance alone


def test_independent_members_have_their_own_draws_and_pairs_stay_antithetic():
    anti, ind = deltas(es_for(3, True)), deltas(es_for(3, False))
    for k in range(4):
        assert torch.equal(anti[2 * k + 1], -anti[2 * k])
        assert not torch.allclose(ind[2 * k + 1], -ind[2 * k]) and not torch.allclose(ind[2 * k + 1], ind[2 * k])
    # member 2k's draw is shared by both settings' index 2k... and independent member i is draw i
    pop = es_for(3, False).ask()
    assert torch.equal(pop.pairs(), torch.arange(8)) and torch.equal(pop.signs(), torch.ones(8, 1))
    assert pop.num_pairs == 8 and pop.per_draw == 1


def test_a_members_forward_is_its_materialized_matrix():
    """The batched low-rank forward of any chunk (odd sizes too) equals x (W + σ/√r A_i B_iᵀ)ᵀ + b + σ e_i."""
    torch.manual_seed(1)
    model = nn.Linear(6, 5)
    es = hs.EGGROLL(model, population=7, sigma=0.2, rank=2, seed=4, antithetic=False)
    x = torch.randn(7 * 3, 6)                                     # 3 rows per member, member-major
    store = es.strategy.store(es.ask())
    for lo, hi in [(0, 7), (0, 3), (3, 7), (5, 6)]:
        with es.perturbed((lo, hi)):
            y = model(x[lo * 3:hi * 3])
        for i in range(lo, hi):
            w = model.weight.double() + member_delta(store, "weight", i)
            b = model.bias.double() + member_delta(store, "bias", i)
            ref = x[i * 3:(i + 1) * 3].double() @ w.T + b
            torch.testing.assert_close(y[(i - lo) * 3:(i - lo + 1) * 3].double(), ref, rtol=1e-5, atol=1e-5)


def test_odd_populations_train_and_pair_settings_are_refused():
    with pytest.raises(ValueError, match="even integer"):
        ESConfig(population=7)
    assert ESConfig(population=7, antithetic=False).population == 7
    for shaping in ("pair_sign", "ternary", "pair_sign_adaptive", "pair_sign_filtered"):
        with pytest.raises(ValueError, match=f"shaping '{shaping}'.*antithetic=False"):
            ESConfig(antithetic=False, shaping=shaping)
    with pytest.raises(ValueError, match="antithetic must be True or False"):
        ESConfig(antithetic="no")
    es = es_for(0, False, population=7, rank=2)
    before = es.model.weight.detach().clone()
    x = torch.randn(7, 4)
    es.tell(hs.evaluate(es, lambda m, lo, hi, step: -m(x[lo:hi]).pow(2).sum(1), chunk=3))
    assert not torch.equal(before, es.model.weight)


def test_resume_with_independent_members_is_exact(tmp_path):
    es = {"population": 33, "seed": 5, "antithetic": False}
    run(make_config("xor", es=es, engine={"steps": 6, "out": str(tmp_path / "full")}), LocalBackend)
    run(make_config("xor", es=es, engine={"steps": 3, "out": str(tmp_path / "part")}), LocalBackend)
    run(make_config("xor", es=es, engine={"steps": 6, "resume": str(tmp_path / "part")}), LocalBackend)
    full, part = load_run(tmp_path / "full")[2].state_dict(), load_run(tmp_path / "part")[2].state_dict()
    anti = {"population": 32, "seed": 5}
    run(make_config("xor", es=anti, engine={"steps": 6, "out": str(tmp_path / "anti")}), LocalBackend)
    other = load_run(tmp_path / "anti")[2].state_dict()
    for k in full:
        assert torch.equal(full[k], part[k]), k
    assert any(not torch.equal(full[k], other[k]) for k in full)


def test_tie_sigma_growth_without_pairs_waits_for_the_whole_population_to_tie():
    es = es_for(0, False, population=5, tie_sigma_growth=2.0)
    strategy = es.strategy
    strategy._respond_to_ties(torch.tensor([1.0, 1.0, 2.0, 2.0, 1.0]))   # "pairs" (0,1), (2,3) tie: not enough
    assert strategy.tie_scale == 1.0
    strategy._respond_to_ties(torch.full((5,), 3.0))
    assert strategy.tie_scale == 2.0
