"""muP in one call (apply_mup), restricted to what ES evolves, and the registries it reads."""
import pytest
import torch
from torch import nn

import hyperscalees as hs
from hyperscalees.mup import apply_mup, compare_widths, multipliers, mup_groups
from hyperscalees.mup.rules import FAMILY
from hyperscalees.mup.width import named_owned
from hyperscalees.nn.es_map import owned_parameters
from hyperscalees.strategies.rules.optimizers import OPTIMIZERS

torch.set_num_threads(1)


def net(n):
    return nn.Sequential(nn.Linear(8, n), nn.Tanh(), nn.Linear(n, n), nn.Tanh(), nn.Linear(n, 4))


def test_groups_follow_the_es_map_so_a_frozen_parameter_is_not_named():
    # issue 39 defect 5: groups over every width record named frozen parameters, and the facade refused them
    model = net(256)
    widths = compare_widths(net(64), model)
    es_map = {"*": "excluded", "2.weight": "lowrank", "4.weight": "lowrank"}   # what llm.evolving returns
    groups = mup_groups(widths, 0.01, "adam", es=True, model=model, es_map=es_map)
    assert sorted(n for g in groups for n in g["params"]) == ["2.weight", "4.weight"]
    hs.EGGROLL(model, population=4, sigma=0.1, lr=0.01, es_map=es_map, groups=groups)  # refused before the fix
    assert {(g["lr"], g["sigma_scale"]) for g in groups} == {(0.005, 0.5), (0.02, 2.0)}
    with pytest.raises(ValueError, match="es_map needs the model"):
        mup_groups(widths, 0.01, es=True, es_map=es_map)


def test_frozen_by_requires_grad_is_left_out_too():
    model = net(128)
    model[0].bias.requires_grad_(False)
    groups = mup_groups(compare_widths(net(64), model), 0.01, es=True, model=model)
    assert "0.bias" not in {n for g in groups for n in g["params"]}
    hs.EGGROLL(model, population=4, sigma=0.1, lr=0.01, groups=groups)


def test_optimizers_are_read_from_the_registry():
    # FAMILY listed lion and signsgd (no such optimizer) and lacked muon: now every name is a registered one
    assert set(FAMILY) <= set(OPTIMIZERS) and {"sgd", "adam", "adamw"} <= set(FAMILY)
    with pytest.raises(ValueError, match="no muP rule for optimizer 'muon'"):
        multipliers(compare_widths(net(64), net(128))["2.weight"], "muon", es=True)


def test_named_owned_is_owned_parameters_once_per_tied_tensor():
    model = nn.Sequential(nn.Embedding(10, 6), nn.Linear(6, 10, bias=False))
    model[1].weight = model[0].weight        # tied readout
    ours = [(name, id(p)) for _, _, name, p in named_owned(model)]
    firsts = {}
    for mod, attr, name, p in owned_parameters(model):
        firsts.setdefault(name, (mod, p))
    assert ours == [(n, id(p)) for n, (_, p) in firsts.items()] and len(ours) == 1
    assert next(named_owned(model))[0] is model[0]        # the first owner decides the fans


def test_apply_mup_is_the_five_calls_and_nothing_at_the_base_width():
    torch.manual_seed(0)
    same, base = net(64), net(64)
    before = [p.clone() for p in same.parameters()]
    groups = apply_mup(same, base, 0.01)
    assert {(g["lr"], g["sigma_scale"]) for g in groups} == {(0.01, 1.0)}
    assert all(torch.equal(a, b) for a, b in zip(before, same.parameters()))
    wide = net(256)
    readout = wide[4].weight.clone()
    groups = apply_mup(wide, net(64), 0.01)
    assert torch.allclose(wide[4].weight, readout * 2.0)                 # base-width std: ×√m, m = 4
    by_name = {n: (g["lr"], g["sigma_scale"]) for g in groups for n in g["params"]}
    assert by_name["2.weight"] == (0.005, 0.5) and by_name["4.weight"] == (0.02, 2.0)
    h = wide[:4](torch.randn(3, 8))
    assert torch.allclose(wide[4](h), nn.functional.linear(h * 0.25, wide[4].weight, wide[4].bias))  # 1/m hook
