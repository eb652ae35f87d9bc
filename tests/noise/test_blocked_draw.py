"""Hashing a large draw block by block gives exactly the values of one unblocked pass."""
import pytest
import torch

import hyperscalees.noise.sampling as sampling
from hyperscalees.noise import Population


@pytest.mark.parametrize("distribution", ["gaussian", "uniform", "rademacher", "int"])
@pytest.mark.parametrize("block", [7, 64, 1000])
def test_blocked_draw_is_bit_identical(monkeypatch, distribution, block):
    pop = Population(step=3, seed=11, size=40, sigma=0.1, rank=2, distribution=distribution)
    pairs = torch.arange(3, 20)
    rows = torch.randint(0, 50, (pairs.numel(), 9))
    monkeypatch.setattr(sampling, "BLOCK", 1 << 30)
    whole = (sampling.lowrank_factors(pop, "w", 31, 13, pairs), sampling.full_noise(pop, "b", (5, 7), pairs),
             sampling.lowrank_rows(pop, "e", 13, pairs, rows), sampling.full_rows(pop, "e", 13, pairs, rows))
    monkeypatch.setattr(sampling, "BLOCK", block)
    blocked = (sampling.lowrank_factors(pop, "w", 31, 13, pairs), sampling.full_noise(pop, "b", (5, 7), pairs),
               sampling.lowrank_rows(pop, "e", 13, pairs, rows), sampling.full_rows(pop, "e", 13, pairs, rows))
    flat = lambda t: [x for y in t for x in (y if isinstance(y, tuple) else (y,))]
    for a, b in zip(flat(whole), flat(blocked)):
        assert torch.equal(a, b)
