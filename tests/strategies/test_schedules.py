"""lr/sigma decay and schedules act as documented; sign updates and baselines follow their definitions."""
import math

import pytest
import torch

from hyperscalees.ops._reference import gradient_reference
from hyperscalees.strategies import EGGROLLStrategy, ESMode, OpenESStrategy

from es_helpers import make, sphere, unit_noise

MODES = {"w": ESMode.MM_PARAM, "b": ESMode.PARAM}


def params():
    g = torch.Generator().manual_seed(0)
    return {"w": torch.randn(6, 5, generator=g), "b": torch.randn(6, generator=g)}


TGT = {"w": torch.ones(6, 5), "b": torch.ones(6)}


@pytest.mark.parametrize("cls", [EGGROLLStrategy, OpenESStrategy])
def test_sgd_step_is_lr_times_estimate_with_decay_and_schedule(cls):
    lr0, decay = 0.1, 0.8
    sched = lambda t: 1.0 / (1 + t)
    p = params()
    s = make(cls, p, MODES, population=16, sigma=0.1, lr=lr0, optimizer="sgd", lr_decay=decay,
             lr_schedule=sched, shaping="z_score")
    for t in range(4):
        lr_t = lr0 * decay ** t * sched(t)
        assert math.isclose(s.current_lr(), lr_t, rel_tol=1e-12)
        before = {n: x.clone() for n, x in p.items()}
        f = sphere(s, TGT)
        est = s.gradient_estimate(f)
        s.tell(f)
        for n in p:                                       # ascent on fitness: θ += lr_t ĝ
            torch.testing.assert_close(p[n] - before[n], lr_t * est[n], rtol=1e-5, atol=1e-7)


def test_sigma_decay_and_schedule():
    s = make(EGGROLLStrategy, params(), MODES, population=8, sigma=0.2, sigma_decay=0.9,
             sigma_schedule=lambda t: 2.0 if t >= 2 else 1.0)
    seen = []
    for t in range(4):
        pop = s.ask()
        assert pop.step == t
        seen.append(pop.sigma)
        m = s.tell(sphere(s, TGT, pop), pop)
        assert m["sigma"] == pop.sigma
    want = [0.2, 0.2 * 0.9, 0.2 * 0.81 * 2, 0.2 * 0.729 * 2]
    assert all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(seen, want))


def test_lr_survives_resume():
    s = make(EGGROLLStrategy, params(), MODES, population=8, sigma=0.1, lr=0.1, lr_decay=0.5, optimizer="sgd")
    for _ in range(3):
        s.tell(sphere(s, TGT))
    s2 = make(EGGROLLStrategy, params(), MODES, population=8, sigma=0.1, lr=0.1, lr_decay=0.5, optimizer="sgd")
    s2.load_state_dict(s.state_dict())
    assert math.isclose(s2.current_lr(), 0.1 * 0.5 ** 3)


@pytest.mark.parametrize("rank", [1, 3])
def test_sign_update_uses_sign_factors(rank):
    s = make(EGGROLLStrategy, params(), MODES, population=12, sigma=0.1, rank=rank, estimator="sign", shaping="raw")
    pop = s.ask()
    f = torch.randn(12, generator=torch.Generator().manual_seed(1))
    est = s.gradient_estimate(f)
    n = s.noise("w", pop, 0, 12)
    eps = [float(n.signs.reshape(-1)[i]) * n.a[i // 2].sign() @ n.b[i // 2].sign().T / math.sqrt(rank)
           for i in range(12)]
    torch.testing.assert_close(est["w"], gradient_reference(eps, f, pop.sigma), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(est["b"], gradient_reference(list(unit_noise(s, "b", pop)), f, pop.sigma),
                               rtol=1e-5, atol=1e-6)


def test_baseline_members_center_their_group():
    s = make(EGGROLLStrategy, params(), MODES, population=16, sigma=0.1, baseline_every=4, shaping="raw")
    pop = s.ask()
    assert pop.signs().reshape(-1)[[0, 1, 4, 5]].abs().sum() == 0
    f = torch.randn(16, generator=torch.Generator().manual_seed(2))
    centred = (f.view(4, 4) - f.view(4, 4)[:, :2].mean(1, keepdim=True)).reshape(-1)
    est = s.gradient_estimate(f)
    for n in est:
        eps = list(unit_noise(s, n, pop))
        assert all(float(eps[i].abs().max()) == 0 for i in (0, 1, 4, 5))
        torch.testing.assert_close(est[n], gradient_reference(eps, centred, pop.sigma), rtol=1e-5, atol=1e-6)


def test_noise_reuse_repeats_the_draw_across_steps():
    s = make(EGGROLLStrategy, params(), MODES, population=8, sigma=0.1, noise_reuse=2, lr=1e-3)
    draws = []
    for _ in range(3):
        pop = s.ask()
        draws.append(unit_noise(s, "w", pop))
        s.tell(sphere(s, TGT, pop), pop)
    assert torch.equal(draws[0], draws[1]) and not torch.equal(draws[1], draws[2])
