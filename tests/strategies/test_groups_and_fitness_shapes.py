"""Parameter groups (per-group lr, weight decay, σ multiplier) and fitness of shape (P, G) with
per-group shaping and per-member weights."""
import math
import warnings

import pytest
import torch

from hyperscalees.ops._reference import gradient_reference
from hyperscalees.strategies import EGGROLLStrategy, ESMode, OpenESStrategy
from hyperscalees.strategies.shaping import centered_rank, episode_weighted_z_score, z_score

from es_helpers import make, unit_noise

MODES = {"w": ESMode.MM_PARAM, "b": ESMode.PARAM, "v": ESMode.PARAM}


def params():
    g = torch.Generator().manual_seed(0)
    return {"w": torch.randn(6, 5, generator=g), "b": torch.randn(6, generator=g), "v": torch.randn(3, generator=g)}


# -- parameter groups ---------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [EGGROLLStrategy, OpenESStrategy])
def test_each_group_steps_with_its_own_lr(cls):
    p = params()
    groups = [{"params": ["w"], "lr": 0.3}, {"params": "v", "lr": 0.01, "name": "vec"}]
    s = make(cls, p, MODES, population=16, sigma=0.1, lr=0.1, optimizer="sgd", shaping="z_score", groups=groups)
    assert [g.name for g in s.groups] == ["group0", "vec", "default"]
    assert [g.names for g in s.groups] == [("w",), ("v",), ("b",)]
    f = torch.randn(16, generator=torch.Generator().manual_seed(1))
    before = {n: t.clone() for n, t in p.items()}
    est = s.gradient_estimate(f)
    s.tell(f)
    for n, lr in {"w": 0.3, "v": 0.01, "b": 0.1}.items():   # SGD ascent: θ += lr_g ĝ
        torch.testing.assert_close(p[n] - before[n], lr * est[n], rtol=1e-5, atol=1e-7)


def test_group_sigma_scale_scales_the_noise_and_keeps_the_estimate_unbiased():
    p = params()
    s = make(EGGROLLStrategy, p, MODES, population=10, sigma=0.1, rank=2, shaping="raw",
             groups=[{"params": ["w", "b"], "sigma_scale": 2.5}])
    pop = s.ask()
    store = s.store(pop)
    assert math.isclose(store.sigma("w"), 0.25) and math.isclose(store.scale("w"), 0.25 / math.sqrt(2))
    assert math.isclose(store.sigma("v"), 0.1) and math.isclose(store.scale("v"), 0.1)
    f = torch.randn(10, generator=torch.Generator().manual_seed(2))
    got = s.gradient_estimate(f)
    for n, sig in {"w": 0.25, "b": 0.25, "v": 0.1}.items():  # ĝ = Σ f ε / (N σ_p), ε the unit noise
        torch.testing.assert_close(got[n], gradient_reference(list(unit_noise(s, n, pop)), f, sig), rtol=1e-5, atol=1e-6)


def test_group_weight_decay_applies_to_that_group_only():
    p = params()
    s = make(EGGROLLStrategy, p, MODES, population=8, sigma=0.1, lr=0.1, optimizer="adamw",
             groups=[{"params": "b", "weight_decay": 0.5}])
    s.tell(torch.zeros(8))  # equal fitness: ĝ = 0, only decay moves anything
    assert torch.equal(p["w"], params()["w"]) and torch.equal(p["v"], params()["v"])
    torch.testing.assert_close(p["b"], params()["b"] * (1 - 0.1 * 0.5))


@pytest.mark.parametrize("groups,err,match", [
    ([{"params": ["w"]}, {"params": ["w*"]}], ValueError, "'w' is in two groups"),
    ([{"params": ["nope*"]}], ValueError, r"\['nope\*'\] match no trainable"),
    ([{"params": ["w"], "momentum": 0.9}], ValueError, r"unknown key\(s\) \['momentum'\]"),
    ([{"params": ["w"], "lr": -1.0}], ValueError, "lr must be a finite number > 0, got -1.0"),
    ([{"params": ["w"], "sigma_scale": float("inf")}], ValueError, "sigma_scale must be a finite"),
    ([{"lr": 0.1}], TypeError, "'params' entry"),
    ([{"params": [3]}], TypeError, "glob pattern"),
])
def test_group_errors_name_the_bad_value(groups, err, match):
    with pytest.raises(err, match=match):
        make(EGGROLLStrategy, params(), MODES, population=8, groups=groups)


# -- fitness (P, G) ---------------------------------------------------------------------------
def strategy(**kw):
    return make(EGGROLLStrategy, params(), MODES, **({"population": 8, "sigma": 0.1, "shaping": "centered_rank"} | kw))


def test_group_fitness_mean_shapes_the_members_mean_score():
    s = strategy()
    f = torch.randn(8, 5, generator=torch.Generator().manual_seed(3))
    assert torch.equal(s.shape(s.ask(), f), centered_rank(f.mean(dim=1)))


def test_group_fitness_per_group_shapes_each_column_then_averages():
    s = strategy(group_fitness="per_group")
    g = torch.Generator().manual_seed(4)
    f = torch.randn(8, 3, generator=g) + torch.tensor([0.0, 100.0, -50.0])  # prompts of very different scale
    want = torch.stack([centered_rank(f[:, j]) for j in range(3)], dim=1).mean(dim=1)
    assert torch.equal(s.shape(s.ask(), f), want)
    # per-group: a prompt's offset cannot dominate; plain mean: it would not matter either, but scale does
    f2 = f.clone()
    f2[:, 1] *= 1000
    assert torch.equal(s.shape(s.ask(), f2), want)


def test_per_member_weights_weight_the_z_score_and_zero_weight_members_carry_nothing():
    s = strategy(shaping="z_score")
    f = torch.randn(8, generator=torch.Generator().manual_seed(5))
    w = torch.tensor([1.0, 1.0, 3.0, 3.0, 0.0, 0.0, 2.0, 2.0])
    shaped = s.shape(s.ask(), f, weights=w)
    torch.testing.assert_close(shaped, episode_weighted_z_score(f, w))
    assert shaped[4] == 0 and shaped[5] == 0
    assert torch.equal(s.shape(s.ask(), f, weights=torch.ones(8)), z_score(f, torch.ones(8)))
    m = s.tell(f, weights=w)
    assert m["step"] == 1


@pytest.mark.parametrize("kw,weights,match", [
    ({}, torch.ones(8), "weights need a shaping that takes them"),                 # centered_rank
    ({"shaping": "z_score"}, torch.ones(7), r"weights must have shape \(8,\)"),
    ({"shaping": "z_score"}, -torch.ones(8), "finite and non-negative"),
])
def test_weight_errors(kw, weights, match):
    s = strategy(**kw)
    with pytest.raises(ValueError, match=match):
        s.shape(s.ask(), torch.randn(8), weights=weights)


def test_nonfinite_scores_in_a_group_take_that_groups_worst():
    s = strategy(shaping="raw", group_fitness="per_group")
    f = torch.tensor([[1.0, 10.0], [2.0, float("nan")], [3.0, 30.0], [4.0, 40.0],
                      [5.0, 50.0], [6.0, 60.0], [7.0, 70.0], [8.0, float("inf")]])
    shaped = s.shape(s.ask(), f)
    fixed = f.clone()
    fixed[1, 1] = fixed[7, 1] = 10.0  # the worst finite score of column 1
    assert torch.equal(shaped, fixed.mean(dim=1))
    m = s.tell(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the once-per-process note on reading the count
        assert m["nonfinite"] == 2


def test_group_fitness_config_is_validated():
    with pytest.raises(ValueError, match="unknown group_fitness 'median'"):
        strategy(group_fitness="median")


def test_a_group_lr_scale_follows_the_configs_lr_and_cannot_be_given_with_lr():
    from hyperscalees.strategies.groups import resolve_groups
    groups = resolve_groups(["a", "b"], [{"params": "a", "lr_scale": 0.25, "name": "slow"}], lr=0.4, weight_decay=0.0)
    assert [(g.name, g.lr) for g in groups] == [("slow", pytest.approx(0.1)), ("default", 0.4)]
    with pytest.raises(ValueError, match="give lr or lr_scale, not both"):
        resolve_groups(["a"], [{"params": "a", "lr": 0.1, "lr_scale": 0.5}], lr=0.4, weight_decay=0.0)
    with pytest.raises(ValueError, match="lr must be a finite number > 0"):
        resolve_groups(["a"], [{"params": "a", "lr_scale": 0.0}], lr=0.4, weight_decay=0.0)
