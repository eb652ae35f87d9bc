"""Random-subspace evolution: θ = θ₀ + P·z with a seeded Fastfood P, ES on z ∈ ℝᵏ alone."""
import copy
import math

import pytest
import torch
from torch import nn

import hyperscalees as hs
from hyperscalees.nn.fastfood import Fastfood
from hyperscalees.nn.select import evolved_numbers
from hyperscalees.nn.subspace import install_subspace, merge_subspace
from hyperscalees.ops.hadamard import fwht
from hyperscalees.ops.ntt import hadamard_matrix

P = 8


def net(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))


@torch.no_grad()
def fitness(model, lo, hi, step=0):
    x = torch.linspace(-2, 2, 16).view(16, 1).repeat(1, 4) * torch.tensor([1.0, -0.5, 0.3, 0.8])
    y = model(x.repeat(hi - lo, 1)).view(hi - lo, 16)
    return -((y - torch.sin(x[:, 0])) ** 2).mean(dim=1)


def test_fwht_is_the_orthonormal_hadamard_transform():
    for n in (1, 2, 16, 128):
        x = torch.randn(3, 2, n, dtype=torch.float64)
        torch.testing.assert_close(fwht(x), x @ hadamard_matrix(n).double().T / math.sqrt(n))
    with pytest.raises(ValueError, match="power of two, got 12"):
        fwht(torch.zeros(12))


def test_fastfood_is_a_fixed_linear_map_with_unit_variance_per_direction():
    ff = Fastfood(key=7, d=3000, k=24)
    cols = ff.project(torch.eye(24, dtype=torch.float64))          # (k, d): P's columns, for this test only
    z = torch.randn(5, 24, dtype=torch.float64)
    torch.testing.assert_close(ff.project(z), z @ cols)             # linear, and the same P every call
    assert abs(cols.var().item() * 24 - 1) < 0.1                    # entries of variance 1/k
    assert not torch.allclose(Fastfood(key=8, d=3000, k=24).project(z), ff.project(z))
    with pytest.raises(ValueError, match="k must be a whole number >= 1, got 0"):
        Fastfood(key=7, d=10, k=0)


def test_the_model_is_unchanged_at_the_start_and_only_z_evolves():
    model = net()
    x = torch.randn(5, 4)
    before = model(x)
    es_map = install_subspace(model, 16)
    assert torch.equal(model(x), before)
    es = hs.EGGROLL(model, population=P, sigma=0.05, lr=0.05, es_map=es_map)
    assert es.strategy.trainable == ["hs_subspace_z"] and evolved_numbers(es) == 16
    theta0 = {k: v.clone() for k, v in model.state_dict().items() if k != "hs_subspace_z"}
    es.tell(hs.evaluate(es, fitness))
    assert all(torch.equal(model.state_dict()[k], v) for k, v in theta0.items())   # θ₀ stays; z moved
    assert not torch.equal(model(x), before)
    with pytest.raises(ValueError, match="already has a subspace"):
        install_subspace(model, 4)


def test_members_are_exact():
    model = net()
    es = hs.OpenES(model, population=P, sigma=0.1, lr=0.05, es_map=install_subspace(model, 16, seed=3))
    es.tell(hs.evaluate(es, fitness))
    x = torch.randn(3, 4)
    with es.perturbed():
        y = model(x.repeat(P, 1)).view(P, 3, 1)
    for i in range(P):
        with es.materialized(i):
            assert torch.equal(y[i], model(x)), i
    with es.perturbed((2, 6)):                                        # a chunk: members 2..5
        assert torch.equal(model(x.repeat(4, 1)).view(4, 3, 1), y[2:6])


def steps(es, n):
    for _ in range(n):
        es.tell(hs.evaluate(es, fitness))


def test_resume_is_bit_identical():
    def make(seed=0):
        model = net(seed)
        return hs.EGGROLL(model, population=P, sigma=0.05, lr=0.05, seed=5, es_map=install_subspace(model, 16))
    full = make()
    steps(full, 4)
    a = make()
    steps(a, 2)
    saved = copy.deepcopy(a.state_dict())
    b = make(seed=1)                                                  # other θ₀: the state replaces it
    b.load_state_dict(saved)
    steps(b, 2)
    for k, v in full.model.state_dict().items():
        assert torch.equal(b.model.state_dict()[k], v), k


def test_es_in_a_16_dimensional_subspace_lowers_the_loss_and_merges_to_a_plain_model():
    model = net()
    es = hs.EGGROLL(model, population=32, sigma=0.05, lr=0.03, seed=1, es_map=install_subspace(model, 16))
    start = -float(fitness(model, 0, 1)[0])
    steps(es, 40)
    trained = -float(fitness(model, 0, 1)[0])
    assert trained < 0.8 * start, (start, trained)
    x = torch.randn(6, 4)
    y = model(x)
    merge_subspace(model)
    assert set(model.state_dict()) == set(net().state_dict())
    assert all("forward" not in m.__dict__ for m in model.modules())
    assert all(p.requires_grad for p in model.parameters())
    assert torch.equal(model(x), y)
    with pytest.raises(ValueError, match="no subspace to merge"):
        merge_subspace(model)


def test_choices_are_checked():
    with pytest.raises(ValueError, match=r"patterns \['nope\*'\] match no float parameter"):
        install_subspace(net(), 4, include=["nope*"])
    mha = nn.Sequential(nn.MultiheadAttention(8, 2, batch_first=True))
    with pytest.raises(ValueError, match="0.out_proj.weight is read by its parent's forward"):
        install_subspace(mha, 4, include=["*out_proj.weight"])
    model = net()
    install_subspace(model, 4, include=["0.*", "4.bias"])
    assert sorted(model[0].forward.projected) == ["bias", "weight"] and "forward" not in model[2].__dict__


def test_the_members_weights_are_projected_once_per_population_call_and_never_go_stale(monkeypatch):
    import hyperscalees.nn.subspace as subspace
    calls = []
    project = Fastfood.project
    monkeypatch.setattr(Fastfood, "project", lambda self, z, f: calls.append(1) or project(self, z, f))
    model = net()
    es = hs.EGGROLL(model, population=P, sigma=0.1, lr=0.05, es_map=install_subspace(model, 16, seed=3))
    x = torch.randn(3, 4).repeat(P, 1)
    with es.perturbed():
        first = model(x)
        n = len(calls)
        assert n == 3 * P and torch.equal(model(x), first) and len(calls) == n  # a generation's next token
    es.tell(hs.evaluate(es, fitness))                                   # z moved: projected again
    with es.perturbed():
        moved = model(x)
    assert len(calls) > n + 3 * P - 1 and not torch.equal(moved, first)
    copied = copy.deepcopy(model)                                       # a replica starts empty
    assert all(getattr(m.__dict__.get("forward"), "cache", None) is None for m in copied.modules())
    with torch.no_grad():
        model[0].weight.add_(1.0)                                       # θ₀ changed in place: not the cache's
    with es.perturbed():
        changed = model(x)
    assert not torch.equal(changed, moved)
    fresh = net()                                                       # nothing fits: the same values, uncached
    es2 = hs.EGGROLL(fresh, population=P, sigma=0.1, lr=0.05,
                     es_map=install_subspace(fresh, 16, seed=3, cache_bytes=0))
    with es2.perturbed():
        before = len(calls)
        assert torch.equal(fresh(x), first) and torch.equal(fresh(x), first)
    assert len(calls) - before == 2 * 3 * P
    monkeypatch.setattr(subspace, "CACHE_BYTES", 0)                     # the default is read at install
    again = net()
    es3 = hs.EGGROLL(again, population=P, sigma=0.1, lr=0.05, es_map=install_subspace(again, 16, seed=3))
    with es3.perturbed():
        before = len(calls)
        assert torch.equal(again(x), first) and torch.equal(again(x), first)
    assert len(calls) - before == 2 * 3 * P


def test_the_cache_bound_is_whole_model_and_a_bad_one_is_refused(monkeypatch):
    calls = []
    project = Fastfood.project
    monkeypatch.setattr(Fastfood, "project", lambda self, z, f: calls.append(1) or project(self, z, f))
    model = net()
    members_bytes = P * sum(p.numel() * 4 for n, p in model.named_parameters() if n.endswith("weight"))
    es = hs.EGGROLL(model, population=P, sigma=0.1, lr=0.05,
                    es_map=install_subspace(model, 16, seed=3, cache_bytes=members_bytes // 2))
    x = torch.randn(3, 4).repeat(P, 1)
    with es.perturbed():
        model(x)
        n = len(calls)
        model(x)                                                        # half the model fits: some modules again
    assert 0 < len(calls) - n < n
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match=f"cache_bytes must be a whole number >= 0.*got {bad!r}"):
            install_subspace(net(), 4, cache_bytes=bad)


def test_a_cached_call_draws_no_factors_and_a_miss_draws_them_once_per_module(monkeypatch):
    """P's factors (signs, permutation, gains: ~10^8 numbers for an LLM) are drawn only to project:
    a generation's later tokens, served from the cache, draw none."""
    drawn = []
    factors = Fastfood.factors
    monkeypatch.setattr(Fastfood, "factors", lambda self, device: drawn.append(self.d) or factors(self, device))
    model = net()
    es = hs.EGGROLL(model, population=P, sigma=0.1, lr=0.05, es_map=install_subspace(model, 16, seed=3))
    x = torch.randn(3, 4).repeat(P, 1)
    with es.perturbed():
        model(x)
        assert sorted(drawn) == [32, 128, 1024]                        # one draw per projected weight
        model(x)
        assert len(drawn) == 3                                          # the next token: none
    perm = Fastfood(5, 3000, 24).factors(torch.device("cpu"))[1]
    assert perm.shape == (94, 32) and torch.equal(perm.sort(dim=-1).values, torch.arange(32).expand(94, 32))
