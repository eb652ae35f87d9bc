"""Per-layer init std under muP (ezmup's InitStd): the base width draws the standard init, other widths
follow the rule."""
import pytest
import torch
from torch import nn

from hyperscalees.mup import apply_mup, compare_widths, init_per_layer, layer_stds

torch.set_num_threads(1)
STDS = {"*.weight": 0.5, "0.weight": 1.5, "4.weight": 0.02}     # last match wins: input and readout get their own


def net(n):
    torch.manual_seed(0)                            # same biases for models built alike
    return nn.Sequential(nn.Linear(16, n), nn.ReLU(), nn.Linear(n, n), nn.ReLU(), nn.Linear(n, 8))


def test_at_the_base_width_the_init_is_the_standard_one_bit_for_bit():
    model = net(64)
    init_per_layer(model, compare_widths(net(64), model), STDS, torch.Generator().manual_seed(3))
    ref, g = net(64), torch.Generator().manual_seed(3)
    for name, p in ref.named_parameters():          # the same draws, in the same order, at the named stds
        if name.endswith("weight"):
            nn.init.normal_(p, 0.0, {"0.weight": 1.5, "4.weight": 0.02}.get(name, 0.5), generator=g)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), ref.parameters()))


def test_at_other_widths_each_layer_follows_its_kind():
    m = 16                                          # 64 -> 1024
    widths = compare_widths(net(64), net(1024))
    stds = layer_stds(net(1024), widths, STDS)
    assert stds == pytest.approx({"0.weight": 1.5, "2.weight": 0.5 / m ** 0.5, "4.weight": 0.02})
    model = net(1024)
    groups = apply_mup(model, net(64), 0.01, init_std=STDS, generator=torch.Generator().manual_seed(0))
    measured = {n: p.std().item() for n, p in model.named_parameters() if n.endswith("weight")}
    assert measured == pytest.approx(stds, rel=0.05)   # input Θ(1), hidden 1/√m, readout its base std
    assert groups                                       # the groups are still made


def test_a_float_names_every_weight_and_leaves_biases():
    model = net(256)
    before = model[0].bias.clone()
    stds = init_per_layer(model, compare_widths(net(64), model), 0.1)
    assert sorted(stds) == ["0.weight", "2.weight", "4.weight"] and stds["2.weight"] == pytest.approx(0.05)
    assert torch.equal(model[0].bias, before)


def test_bad_patterns_and_values_are_refused_by_name():
    widths = compare_widths(net(64), net(128))
    with pytest.raises(ValueError, match="'blocks.*' matches no parameter"):
        layer_stds(net(128), widths, {"blocks.*": 0.1})
    with pytest.raises(ValueError, match="'2.weight' must be a finite number >= 0, got -1"):
        layer_stds(net(128), widths, {"2.weight": -1})
    with pytest.raises(TypeError, match="init_std must be a float or a dict"):
        layer_stds(net(128), widths, "0.1")
