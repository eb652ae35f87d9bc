"""Noise is a pure function of (seed, name, epoch, pair, element): independent, reusable, chunkable."""
import pytest
import torch

from hyperscalees.noise import Population
from hyperscalees.noise.sampling import draw, full_noise, full_rows, lowrank_b, lowrank_factors, lowrank_rows


def pop(step=0, seed=0, size=64, rank=1, noise_reuse=1, distribution="gaussian", baseline_every=0):
    return Population(step=step, seed=seed, size=size, sigma=0.1, rank=rank, noise_reuse=noise_reuse,
                      distribution=distribution, baseline_every=baseline_every)


def corr(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.reshape(-1).double(), y.reshape(-1).double()
    x, y = x - x.mean(), y - y.mean()
    return float((x * y).sum() / (x.norm() * y.norm()))


N = 1 << 17  # per-draw samples; |corr| of independent draws has sd 1/sqrt(N) = 2.8e-3
TOL = 5 / N ** 0.5


def noise(p, name, pairs=None):
    pairs = p.pairs() if pairs is None else pairs
    return full_noise(p, name, (N // pairs.numel(),), pairs)


def test_layers_get_different_uncorrelated_noise():
    p = pop()
    a, b = noise(p, "layer0.weight"), noise(p, "layer1.weight")
    assert not torch.equal(a, b)
    assert abs(corr(a, b)) < TOL
    # also no shifted copy: element j of one layer vs element j+1 of the other
    assert abs(corr(a[:, 1:], b[:, :-1])) < TOL


def test_pairs_steps_and_seeds_are_uncorrelated():
    p = pop()
    x = noise(p, "w")                                               # (K, n)
    assert abs(corr(x[0::2], x[1::2])) < TOL                        # pair k vs pair k+1
    assert abs(corr(x, noise(pop(step=1), "w"))) < TOL              # step
    assert abs(corr(x, noise(pop(seed=1), "w"))) < TOL              # seed
    assert abs(corr(x[:, :-1], x[:, 1:])) < TOL                     # neighbouring elements
    # the pair-mean is not shared either: each pair's row mean looks like N(0, 1/n)
    row_means = x.mean(dim=1)
    assert float(row_means.abs().max()) < 5 / x.shape[1] ** 0.5


def test_noise_reuse_shares_draws_within_an_epoch():
    idx = torch.arange(100, dtype=torch.int32)
    at = lambda step, reuse: draw(pop(step=step, noise_reuse=reuse), "w", torch.arange(4), idx)
    assert torch.equal(at(0, 3), at(1, 3)) and torch.equal(at(0, 3), at(2, 3))
    assert not torch.equal(at(2, 3), at(3, 3))
    assert torch.equal(at(3, 3), at(5, 3))
    assert torch.equal(at(0, 0), at(12345, 0))                      # 0 = one draw forever
    assert not torch.equal(at(0, 1), at(1, 1))


def test_antithetic_members_get_opposite_perturbations():
    p = pop(size=8)
    signs = p.signs()                                               # (K, 2)
    assert torch.equal(signs, torch.tensor([[1.0, -1.0]] * 4))
    eps = full_noise(p, "w", (5,), p.pairs())                       # one draw per pair
    member = (signs.unsqueeze(-1) * eps.unsqueeze(1)).reshape(8, 5)  # member i = s_i ε_{i//2}
    assert torch.equal(member[0::2], -member[1::2])
    assert torch.equal(p.pairs(), torch.arange(4))
    assert torch.equal(p.pairs(2, 6), torch.tensor([1, 2]))
    assert torch.equal(p.signs(2, 6), torch.tensor([[1.0, -1.0]] * 2))


def test_baseline_members_have_zero_sign():
    p = pop(size=8, baseline_every=4)
    assert p.signs().reshape(-1).tolist() == [0, 0, 1, -1, 0, 0, 1, -1]


@pytest.mark.parametrize("rank", [1, 3])
def test_chunked_draws_are_bit_identical(rank):
    p = pop(size=40, rank=rank)
    whole_a, whole_b = lowrank_factors(p, "fc.weight", 7, 5, p.pairs())
    parts = [lowrank_factors(p, "fc.weight", 7, 5, p.pairs(lo, hi)) for lo, hi in [(0, 2), (2, 18), (18, 40)]]
    assert torch.equal(torch.cat([a for a, _ in parts]), whole_a)
    assert torch.equal(torch.cat([b for _, b in parts]), whole_b)
    dense = full_noise(p, "b", (3, 4), p.pairs())
    assert torch.equal(torch.cat([full_noise(p, "b", (3, 4), p.pairs(lo, hi))
                                  for lo, hi in [(0, 6), (6, 8), (8, 40)]]), dense)


@pytest.mark.parametrize("rank", [1, 2, 4])
def test_row_and_factor_draws_are_slices_of_the_full_draw(rank):
    p = pop(size=12, rank=rank)
    vocab, dim = 13, 6
    pairs = p.pairs()
    a, b = lowrank_factors(p, "emb.weight", vocab, dim, pairs)      # (K, vocab, r), (K, dim, r)
    assert a.shape == (6, vocab, rank) and b.shape == (6, dim, rank)
    rows = torch.randint(0, vocab, (6, 9), generator=torch.Generator().manual_seed(rank))
    got = lowrank_rows(p, "emb.weight", dim, pairs, rows)           # (K, 9, r)
    assert torch.equal(got, torch.stack([a[k, rows[k]] for k in range(6)]))
    assert torch.equal(lowrank_b(p, "emb.weight", dim, pairs), b)
    dense = full_noise(p, "emb.weight", (vocab, dim), pairs)        # OpenES table
    assert torch.equal(full_rows(p, "emb.weight", dim, pairs, rows), torch.stack([dense[k, rows[k]] for k in range(6)]))


def test_lowrank_layout_b_first_then_a():
    p = pop(size=4, rank=2)
    a, b = lowrank_factors(p, "w", 3, 5, p.pairs())
    z = full_noise(p, "w", ((5 + 3) * 2,), p.pairs())
    assert torch.equal(b.reshape(2, -1), z[:, :10]) and torch.equal(a.reshape(2, -1), z[:, 10:])


@pytest.mark.parametrize("distribution", ["gaussian", "uniform", "rademacher", "int"])
def test_dtype_and_distribution_passthrough(distribution):
    p = pop(size=4, distribution=distribution)
    x = full_noise(p, "w", (64,), p.pairs(), dtype=torch.bfloat16)
    assert x.dtype == torch.bfloat16
    assert torch.equal(x, full_noise(p, "w", (64,), p.pairs()).to(torch.bfloat16))


@pytest.mark.parametrize("kwargs,match", [
    (dict(size=7), "7"), (dict(size=0), "0"), (dict(size=4.0), "4.0"),
    (dict(sigma=0.0), "0.0"), (dict(sigma=-1.0), "-1.0"), (dict(sigma=float("nan")), "nan"),
    (dict(sigma=float("inf")), "inf"), (dict(rank=0), "rank.*0"), (dict(noise_reuse=-1), "-1"),
    (dict(baseline_every=3), "3"), (dict(size=8, baseline_every=6), "6"),
])
def test_population_validation(kwargs, match):
    args = dict(step=0, seed=0, size=8, sigma=0.1) | kwargs
    with pytest.raises(ValueError, match=match):
        Population(**args)


@pytest.mark.parametrize("lo,hi", [(1, 4), (0, 3), (4, 4), (0, 10), (-2, 4)])
def test_member_ranges_must_be_whole_pairs(lo, hi):
    p = pop(size=8)
    with pytest.raises(ValueError, match=rf"\[{lo}, {hi}\)"):
        p.pairs(lo, hi)
    with pytest.raises(ValueError, match="member range"):
        p.signs(lo, hi)


def test_population_is_frozen():
    p = pop()
    with pytest.raises(AttributeError):
        p.step = 3
    assert p.num_pairs == 32
