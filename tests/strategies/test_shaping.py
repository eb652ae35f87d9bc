"""Fitness shaping numbers, non-finite fitness handling and input validation."""
import warnings

import numpy as np
import pytest
import torch

from hyperscalees.strategies import STRATEGIES, SHAPINGS, EGGROLLStrategy, ESConfig, ESMode, metrics, shaping
from hyperscalees.strategies.shaping import (centered_rank, check_fitness, episode_weighted_z_score,
                                             get_shaping, group_normalize, pair_sign, raw, sanitize, z_score)

from es_helpers import make

F = torch.tensor([3.0, -1.0, 2.5, 7.0, 0.0, 0.5, -4.0, 2.0])


def test_z_score_numbers():
    r = F.double().numpy()
    want = (r - r.mean()) / np.sqrt(r.var() + 1e-5)          # population variance, eps inside the sqrt
    np.testing.assert_allclose(z_score(F).numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(z_score(torch.full((4,), 2.0)).numpy(), 0.0)


def test_centered_rank_numbers_range_and_order():
    assert centered_rank(torch.tensor([3.0, 1.0, 2.0])).tolist() == [0.5, -0.5, 0.0]
    c = centered_rank(F)
    assert float(c.min()) == -0.5 and float(c.max()) == 0.5
    order = torch.argsort(F)
    assert bool((c[order].diff() > 0).all())                 # strictly increasing with fitness
    np.testing.assert_allclose(float(c.sum()), 0.0, atol=1e-6)
    # ties share their mean rank: [1, 1, 2, 0] -> ranks [1.5, 1.5, 3, 0] / 3 - 0.5
    torch.testing.assert_close(centered_rank(torch.tensor([1.0, 1.0, 2.0, 0.0])),
                               torch.tensor([0.0, 0.0, 0.5, -0.5]))
    assert centered_rank(torch.full((6,), 4.0)).abs().max() == 0
    # invariant to any increasing transform of the scores
    torch.testing.assert_close(centered_rank(torch.exp(F)), c)


def test_group_normalize_uses_group_means_and_global_std():
    f = torch.tensor([1.0, 2.0, 3.0, 4.0, 10.0, 20.0])
    g = f.view(3, 2).double().numpy()
    want = (g - g.mean(axis=1, keepdims=True)) / np.sqrt(f.double().numpy().var() + 1e-5)
    np.testing.assert_allclose(group_normalize(f, 2).numpy(), want.reshape(-1), rtol=1e-6)
    with pytest.raises(ValueError, match="4"):
        group_normalize(f, 4)
    with pytest.raises(ValueError, match="1"):
        group_normalize(f, 1)


def test_pair_sign_and_ternary():
    f = torch.tensor([3.0, 1.0, 1.0, 3.0, 2.0, 2.0, 1.0, 1.0 + 1e-12])
    assert pair_sign(f).tolist() == [0.5, -0.5, -0.5, 0.5, 0.0, 0.0, 0.0, 0.0]
    assert pair_sign(torch.tensor([1.0, 1.2, 5.0, 4.0]), dead_zone=0.5).tolist() == [0.0, 0.0, 0.5, -0.5]
    assert SHAPINGS["ternary"](torch.tensor([2.0, 1.0, 1.0, 1.0])).tolist() == [0.5, -0.5, 0.0, 0.0]


def test_episode_weighted_z_score():
    f = torch.tensor([1.0, 2.0, 4.0, 100.0])
    n = torch.tensor([1, 3, 2, 0])
    w, x = n.double().numpy(), f.double().numpy()
    mean = (w * x).sum() / w.sum()
    var = (w * (x - mean) ** 2).sum() / w.sum()
    want = np.where(w > 0, (x - mean) / np.sqrt(var + 1e-5), 0.0)
    np.testing.assert_allclose(episode_weighted_z_score(f, n).numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(episode_weighted_z_score(f, torch.ones(4)).numpy(), z_score(f).numpy(), rtol=1e-6)
    assert episode_weighted_z_score(f, torch.zeros(4)).abs().max() == 0
    with pytest.raises(ValueError, match="non-negative"):
        episode_weighted_z_score(f, torch.tensor([1, -1, 1, 1]))


def test_raw_copies_and_registry_of_shapings():
    r = raw(F)
    assert torch.equal(r, F) and r.data_ptr() != F.data_ptr()
    assert {"raw", "z_score", "centered_rank", "pair_sign", "ternary"} <= set(SHAPINGS)
    fn = lambda f: f * 2
    assert get_shaping(fn) is fn
    with pytest.raises(ValueError, match="'nope'"):
        get_shaping("nope")


# ---- non-finite fitness ---------------------------------------------------------------------------
def small(**kw):
    g = torch.Generator().manual_seed(0)
    p = {"w": torch.randn(4, 3, generator=g), "b": torch.randn(4, generator=g)}
    return p, make(EGGROLLStrategy, p, {"w": ESMode.MM_PARAM, "b": ESMode.PARAM},
                   **(dict(population=16, sigma=0.1, lr=0.05) | kw))


def test_nonfinite_fitness_never_reaches_the_weights(monkeypatch):
    monkeypatch.setattr(metrics, "_warned_nonfinite", False)
    p, s = small()
    f = torch.linspace(-1, 1, 16)
    bad = f.clone()
    bad[[1, 4, 9]] = torch.tensor([float("nan"), float("inf"), float("-inf")])
    est = s.gradient_estimate(bad)
    replaced = torch.where(torch.isfinite(bad), bad, f[torch.isfinite(bad)].min())  # treated as the worst
    want = s.gradient_estimate(replaced)
    assert all(torch.equal(est[n], want[n]) for n in est)
    m = s.tell(bad)
    with pytest.warns(RuntimeWarning, match="3 non-finite"):  # said when the count is read
        assert m["nonfinite"] == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")                    # warned once: no second warning
        assert s.tell(bad)["nonfinite"] == 3
    assert all(bool(torch.isfinite(t).all()) for t in p.values())
    assert np.isfinite(m["fitness_mean"]) and m["fitness_max"] == float(f[torch.isfinite(bad)].max())


@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_all_nan_fitness_changes_nothing(monkeypatch, opt):
    monkeypatch.setattr(metrics, "_warned_nonfinite", True)
    p, s = small(optimizer=opt)
    before = {n: t.clone() for n, t in p.items()}
    m = s.tell(torch.full((16,), float("nan")))
    assert m["nonfinite"] == 16 and np.isnan(m["fitness_mean"]) and np.isnan(m["fitness_max"])
    assert all(torch.equal(p[n], before[n]) for n in p)


def test_nonfinite_shaped_values_move_nothing():
    """A custom shaping that returns NaN for a member: that member's noise gets weight zero."""
    p, s = small()
    shaped = torch.linspace(-1, 1, 16)
    broken = shaped.clone()
    broken[[2, 3]] = float("nan")
    zeroed = shaped.clone()
    zeroed[[2, 3]] = 0.0
    pop = s.ask()
    got, want = s.estimate(pop, broken), s.estimate(pop, zeroed)
    assert all(torch.equal(got[n], want[n]) for n in got)


def test_sanitize_counts():
    f, n = sanitize(torch.tensor([1.0, 2.0]))
    assert n == 0 and f.tolist() == [1.0, 2.0]


# ---- validation: every error names the bad value ---------------------------------------------------
@pytest.mark.parametrize("kwargs,match", [
    (dict(population=7), "population.*7"), (dict(population=0), "population.*0"),
    (dict(sigma=0.0), "sigma.*0.0"), (dict(sigma=-0.5), "sigma.*-0.5"), (dict(rank=0), "rank.*0"),
    (dict(optimizer="rmsprop"), "optimizer.*'rmsprop'"), (dict(distribution="cauchy"), "'cauchy'"),
    (dict(estimator="median"), "estimator 'median'"), (dict(lr=0.0), "lr.*0.0"), (dict(lr_decay=1.5), "lr_decay.*1.5"),
    (dict(sigma_decay=0.0), "sigma_decay.*0.0"), (dict(weight_decay=-1.0), "weight_decay.*-1.0"),
    (dict(update_chunk=0), "update_chunk.*0"), (dict(noise_reuse=-2), "noise_reuse.*-2"),
])
def test_config_errors_name_the_bad_value(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ESConfig(**kwargs)


def test_unknown_shaping_raises_at_construction():
    with pytest.raises(ValueError, match="'rank_sum'"):
        small(shaping="rank_sum")


@pytest.mark.parametrize("fitness,match", [(torch.zeros(15), r"\(16,\).*\(15,\)"), (torch.zeros(16, 2, 1), r"\(16, 2, 1\)"),
                                           (torch.zeros(8, 2), r"\(8, 2\)"),
                                           ([1.0] * 17, r"\(17,\)")])
def test_fitness_of_wrong_shape(fitness, match):
    _, s = small()
    with pytest.raises(ValueError, match=match):
        s.tell(fitness)


def test_fitness_coercion():
    assert check_fitness([1, 2, 3, 4], 4).dtype == torch.float32
    assert check_fitness(np.arange(4.0), 4).tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(TypeError, match="bool"):
        check_fitness(torch.ones(4, dtype=torch.bool), 4)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_everything_excluded_raises(name):
    with pytest.raises(ValueError, match="no trainable"):
        make(STRATEGIES[name], {"w": torch.zeros(2, 2)}, {"w": ESMode.EXCLUDED})
