"""Moments and ranges of every noise distribution, drawn through the real hash (~1e6 samples)."""
import math

import pytest
import torch

from hyperscalees.noise import Population
from hyperscalees.noise.distributions import DISTRIBUTIONS, INT_SCALE, bits_to_noise, to_unit_uniform
from hyperscalees.noise.sampling import full_noise

N = 1 << 20


def samples(distribution: str) -> torch.Tensor:
    pop = Population(step=0, seed=11, size=2 * 64, sigma=0.1, distribution=distribution)
    return full_noise(pop, "w", (N // 64,), pop.pairs()).reshape(-1).double()  # (N,)


def moments(x: torch.Tensor):
    m = x.mean()
    c = x - m
    var = c.pow(2).mean()
    return float(m), float(var), float(c.pow(3).mean() / var ** 1.5), float(c.pow(4).mean() / var ** 2)


def test_gaussian_moments():
    mean, var, skew, kurt = moments(samples("gaussian"))
    # standard errors at N=2^20: mean 1e-3, var 1.4e-3, skew 2.4e-3, kurt 4.8e-3 -> ~5 sigma bands
    assert abs(mean) < 5e-3 and abs(var - 1) < 7e-3
    assert abs(skew) < 1.2e-2 and abs(kurt - 3) < 2.5e-2


def test_gaussian_quantiles_match_normal():
    x = samples("gaussian")
    for z, p in [(-2.0, 0.02275), (-1.0, 0.15866), (0.0, 0.5), (1.0, 0.84134), (2.0, 0.97725)]:
        assert abs(float((x < z).double().mean()) - p) < 2.5e-3


def test_uniform_moments_and_range():
    x = samples("uniform")
    mean, var, skew, kurt = moments(x)
    assert abs(mean) < 5e-3 and abs(var - 1) < 5e-3 and abs(skew) < 1e-2
    assert abs(kurt - 1.8) < 1e-2                       # uniform kurtosis is 9/5
    assert float(x.abs().max()) < math.sqrt(3) and float(x.abs().max()) > math.sqrt(3) - 1e-3


def test_rademacher_values_and_balance():
    x = samples("rademacher")
    assert set(torch.unique(x).tolist()) == {-1.0, 1.0}
    assert abs(float(x.mean())) < 5e-3


def test_int_distribution_is_truncated_scaled_gaussian():
    x = samples("int")
    assert torch.equal(x, x.trunc())
    assert float(x.abs().max()) <= 127
    # trunc(16 z): mean 0, variance 256 - E[frac-loss] ~ 256 - 16*E|z|... within a few percent of 16^2
    mean, var, skew, _ = moments(x)
    assert abs(mean) < 0.1 and abs(var / INT_SCALE ** 2 - 1) < 0.05 and abs(skew) < 1e-2
    bits = torch.arange(-1000, 1000, dtype=torch.int32) * 2654435
    assert bits_to_noise(bits, "int", torch.int8).dtype == torch.int8


def test_unit_uniform_never_hits_endpoints():
    bits = torch.tensor([0, -1, 0x7FFFFFFF, -(1 << 31), 255, 256], dtype=torch.int32)
    u = to_unit_uniform(bits)
    assert bool(((u > 0) & (u < 1)).all())
    g = bits_to_noise(bits, "gaussian")
    assert bool(torch.isfinite(g).all())


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_dtype_cast_at_end(distribution):
    bits = torch.arange(0, 1 << 12, dtype=torch.int32) * 40503
    f32 = bits_to_noise(bits, distribution)
    bf = bits_to_noise(bits, distribution, torch.bfloat16)
    assert f32.dtype == torch.float32 and bf.dtype == torch.bfloat16
    assert torch.equal(bf, f32.to(torch.bfloat16))


def test_unknown_distribution_raises():
    with pytest.raises(ValueError, match="cauchy"):
        bits_to_noise(torch.zeros(2, dtype=torch.int32), "cauchy")
    with pytest.raises(ValueError, match="cauchy"):
        Population(step=0, seed=0, size=4, sigma=0.1, distribution="cauchy")
