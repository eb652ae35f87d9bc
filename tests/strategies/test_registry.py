"""One suite over strategies.STRATEGIES x optimizers: the contract every strategy keeps."""
import copy

import pytest
import torch

from hyperscalees.strategies import STRATEGIES, ESMode

from es_helpers import loss, make, sphere

OPTIMIZERS = ["sgd", "adam", "adamw", "muon"]
LR = {"sgd": 0.05, "adam": 0.05, "adamw": 0.05, "muon": 0.05}
MODES = {"w": ESMode.MM_PARAM, "b": ESMode.PARAM, "frozen": ESMode.EXCLUDED}
SUITE = [(n, o) for n in sorted(STRATEGIES) for o in OPTIMIZERS]


def params(dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(8, 6, generator=g).to(dtype), "b": torch.randn(8, generator=g).to(dtype),
            "frozen": torch.randn(4, generator=g).to(dtype)}


def targets():
    g = torch.Generator().manual_seed(99)
    return {"w": torch.randn(8, 6, generator=g), "b": torch.randn(8, generator=g)}


def build(name, opt, p, **kw):
    cfg = dict(population=32, sigma=0.1, rank=2, lr=LR[opt], optimizer=opt, seed=1, shaping="centered_rank")
    return make(STRATEGIES[name], p, MODES, **(cfg | kw))


def run(s, steps, tgt):
    for _ in range(steps):
        metrics = s.tell(sphere(s, tgt))
    return metrics


@pytest.mark.parametrize("name,opt", SUITE)
def test_ask_tell_runs(name, opt):
    p = params()
    before = {n: t.clone() for n, t in p.items()}
    s = build(name, opt, p)
    pop = s.ask()
    assert (pop.step, pop.size, pop.rank, pop.sigma, pop.seed) == (0, 32, 2, 0.1, 1)
    m = s.tell(sphere(s, targets()), pop)
    assert m["step"] == 1 and s.step == 1 and m["nonfinite"] == 0
    assert set(m) >= {"fitness_mean", "fitness_max", "grad_norm", "sigma", "lr"}
    assert not torch.equal(p["w"], before["w"]) and not torch.equal(p["b"], before["b"])
    assert torch.equal(p["frozen"], before["frozen"])
    assert all(bool(torch.isfinite(t).all()) for t in p.values())
    with pytest.raises(ValueError, match="step 0.*step 1"):
        s.tell(torch.zeros(32), pop)                        # a stale population is refused


@pytest.mark.parametrize("name,opt", SUITE)
def test_resume_from_state_dict_is_bit_identical(name, opt):
    tgt = targets()
    p_full = params()
    full = build(name, opt, p_full)
    run(full, 6, tgt)

    p_a = params()
    first = build(name, opt, p_a)
    run(first, 3, tgt)
    saved_params = {n: t.clone() for n, t in p_a.items()}
    saved = copy.deepcopy(first.state_dict())
    p_b = {n: t.clone() for n, t in saved_params.items()}
    resumed = build(name, opt, p_b)
    resumed.load_state_dict(saved)
    assert resumed.step == 3
    run(resumed, 3, tgt)
    for n in p_full:
        assert torch.equal(p_b[n], p_full[n]), n


@pytest.mark.parametrize("name,opt", SUITE)
def test_state_dict_is_a_snapshot(name, opt):
    """Continuing to train must not change a state_dict taken earlier (optimizer moments included)."""
    tgt = targets()
    p = params()
    s = build(name, opt, p)
    run(s, 2, tgt)
    sd = s.state_dict()
    frozen_copy = copy.deepcopy(sd)
    p_at_2 = {n: t.clone() for n, t in p.items()}
    run(s, 2, tgt)
    for n in p:
        p[n].copy_(p_at_2[n])
    s.load_state_dict(sd)
    run(s, 2, tgt)
    p2 = {n: t.clone() for n, t in p_at_2.items()}
    s2 = build(name, opt, p2)
    s2.load_state_dict(frozen_copy)
    run(s2, 2, tgt)
    for n in p:
        assert torch.equal(p[n], p2[n]), n


@pytest.mark.parametrize("name,opt", SUITE)
def test_same_seed_same_parameters(name, opt):
    tgt = targets()
    runs = []
    for _ in range(2):
        p = params()
        run(build(name, opt, p), 4, tgt)
        runs.append(p)
    assert all(torch.equal(runs[0][n], runs[1][n]) for n in runs[0])
    p = params()
    run(build(name, opt, p, seed=2), 4, tgt)
    assert not torch.equal(p["w"], runs[0]["w"])


@pytest.mark.parametrize("name,opt", SUITE)
def test_sphere_improves(name, opt):
    tgt = targets()
    p = params()
    s = build(name, opt, p, population=64)
    start = loss(p, tgt)
    run(s, 60, tgt)
    end = loss(p, tgt)
    assert end < 0.5 * start, (start, end)


@pytest.mark.parametrize("name,opt", SUITE)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_dtypes_preserved(name, opt, dtype):
    p = params(dtype)
    ids = {n: id(t) for n, t in p.items()}
    s = build(name, opt, p)
    run(s, 2, targets())
    assert all(t.dtype == dtype for t in p.values())
    assert {n: id(t) for n, t in p.items()} == ids          # updated in place, same tensors
    assert all(s.rule.masters[n].dtype == torch.float32 for n in s.trainable)
    assert all(torch.equal(p[n], s.rule.masters[n].to(dtype)) for n in s.trainable)


@pytest.mark.parametrize("name,opt", SUITE)
@pytest.mark.parametrize("shaping", ["raw", "z_score", "centered_rank", "pair_sign"])
def test_symmetric_pairs_give_zero_update(name, opt, shaping):
    p = params()
    before = {n: t.clone() for n, t in p.items()}
    s = build(name, opt, p, shaping=shaping)
    f = torch.randn(16, generator=torch.Generator().manual_seed(3)).repeat_interleave(2)  # f_2k == f_2k+1
    est = s.gradient_estimate(f)
    assert all(float(g.abs().max()) == 0.0 for g in est.values())
    s.tell(f)
    assert all(torch.equal(p[n], before[n]) for n in p)


def test_tiny_updates_accumulate_in_bf16_through_fp32_masters():
    """Each step moves w by ~1e-3, below half a bf16 ulp at 1.0 (2^-8): only fp32 masters keep them."""
    name, lr = "eggroll", 1e-3
    w = torch.ones(4, 4, dtype=torch.bfloat16)
    assert torch.equal(w + lr, w)                            # a naive bf16 update would be lost
    s = make(STRATEGIES[name], {"w": w}, {"w": ESMode.MM_PARAM}, population=64, sigma=0.01, lr=lr,
             optimizer="adam", shaping="centered_rank")
    tgt = {"w": torch.full((4, 4), 2.0)}                     # pulls every entry upward
    run(s, 50, tgt)
    assert w.dtype == torch.bfloat16
    moved = w.float() - 1
    assert float(moved.min()) > 0 and float(moved.mean()) > 0.02


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_weight_decay_shrinks_weights_without_signal(name):
    p = params()
    before = {n: t.clone() for n, t in p.items()}
    s = build(name, "adamw", p, weight_decay=0.1, lr=0.01)
    for _ in range(3):
        s.tell(torch.full((32,), 1.5))                        # no signal: all members equal
    for n in ("w", "b"):
        torch.testing.assert_close(p[n], before[n] * (1 - 0.01 * 0.1) ** 3, rtol=1e-6, atol=0)
    assert torch.equal(p["frozen"], before["frozen"])
