"""The update's fast paths against the paths they replace, bit for bit.

- the first GEMM writes the estimate (β = 0) instead of adding onto zeros;
- −ĝ comes from negated pair weights instead of a negation pass over ĝ.

(The layer plan kept per perturbation block: tests/nn/test_plan_cache.py.)
"""
import pytest
import torch
from torch import nn

import hyperscalees as hs
from hyperscalees.ops.update import full_sum_, lowrank_sum_


def factors(k, rows, cols, r, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(k, rows, r, generator=g), torch.randn(k, cols, r, generator=g),
            torch.randn(k, generator=g))


@pytest.mark.parametrize("k,rows,cols,r", [(16, 300, 70, 1), (600, 40, 130, 2), (3, 1, 9000, 1)])
@pytest.mark.parametrize("fixed", [True, False])
def test_writing_the_first_block_equals_adding_onto_zeros(k, rows, cols, r, fixed):
    a, b, w = factors(k, rows, cols, r)
    want = lowrank_sum_(torch.zeros(rows, cols), a, b, w, fixed)
    garbage = torch.full((rows, cols), float("nan"))  # never read
    assert torch.equal(lowrank_sum_(garbage, a, b, w, fixed, accumulate=False), want)
    eps = torch.randn(k, rows, 5)
    assert torch.equal(full_sum_(torch.full((rows, 5), float("nan")), eps, w, fixed, accumulate=False),
                       full_sum_(torch.zeros(rows, 5), eps, w, fixed))


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 300), nn.Tanh(), nn.Linear(300, 20), nn.Tanh(), nn.Linear(20, 1))


@pytest.mark.parametrize("cls,kw", [(hs.EGGROLL, dict(population=40, rank=1)),
                                    (hs.EGGROLL, dict(population=600, rank=2, update_chunk=256, noise_cache_mib=0)),
                                    (hs.OpenES, dict(population=20))])
def test_the_negated_estimate_is_the_estimate_negated_exactly(cls, kw):
    model = mlp()
    es = cls(model, sigma=0.05, seed=3, **kw)
    x = torch.randn(3, 6).repeat(es.population, 1)
    with es.perturbed():
        model(x)
    pop, shaped = es.ask(), torch.randn(es.population)
    plus = es.strategy.estimate(pop, shaped)
    minus = es.strategy.estimate(pop, shaped, negate=True)
    assert plus.keys() == minus.keys()
    for n in plus:
        assert torch.equal(minus[n], plus[n].neg()), n
    assert es.strategy.rule.takes_negated_estimate  # the torch.optim rule is handed −ĝ
