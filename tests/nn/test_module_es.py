"""The module-level facade: chunked evaluation, es_map overrides, frozen and tied parameters."""
import copy

import pytest
import torch
from torch import nn

import hyperscalees as hs
from hyperscalees.nn import derive_specs
from hyperscalees.noise.sampling import full_noise, lowrank_factors
from hyperscalees.strategies import ESMode

P, B = 16, 5


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.LayerNorm(8), nn.Linear(8, 2))


X = torch.randn(B, 3, generator=torch.Generator().manual_seed(7))
Y = torch.randn(B, 2, generator=torch.Generator().manual_seed(8))


def fitness_fn(model, lo, hi, step):
    out = model(X.repeat(hi - lo, 1)).view(hi - lo, B, 2)   # member-major rows
    return -((out - Y) ** 2).mean(dim=(1, 2))


@pytest.mark.parametrize("cls", [hs.EGGROLL, hs.OpenES])
def test_evaluate_is_chunk_invariant_and_so_is_the_update(cls):
    results = {}
    for chunk in (None, 2, 6, 16):
        model = mlp()
        es = cls(model, population=P, sigma=0.1, rank=2, lr=0.05, seed=4)
        f = hs.evaluate(es, fitness_fn, chunk=chunk)
        assert f.shape == (P,) and f.dtype == torch.float32
        assert torch.equal(f, hs.evaluate(es, fitness_fn, chunk=chunk))   # deterministic for a fixed chunk
        es.tell(f)
        results[chunk] = (f, {k: v.clone() for k, v in model.state_dict().items()})
    f0, p0 = results[None]
    for chunk, (f, p) in results.items():
        torch.testing.assert_close(f, f0, rtol=1e-6, atol=1e-6)
        for k in p0:
            torch.testing.assert_close(p[k], p0[k], rtol=1e-6, atol=1e-6)


def test_evaluate_matches_one_perturbed_forward_and_materialized_members():
    model = mlp()
    es = hs.EGGROLL(model, population=P, sigma=0.1, rank=1, seed=2)
    with es.perturbed():
        whole = fitness_fn(model, 0, P, 0)
    torch.testing.assert_close(hs.evaluate(es, fitness_fn, chunk=4), whole, rtol=1e-6, atol=1e-6)
    pop = es.ask()
    i = 5                                                      # odd member: sign -1 of pair 2
    ref = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in ref.named_parameters():
            if es.specs[name].mode == ESMode.MM_PARAM:
                a, b = lowrank_factors(pop, name, *p.shape, torch.tensor([2]))
                p -= pop.sigma * a[0] @ b[0].T
            else:
                p -= pop.sigma * full_noise(pop, name, p.shape, torch.tensor([2]))[0]
        want = -((ref(X) - Y) ** 2).mean()
    torch.testing.assert_close(whole[i], want, rtol=1e-5, atol=1e-6)


def test_evaluate_and_perturbed_errors():
    model = mlp()
    es = hs.EGGROLL(model, population=P, sigma=0.1)
    with pytest.raises(ValueError, match="chunk.*3"):
        hs.evaluate(es, fitness_fn, chunk=3)
    with pytest.raises(ValueError, match=r"returned shape \(3,\) for members \[0, 16\)"):
        hs.evaluate(es, lambda m, lo, hi, step: torch.zeros(3))
    with pytest.raises(ValueError, match="member range"):
        with es.perturbed((1, 5)):
            pass
    with pytest.raises(ValueError, match="7.*16 members"):
        with es.perturbed():
            model(torch.randn(7, 3))
    with pytest.raises(TypeError, match="Module"):
        hs.EGGROLL(lambda x: x, population=4)


def test_perturbed_members_slice_equals_tuple():
    model = mlp()
    es = hs.EGGROLL(model, population=P, sigma=0.1)
    with es.perturbed(slice(4, 8)):
        a = model(X.repeat(4, 1))
    with es.perturbed((4, 8)):
        b = model(X.repeat(4, 1))
    assert torch.equal(a, b)


def test_es_map_glob_excludes_biases():
    model = mlp()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    es = hs.EGGROLL(model, population=P, sigma=0.1, lr=0.05, es_map={"*.bias": "excluded"})
    assert {n for n, s in es.specs.items() if s.mode == ESMode.EXCLUDED} == {"0.bias", "2.bias", "3.bias"}
    assert es.specs["0.weight"].mode == ESMode.MM_PARAM and es.specs["2.weight"].mode == ESMode.PARAM
    with es.perturbed():                                       # excluded biases carry no noise either
        out = model(X.repeat(P, 1)).view(P, B, 2)
    es.tell(-((out - Y) ** 2).mean(dim=(1, 2)))
    after = model.state_dict()
    for k in before:
        assert torch.equal(after[k], before[k]) == k.endswith("bias"), k


def test_es_map_errors_and_modes():
    model = mlp()
    with pytest.raises(ValueError, match=r"\['*decoder*'\]".replace("*", r"\*")):
        derive_specs(model, {"*decoder*": "excluded"})
    with pytest.raises(ValueError, match="'sideways'"):
        derive_specs(model, {"*.bias": "sideways"})
    with pytest.raises(ValueError, match="0.bias: mode MM_PARAM is not supported by Linear.*weight: lowrank"):
        derive_specs(model, {"0.bias": "lowrank"})
    specs = derive_specs(model, {"3.weight": ESMode.PARAM, "0.*": 3})
    assert specs["3.weight"].mode == ESMode.PARAM
    assert specs["0.weight"].mode == specs["0.bias"].mode == ESMode.EXCLUDED


def test_frozen_parameters_are_untouched_and_unperturbed():
    model = mlp()
    for p in model[0].parameters():
        p.requires_grad_(False)
    frozen = {k: v.clone() for k, v in model[0].state_dict().items()}
    es = hs.EGGROLL(model, population=P, sigma=0.5, lr=0.1)
    assert es.specs["0.weight"].mode == es.specs["0.bias"].mode == ESMode.EXCLUDED
    h = model[0](X)
    with es.perturbed():
        torch.testing.assert_close(model[0](X.repeat(P, 1)), h.repeat(P, 1), rtol=1e-6, atol=1e-6)
    for _ in range(3):
        es.tell(hs.evaluate(es, fitness_fn))
    assert all(torch.equal(model[0].state_dict()[k], v) for k, v in frozen.items())


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 6)
        self.head = nn.Linear(6, 10, bias=False)
        self.head.weight = self.emb.weight                     # weight tying

    def forward(self, idx):
        return self.head(torch.tanh(self.emb(idx)))


def test_tied_weights_perturbed_consistently_and_updated_once():
    torch.manual_seed(0)
    model = Tied()
    es = hs.EGGROLL(model, population=8, sigma=0.1, rank=2, lr=0.01, optimizer="sgd", shaping="raw")
    assert list(es.specs) == ["emb.weight"] and es.specs["emb.weight"].mode == ESMode.EMB_PARAM
    idx = torch.randint(0, 10, (8, 4), generator=torch.Generator().manual_seed(1))
    with es.perturbed():
        y = model(idx)
    pop = es.ask()
    a, b = lowrank_factors(pop, "emb.weight", 10, 6, pop.pairs())
    for i in range(8):                                         # the same member matrix at both uses
        ref = copy.deepcopy(model)
        with torch.no_grad():
            ref.emb.weight += (1 - 2 * (i % 2)) * pop.sigma / 2 ** 0.5 * a[i // 2] @ b[i // 2].T
        assert ref.head.weight is ref.emb.weight
        torch.testing.assert_close(y[i], ref(idx[i:i + 1])[0], rtol=1e-5, atol=1e-6)
    f = -y.pow(2).mean(dim=(1, 2))
    before = model.emb.weight.detach().clone()
    est = es.gradient_estimate(f)["emb.weight"]
    es.tell(f)
    torch.testing.assert_close(model.emb.weight.detach() - before, 0.01 * est, rtol=1e-5, atol=1e-7)


def test_bf16_model_stays_bf16_and_trains():
    model = mlp().to(torch.bfloat16)
    es = hs.EGGROLL(model, population=P, sigma=0.1, lr=0.05)
    xb, yb = X.bfloat16(), Y.bfloat16()

    def fit(m, lo, hi, step):
        out = m(xb.repeat(hi - lo, 1)).view(hi - lo, B, 2).float()
        return -((out - yb.float()) ** 2).mean(dim=(1, 2))

    first = float(hs.evaluate(es, fit).mean())
    for _ in range(30):
        es.tell(hs.evaluate(es, fit))
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    assert float(hs.evaluate(es, fit).mean()) > first


def test_facade_resume_is_bit_identical():
    m_full = mlp()
    full = hs.EGGROLL(m_full, population=P, sigma=0.1, lr=0.05, seed=9)
    for _ in range(4):
        full.tell(hs.evaluate(full, fitness_fn))
    m_a = mlp()
    es_a = hs.EGGROLL(m_a, population=P, sigma=0.1, lr=0.05, seed=9)
    for _ in range(2):
        es_a.tell(hs.evaluate(es_a, fitness_fn))
    sd = es_a.state_dict()
    for _ in range(2):                                         # the snapshot must not follow later steps
        es_a.tell(hs.evaluate(es_a, fitness_fn))
    m_b = mlp(seed=123)
    es_b = hs.EGGROLL(m_b, population=P, sigma=0.1, lr=0.05, seed=9)
    es_b.load_state_dict(sd)
    assert es_b.step == 2
    for _ in range(2):
        es_b.tell(hs.evaluate(es_b, fitness_fn))
    for k, v in m_full.state_dict().items():
        assert torch.equal(m_b.state_dict()[k], v) and torch.equal(m_a.state_dict()[k], v), k


def test_facade_gradient_estimate_matches_strategy():
    model = mlp()
    es = hs.OpenES(model, population=P, sigma=0.1, shaping="z_score")
    f = hs.evaluate(es, fitness_fn)
    g1, g2 = es.gradient_estimate(f), es.strategy.gradient_estimate(f)
    assert set(g1) == {n for n, _ in model.named_parameters()}
    assert all(torch.equal(g1[n], g2[n]) for n in g1)
    assert es.step == 0 and es.population == P and es.config.shaping == "z_score"


def test_custom_optimizer_class_factory_and_shaping_callable():
    updates = {}
    for label, opt in [("name", "sgd"), ("class", torch.optim.SGD),
                       ("factory", lambda ps: torch.optim.SGD(ps, lr=0.05))]:
        model = mlp()
        es = hs.EGGROLL(model, population=P, sigma=0.1, lr=0.05, optimizer=opt, shaping=lambda f: f * 2.0)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        f = hs.evaluate(es, fitness_fn)
        est = es.gradient_estimate(f)
        raw = hs.EGGROLL(mlp(), population=P, sigma=0.1, shaping="raw").gradient_estimate(f)
        assert all(torch.allclose(est[n], 2 * raw[n], rtol=1e-6, atol=1e-7) for n in est)  # callable used
        es.tell(f)
        for name, p in model.named_parameters():               # SGD ascent with the callable shaping
            torch.testing.assert_close(p.detach() - before[name], 0.05 * est[name], rtol=1e-5, atol=1e-7)
        updates[label] = {k: v.clone() for k, v in model.state_dict().items()}
    for label in ("class", "factory"):
        assert all(torch.equal(updates[label][k], updates["name"][k]) for k in updates["name"])


def test_perturbed_restores_every_forward_even_on_error():
    """Swapped forwards are undone on exit (also after an exception), a user's own kept."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4), nn.Linear(4, 2))
    own = model[2].forward                      # a bound method stored on the instance
    model[2].forward = lambda x: own(x) * 2.0
    es = hs.EGGROLL(model, population=4, sigma=0.1, seed=0)
    x = torch.randn(4, 4)
    with torch.no_grad():
        before = model(x)
    with pytest.raises(RuntimeError, match="boom"):
        with es.perturbed():
            model(x)
            raise RuntimeError("boom")
    assert "forward" not in model[0].__dict__ and "forward" not in model[1].__dict__
    with torch.no_grad():
        torch.testing.assert_close(model(x), before, rtol=0, atol=0)
