"""The layer registry's promises: every perturbed parameter reaches the forward as a member's
weights would, or the step is refused -- never a silent full-rank copy or a silent update."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import hyperscalees as hs
from hyperscalees import ESMode
from hyperscalees.nn import AbstractLayer, population_linear, register_layer, unregister_layer

from members import member_model

P = 8


def assert_members(model, es, x, y, rows):
    """y (P*rows, ...) from a perturbed forward equals each member's materialized model."""
    with torch.no_grad():
        for i in range(P):
            ref = member_model(model, es, i)(x[i * rows:(i + 1) * rows])
            torch.testing.assert_close(y[i * rows:(i + 1) * rows], ref, rtol=1e-5, atol=1e-5)


def distinct_members(y, rows):
    ys = y.view(P, rows, -1)
    return all(not torch.allclose(ys[0], ys[i]) for i in range(1, P))


def population_forward_matches_members(model, es, x, rows):
    """One perturbed forward of all P members: outputs differ per member and each equals its
    materialized model."""
    with es.perturbed():
        y = model(x)
    assert distinct_members(y, rows)
    assert_members(model, es, x, y, rows)


# -- a module that owns a parameter and has perturbed children (RWKV-7's time-mix shape) -----
class Mix(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.mu = nn.Parameter(torch.rand(d))
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        return self.proj(x * self.mu)


@pytest.mark.parametrize("cls,rank", [(hs.EGGROLL, 1), (hs.EGGROLL, 3), (hs.OpenES, 1)])
def test_parent_with_children_perturbs_its_own_vector_and_its_children_as_a_population(cls, rank):
    torch.manual_seed(0)
    model = nn.Sequential(Mix(6), nn.Tanh(), Mix(6))
    es = cls(model, population=P, sigma=0.1, rank=rank, seed=2)
    assert es.specs["0.mu"].mode == ESMode.PARAM and es.specs["0.proj.weight"].mode == ESMode.MM_PARAM
    x = torch.randn(P * 3, 6)
    population_forward_matches_members(model, es, x, 3)
    est = es.gradient_estimate(torch.randn(P))
    assert all(float(est[n].norm()) > 0 for n in ("0.mu", "0.proj.weight", "2.mu", "2.proj.bias"))


# -- a weight used outside its module's forward: refused, never silently updated -------------
class Sneaky(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.out = nn.Linear(3, 1)

    def forward(self, x):
        return self.out(F.linear(x, self.lin.weight, self.lin.bias))


def test_weight_used_outside_its_module_is_refused_at_the_update():
    torch.manual_seed(0)
    model = Sneaky()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    es = hs.EGGROLL(model, population=P, sigma=0.1)
    with es.perturbed():
        f = -model(torch.randn(P, 4)).view(P)
    with pytest.raises(ValueError, match=r"never applied the noise of \['lin.bias', 'lin.weight'\].*F.linear"):
        es.tell(f)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())  # nothing moved
    es2 = hs.EGGROLL(model, population=P, sigma=0.1, es_map={"lin.*": "excluded"})  # the suggested fix
    with es2.perturbed():
        f = -model(torch.randn(P, 4)).view(P)
    es2.tell(f)
    assert torch.equal(model.lin.weight, before["lin.weight"]) and not torch.equal(model.out.weight, before["out.weight"])


# -- transformers' Conv1D (GPT-2's layout): low-rank, exact, memory-bounded -----------------
class Conv1D(nn.Module):
    """Written like transformers.pytorch_utils.Conv1D: weight stored (in, out), x W + b."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(size_out)


@pytest.mark.parametrize("cls,rank", [(hs.EGGROLL, 1), (hs.EGGROLL, 2), (hs.OpenES, 1)])
def test_hf_conv1d_is_lowrank_and_equals_materialized_members(cls, rank):
    torch.manual_seed(1)
    model = nn.Sequential(Conv1D(12, 5), nn.GELU(), Conv1D(3, 12))
    es = cls(model, population=P, sigma=0.1, rank=rank, seed=3)
    assert es.specs["0.weight"].mode == ESMode.MM_PARAM
    assert es.strategy.is_lowrank(es.specs["0.weight"]) == (cls is hs.EGGROLL)
    x = torch.randn(P * 2, 4, 5)  # (members x 2 sequences, tokens, features)
    population_forward_matches_members(model, es, x, 2)


class LargestTensor(TorchDispatchMode):
    """Records the largest tensor any op produces inside the block."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def test_hf_conv1d_never_materializes_a_weight_per_member():
    """GPT-2's c_attn at population 1024 was ~7 GB of per-member copies; now nothing is
    larger than the activations or one step's factors."""
    torch.manual_seed(2)
    pop, nx, nf = 1024, 768, 2304
    model = Conv1D(nf, nx)
    es = hs.EGGROLL(model, population=pop, sigma=0.01, rank=1)
    x = torch.randn(pop, nx)
    with LargestTensor() as probe, es.perturbed():
        y = model(x)
    assert y.shape == (pop, nf)
    assert probe.largest <= max(pop * nf, pop // 2 * (nx + nf))  # activations or the step's draw
    assert probe.largest < nx * nf * 4  # far below even four copies of the weight


# -- the fallback: small own parameters only, errors that name the module --------------------
def test_fallback_refuses_per_member_copies_above_its_budget():
    torch.manual_seed(3)
    model = nn.Sequential(nn.Conv1d(4, 64, 3, padding=1))  # 768 weights + 64 biases, full rank via vmap
    x = torch.randn(P, 4, 5)
    es = hs.EGGROLL(model, population=P, sigma=0.1, fallback_mib=0.01)  # 8 members x 3.3 KB > 10 KB budget
    with pytest.raises(ValueError, match=r"(?i)Conv1d.*8 per-member copies.*fallback_mib.*register a layer.*es_map"):
        with es.perturbed():
            model(x)
    es = hs.EGGROLL(model, population=P, sigma=0.1)  # the default budget (64 MiB) allows it
    with es.perturbed():
        y = model(x)
    assert_members(model, es, x, y, 1)


def test_fallback_module_returning_a_tuple_and_none():
    class Pair(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(3))

        def forward(self, x):
            return x * self.w, None

    torch.manual_seed(4)
    model = Pair()
    es = hs.EGGROLL(model, population=P, sigma=0.1)
    x = torch.randn(P * 2, 3)
    with es.perturbed():
        y, none = model(x)
    assert none is None and distinct_members(y, 2)
    for i in range(P):
        ref, _ = member_model(model, es, i)(x[2 * i:2 * i + 2])
        torch.testing.assert_close(y[2 * i:2 * i + 2], ref)


# -- integer weights: evolved through a layer and an update rule of the user's own ----------
class Int8Linear(nn.Module):
    def __init__(self, din, dout, scale=0.05):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dout, din, dtype=torch.int8), requires_grad=False)
        self.scale = scale

    def forward(self, x):
        return x @ (self.weight.float() * self.scale).T


class Int8Layer(AbstractLayer):
    """Float perturbation around the dequantized int8 weight, through the shared population matmul."""

    def params(self, module):
        return ("weight",)

    def lowrank(self, module):
        return {"weight": "out_in"}

    def forward(self, ctx, module, active):
        return lambda x: population_linear(ctx, x, module.weight.float() * module.scale, active.get("weight"))


class IntegerSteps(hs.AbstractUpdateRule):
    """Accumulate lr·ĝ in fp32; move each int8 weight by the whole steps accumulated."""

    def __init__(self, params, groups, config):
        super().__init__(params, groups, config)
        self.acc = {n: torch.zeros_like(p, dtype=torch.float32) for n, p in params.items()}

    def apply(self, estimates, lr_factor):
        lr = {n: g.lr * lr_factor for g in self.groups for n in g.names}
        for n, g in estimates.items():
            self.acc[n] += lr[n] * g
            step = self.acc[n].trunc()
            self.acc[n] -= step
            p = self.params[n]
            p.copy_((p.to(torch.int16) + step.to(torch.int16)).clamp(-127, 127).to(torch.int8))

    def state_dict(self):
        return {"acc": {n: a.clone() for n, a in self.acc.items()}}

    def load_state_dict(self, state):
        for n, a in state["acc"].items():
            self.acc[n].copy_(a)


def test_int8_weights_evolve_through_a_registered_layer_and_a_custom_update_rule():
    torch.manual_seed(5)
    with pytest.raises(ValueError, match="weight is torch.int8.*register one"):
        hs.EGGROLL(nn.Sequential(Int8Linear(4, 3)), population=P)  # no layer takes it yet
    layer = register_layer(Int8Linear, Int8Layer)
    try:
        model = nn.Sequential(Int8Linear(4, 3))
        with pytest.raises(ValueError, match="0.weight.*int8.*update rule"):
            hs.EGGROLL(model, population=P)  # the torch.optim rule cannot step integers
        target = torch.randint(-20, 20, (3, 4)).float() * 0.05
        es = hs.EGGROLL(model, population=256, sigma=0.2, lr=5.0, rank=2, update_rule=IntegerSteps, seed=1)
        assert es.specs["0.weight"].mode == ESMode.MM_PARAM
        x = torch.randn(64, 4)

        def loss():
            return float(((model(x) - x @ target.T) ** 2).mean())

        start = loss()
        for _ in range(60):
            with es.perturbed():
                out = model(x.repeat(256, 1)).view(256, 64, 3)
            es.tell(-((out - x @ target.T) ** 2).mean(dim=(1, 2)))
        assert model[0].weight.dtype == torch.int8
        assert loss() < 1e-3 * start
        assert torch.equal(model[0].weight, (target / 0.05).round().to(torch.int8))  # found the integer target
    finally:
        unregister_layer(layer)


# -- a user's own layer type, registered with the public function ---------------------------
class Gain(nn.Module):
    """A Linear without bias followed by a learned per-feature gain."""

    def __init__(self, din, dout):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dout, din) * 0.3)
        self.gain = nn.Parameter(torch.ones(dout))

    def forward(self, x):
        return (x @ self.weight.T) * self.gain


class GainLayer(AbstractLayer):
    def params(self, module):
        return ("weight", "gain")

    def lowrank(self, module):
        return {"weight": "out_in"}

    def forward(self, ctx, module, active):
        def forward(x):
            y = population_linear(ctx, x, module.weight, active.get("weight"))   # (P*M, dout)
            g = ctx.vector(module.gain, active.get("gain"), y.dtype)              # (K, 2, 1, dout)
            return (y.view(ctx.k, 2, -1, y.shape[-1]) * g).view_as(y)
        return forward


def test_user_registered_layer_replaces_the_fallback():
    torch.manual_seed(6)
    model = nn.Sequential(Gain(5, 4), nn.Tanh(), nn.Linear(4, 2))
    assert hs.EGGROLL(model, population=P).specs["0.weight"].mode == ESMode.PARAM  # fallback: full rank
    layer = register_layer(Gain, GainLayer)
    try:
        es = hs.EGGROLL(model, population=P, sigma=0.1, rank=2, seed=4)
        assert es.specs["0.weight"].mode == ESMode.MM_PARAM and es.specs["0.gain"].mode == ESMode.PARAM
        x = torch.randn(P * 3, 5)
        population_forward_matches_members(model, es, x, 3)
        assert es.store().unapplied() == []
    finally:
        unregister_layer(layer)
    assert hs.EGGROLL(model, population=P).specs["0.weight"].mode == ESMode.PARAM  # unregistered again


def test_register_layer_rejects_non_layers():
    with pytest.raises(TypeError, match="AbstractLayer"):
        register_layer(nn.Linear, object())
