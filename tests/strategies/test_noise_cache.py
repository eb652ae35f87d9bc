"""The per-step noise cache changes speed and memory, never results."""
import copy

import torch
from torch import nn

import hyperscalees as hs


def _run(cache_mib, chunk):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.LayerNorm(32), nn.Linear(32, 3))
    es = hs.EGGROLL(model, population=64, sigma=0.1, rank=2, lr=0.05, optimizer="sgd", noise_cache_mib=cache_mib)
    x = torch.randn(5, 6)
    fits = []
    for _ in range(3):
        f = hs.evaluate(es, lambda m, lo, hi, step: -m(x.repeat(hi - lo, 1)).pow(2).sum(1).view(hi - lo, 5).mean(1), chunk)
        fits.append(f)
        es.tell(f)
    return model, fits, es


def test_cache_budget_never_changes_fitness_or_update():
    cached, f_cached, es = _run(64.0, 16)
    fresh, f_fresh, _ = _run(0.0, 16)
    for a, b in zip(f_cached, f_fresh):
        assert torch.equal(a, b)  # same noise values whether sliced from a whole draw or drawn per chunk
    for p, q in zip(cached.parameters(), fresh.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-6)


def test_cache_respects_its_budget():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64))
    budget_mib = 0.3  # one layer's whole-population draw (2048 pairs * 128 values * 4 B = 1 MiB) does not fit
    es = hs.EGGROLL(model, population=4096, sigma=0.1, noise_cache_mib=budget_mib)
    with es.perturbed((0, 64)):
        model(torch.randn(64, 64))
    assert es.strategy.store().bytes_used <= budget_mib * 2**20
    es2 = hs.EGGROLL(copy.deepcopy(model), population=64, sigma=0.1, noise_cache_mib=budget_mib)
    with es2.perturbed((0, 16)):
        es2.model(torch.randn(16, 64))
    assert 0 < es2.strategy.store().bytes_used <= budget_mib * 2**20  # small draws are kept


def _square_model():
    torch.manual_seed(0)  # four 16x16 matrices (one factor length) and a 16x8 one (another)
    return nn.Sequential(*[nn.Linear(16, 16) for _ in range(4)], nn.Linear(16, 8))


def test_a_whole_step_draw_brings_its_same_length_siblings_with_the_values_of_single_draws():
    from hyperscalees.noise import draw_noise, sampling
    es = hs.EGGROLL(_square_model(), population=8, sigma=0.1, rank=2, seed=3)
    store = es.strategy.store()
    first = store.lowrank_order[0]
    store.cached(first)
    if not sampling.batches(store.pop, store.devices[first]):
        assert sorted(store._draws) == [first]  # no batching sampler here: one at a time
        return
    squares = [n for n in store.lowrank_order if store.specs[n].shape == (16, 16)]
    assert sorted(store._draws) == sorted(squares)  # the 16x8 matrix waits for its own first use
    pairs, signs = store.members(0, 8, torch.device("cpu"))
    for n in [*squares, "4.weight"]:
        got = store.cached(n)
        alone = draw_noise(store.pop, n, store.specs[n].shape, pairs, signs, True, *store._scales[n])
        assert torch.equal(got.a, alone.a) and torch.equal(got.b, alone.b)  # element by element the same draw
        assert (got.sigma, got.scale) == (alone.sigma, alone.scale)
    assert store.bytes_used == sum(noise_bytes(store, n) for n in store._draws)


def noise_bytes(store, name):
    from hyperscalees.noise import noise_nbytes
    return noise_nbytes(store.specs[name].shape, store.pop, True)


def test_batched_draws_stay_within_the_budget():
    model = _square_model()
    one = 4 * (16 + 16) * 2 * 4  # pairs x factor length x rank x 4 bytes
    es = hs.EGGROLL(model, population=8, sigma=0.1, rank=2, seed=3, noise_cache_mib=2.5 * one / 2**20)
    store = es.strategy.store()
    store.cached(store.lowrank_order[0])
    assert len(store._draws) <= 2 and store.bytes_used <= store.budget_bytes
