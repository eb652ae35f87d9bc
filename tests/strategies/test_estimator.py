"""The ES estimate equals its brute-force definition and, in expectation, the true gradient."""

import pytest
import torch

from hyperscalees.ops._reference import gradient_reference
from hyperscalees.strategies import STRATEGIES, EGGROLLStrategy, ESMode, OpenESStrategy

from es_helpers import make, member_params, unit_noise

MODES = {"w": ESMode.MM_PARAM, "b": ESMode.PARAM, "frozen": ESMode.EXCLUDED, "e": ESMode.EMB_PARAM}


def small_params(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(5, 4, generator=g), "b": torch.randn(5, generator=g),
            "frozen": torch.randn(3, generator=g), "e": torch.randn(7, 3, generator=g)}


@pytest.mark.parametrize("name", sorted(STRATEGIES))
@pytest.mark.parametrize("rank,chunk", [(1, 4096), (2, 3), (3, 1)])
def test_gradient_estimate_equals_brute_force(name, rank, chunk):
    s = make(STRATEGIES[name], small_params(), MODES, population=10, sigma=0.07, rank=rank, shaping="raw",
             update_chunk=chunk, seed=5)
    pop = s.ask()
    f = torch.randn(10, generator=torch.Generator().manual_seed(rank))
    got = s.gradient_estimate(f)
    assert set(got) == {"w", "b", "e"}                      # excluded parameter gets no estimate
    for n, g in got.items():
        eps = list(unit_noise(s, n, pop))
        torch.testing.assert_close(g, gradient_reference(eps, f, pop.sigma), rtol=1e-5, atol=1e-6)
    lowrank = {n: s.noise(n, pop, 0, 10).a is not None for n in got}
    assert lowrank == ({"w": True, "b": False, "e": True} if name == "eggroll" else dict.fromkeys(got, False))


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_chunked_update_equals_unchunked(name):
    grads = []
    for chunk in (1, 3, 7, 4096):
        s = make(STRATEGIES[name], small_params(), MODES, population=32, sigma=0.1, rank=2, update_chunk=chunk)
        grads.append(s.gradient_estimate(torch.linspace(-1, 1, 32).flip(0)))
    for g in grads[1:]:
        for n in g:
            torch.testing.assert_close(g[n], grads[0][n], rtol=1e-6, atol=1e-6)


def test_materialized_members_have_unit_variance_entries():
    """σ/√r scaling: A Bᵀ/√r has unit-variance entries whatever the rank."""
    for rank in (1, 4):
        params = {"w": torch.zeros(16, 16)}
        s = make(EGGROLLStrategy, params, {"w": ESMode.MM_PARAM}, population=2048, sigma=1.0, rank=rank)
        eps = unit_noise(s, "w", s.ask())                   # (P, 16, 16)
        assert abs(float(eps.var()) - 1) < 0.03
        assert torch.equal(eps[0::2], -eps[1::2])


# ---- expectation: E[ĝ] = ∇ E[f] for smooth objectives --------------------------------------------
P_LARGE = 1 << 14
MEASURED = {}


def objective(kind):
    g = torch.Generator().manual_seed(1)
    target = {"w": torch.randn(16, 16, generator=g), "b": torch.randn(16, generator=g)}
    start = {"w": torch.randn(16, 16, generator=g) * 0.5, "b": torch.zeros(16)}
    if kind == "quadratic":                               # f = -||θ - T||², ∇f = -2(θ - T)
        f = lambda m: -sum((m[n] - target[n]).pow(2).flatten(1).sum(1) for n in m)
        grad = {n: -2 * (start[n] - target[n]) for n in start}
    else:                                                 # f = <C, θ>, ∇f = C
        f = lambda m: sum((m[n] * target[n]).flatten(1).sum(1) for n in m)
        grad = target
    return start, f, grad


@pytest.mark.parametrize("kind", ["quadratic", "linear"])
@pytest.mark.parametrize("cls,rank", [(EGGROLLStrategy, 1), (EGGROLLStrategy, 4), (OpenESStrategy, 1)])
def test_estimator_expectation_matches_analytic_gradient(cls, rank, kind):
    start, f, grad = objective(kind)
    s = make(cls, start, {"w": ESMode.MM_PARAM, "b": ESMode.PARAM}, population=P_LARGE, sigma=0.05,
             rank=rank, shaping="raw", seed=3)
    pop = s.ask()
    est = s.gradient_estimate(f(member_params(s, pop)))
    ghat = torch.cat([est[n].flatten() for n in ("w", "b")])
    g = torch.cat([grad[n].flatten() for n in ("w", "b")])
    cos = float(ghat @ g / (ghat.norm() * g.norm()))
    proj = float(ghat @ g / g.norm() ** 2)               # unbiased: E[proj] = 1
    MEASURED[(cls.name, rank, kind)] = (cos, proj)
    print(f"{cls.name} rank={rank} {kind}: cosine={cos:.4f} projection={proj:.4f}")
    assert cos >= 0.9
    assert abs(proj - 1) < 0.07                    # ~4 standard errors at K = 8192 pairs
    # each block on its own points the right way too (the bias is full-rank in both strategies)
    for n in ("w", "b"):
        c = float(est[n].flatten() @ grad[n].flatten() / (est[n].norm() * grad[n].norm()))
        assert c >= 0.8, (n, c)


@pytest.mark.parametrize("distribution", ["uniform", "rademacher"])
@pytest.mark.parametrize("rank", [1, 4])
def test_unit_variance_distributions_are_unbiased_too(distribution, rank):
    """E[vec(ε)vec(ε)ᵀ] = I holds for any zero-mean unit-variance factors, not only Gaussians."""
    start, f, grad = objective("linear")
    s = make(EGGROLLStrategy, start, {"w": ESMode.MM_PARAM, "b": ESMode.PARAM}, population=1 << 13,
             sigma=0.05, rank=rank, shaping="raw", distribution=distribution)
    est = s.gradient_estimate(f(member_params(s, s.ask())))
    ghat = torch.cat([est[n].flatten() for n in ("w", "b")])
    g = torch.cat([grad[n].flatten() for n in ("w", "b")])
    cos, proj = float(ghat @ g / (ghat.norm() * g.norm())), float(ghat @ g / g.norm() ** 2)
    print(f"{distribution} rank={rank}: cosine={cos:.4f} projection={proj:.4f}")
    assert cos >= 0.9 and abs(proj - 1) < 0.1


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_same_shaped_layers_get_independent_noise(name):
    """One seed per run, not per layer: equal-shaped layers must not share (or mirror) their draws."""
    params = {f"layer{i}.weight": torch.zeros(16, 16) for i in range(3)}
    s = make(STRATEGIES[name], params, dict.fromkeys(params, ESMode.MM_PARAM), population=512, sigma=0.1, rank=1)
    pop = s.ask()
    eps = [unit_noise(s, n, pop).flatten() for n in params]          # (P*256,) each
    for i in range(3):
        for j in range(i + 1, 3):
            assert not torch.equal(eps[i], eps[j])
            c = float(torch.corrcoef(torch.stack([eps[i], eps[j]]))[0, 1])
            print(name, i, j, f"corr={c:+.4f}")
            assert abs(c) < 0.02, c                                  # sd 1/sqrt(256 * 256 pairs) = 0.004
    f = torch.randn(512, generator=torch.Generator().manual_seed(0))
    g = s.gradient_estimate(f)
    assert not torch.allclose(g["layer0.weight"], g["layer1.weight"])
