"""Adapters (LoRA-style B·A beside frozen matrices) and norms-and-biases-only evolution, as es_maps."""
import copy

import pytest
import torch
from torch import nn

import hyperscalees as hs
from hyperscalees.nn.adapters import Adapter, add_adapters, merge_adapters
from hyperscalees.nn.select import evolved_numbers, norms_and_biases

P = 6


class Net(nn.Module):
    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.inp = nn.Linear(5, 16)
        self.norm = nn.LayerNorm(16)
        self.hidden = nn.Linear(16, 16)
        self.out = nn.Linear(16, 3)

    def forward(self, x):
        return self.out(torch.tanh(self.hidden(self.norm(self.inp(x)))))


def adapted(seed=0, rank=2):
    model = Net(seed)
    es_map = add_adapters(model, rank, include=["inp", "hidden"], seed=seed)
    return model, es_map


def fitness(model, lo, hi, step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(4, 5, generator=g)
    y = model(x.repeat(hi - lo, 1)).view(hi - lo, 4, 3)
    return -((y - torch.sin(x[:, :3])) ** 2).mean(dim=(1, 2))


def test_adapters_leave_the_model_unchanged_and_evolve_only_a_and_b():
    plain, (model, es_map) = Net(), adapted()
    x = torch.randn(7, 5)
    assert torch.equal(plain(x), model(x))
    assert isinstance(model.inp, Adapter) and isinstance(model.out, nn.Linear)
    es = hs.EGGROLL(model, population=P, sigma=0.05, lr=0.05, es_map=es_map)
    assert es.strategy.trainable == ["inp.lora_A.weight", "inp.lora_B.weight", "hidden.lora_A.weight",
                                     "hidden.lora_B.weight"]
    assert evolved_numbers(es) == 2 * (5 + 16) + 2 * (16 + 16)
    frozen = {k: v.clone() for k, v in model.state_dict().items() if "lora" not in k}
    for _ in range(3):
        es.tell(hs.evaluate(es, lambda m, lo, hi, step: fitness(m, lo, hi, step)))
    assert all(torch.equal(model.state_dict()[k], v) for k, v in frozen.items())
    assert model.hidden.lora_B.weight.abs().sum() > 0


def test_adapter_members_are_exact():
    model, es_map = adapted()
    es = hs.EGGROLL(model, population=P, sigma=0.05, lr=0.05, es_map=es_map)
    es.tell(hs.evaluate(es, lambda m, lo, hi, step: fitness(m, lo, hi, 0)))  # B no longer zero
    x = torch.randn(4, 5)
    with es.perturbed():
        y = model(x.repeat(P, 1)).view(P, 4, 3)
    for i in range(P):
        with es.materialized(i):
            torch.testing.assert_close(y[i], model(x), rtol=1e-5, atol=1e-6)


def test_adapter_resume_is_bit_identical_and_merge_gives_plain_layers():
    def steps(es, n):
        for _ in range(n):
            es.tell(hs.evaluate(es, lambda m, lo, hi, step: fitness(m, lo, hi, step)))
    full_model, es_map = adapted()
    full = hs.EGGROLL(full_model, population=P, sigma=0.05, lr=0.05, es_map=es_map, seed=4)
    steps(full, 4)
    a_model, _ = adapted()
    a = hs.EGGROLL(a_model, population=P, sigma=0.05, lr=0.05, es_map=es_map, seed=4)
    steps(a, 2)
    saved = copy.deepcopy(a.state_dict())
    b_model, _ = adapted(seed=1)  # other initial values: the state must overwrite them all
    b = hs.EGGROLL(b_model, population=P, sigma=0.05, lr=0.05, es_map=es_map, seed=4)
    b.load_state_dict(saved)
    steps(b, 2)
    for k, v in full_model.state_dict().items():
        assert torch.equal(b_model.state_dict()[k], v), k
    x = torch.randn(9, 5)
    before = full_model(x)
    merge_adapters(full_model)
    assert type(full_model.inp) is nn.Linear and set(full_model.state_dict()) == set(Net().state_dict())
    assert full_model.inp.weight.requires_grad
    torch.testing.assert_close(full_model(x), before, rtol=1e-5, atol=1e-6)


def test_adapter_choices_are_checked():
    with pytest.raises(ValueError, match=r"patterns \['nope'\] match no Linear"):
        add_adapters(Net(), 2, include=["nope"])
    with pytest.raises(ValueError, match="rank must be a whole number >= 1, got 0"):
        add_adapters(Net(), 0)
    with pytest.raises(ValueError, match="no adapters to merge"):
        merge_adapters(Net())


def test_norms_and_biases_only():
    model = Net()
    es_map = norms_and_biases(model)
    es = hs.OpenES(model, population=P, sigma=0.05, lr=0.05, es_map=es_map)
    assert es.strategy.trainable == ["inp.bias", "norm.weight", "norm.bias", "hidden.bias", "out.bias"]
    assert evolved_numbers(es) == 16 + 32 + 16 + 3
    assert set(norms_and_biases(model, biases=False)) == {"*", "norm.weight", "norm.bias"}
    weights = {k: v.clone() for k, v in model.state_dict().items() if k.endswith("weight") and "norm" not in k}
    es.tell(hs.evaluate(es, lambda m, lo, hi, step: fitness(m, lo, hi, 0)))
    assert all(torch.equal(model.state_dict()[k], v) for k, v in weights.items())
    x = torch.randn(4, 5)
    with es.perturbed():
        y = model(x.repeat(P, 1)).view(P, 4, 3)
    for i in range(P):
        with es.materialized(i):
            torch.testing.assert_close(y[i], model(x), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="Sequential has no norm layers to evolve"):
        norms_and_biases(nn.Sequential(nn.Linear(2, 2, bias=False)), biases=False)
