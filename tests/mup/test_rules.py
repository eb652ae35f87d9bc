"""muP's rules as parameter groups: the tables, the base-width anchor, merging and refusing."""
import math

import pytest
import torch
from torch import nn

import hyperscalees as hs
from hyperscalees.models import TinyLM
from hyperscalees.mup import (ParamWidth, add_output_multipliers, attention_scale, change_width, compare_widths,
                              multipliers, mup_groups, rescale_readout_init, set_attention_scale, torch_groups)

torch.set_num_threads(1)
K = 47


def net():
    return nn.Sequential(nn.Linear(3, K), nn.Tanh(), nn.Linear(K, K), nn.Tanh(), nn.Linear(K, 2))


def lrs(groups):
    return {n: (g["lr"], g["sigma_scale"]) for g in groups for n in g["params"]}


@pytest.mark.parametrize("optimizer,es", [("sgd", False), ("adam", False), ("sgd", True), ("adam", True)])
def test_nothing_changes_at_the_base_width(optimizer, es):
    # ezmup's multipliers are absolute (fan_out/fan_in/64): at no width do they equal the tuned lr (bug 12)
    m = net()
    widths = change_width(m, 64, base_width=64)
    assert set(lrs(mup_groups(widths, 0.01, optimizer, es)).values()) == {(0.01, 1.0)}
    assert add_output_multipliers(m, widths) == []


H, I, O = ParamWidth("h", "hidden", 4.0, 4.0), ParamWidth("i", "input", 1.0, 4.0), ParamWidth("o", "output", 4.0, 1.0)


def test_gradient_tables():
    # SGD: input ∝ fan_out, hidden Θ(1), output ∝ fan_in (with its 1/m forward multiplier)
    assert [multipliers(p, "sgd").lr for p in (I, H, O)] == [4.0, 1.0, 4.0]
    # Adam: only hidden matrices get 1/m; ezmup gave Adam the SGD rule (input lr growing with width)
    assert [multipliers(p, "adam").lr for p in (I, H, O)] == [1.0, 0.25, 1.0]
    assert [multipliers(p).init for p in (I, H, O)] == [1.0, 0.5, 1.0]   # the readout keeps its base std
    assert [multipliers(p).output for p in (I, H, O)] == [1.0, 1.0, 0.25]


def test_es_tables():
    assert [multipliers(p, "adam", es=True).sigma for p in (I, H, O)] == [1.0, 0.5, 2.0]
    assert [multipliers(p, "adam", es=True).lr for p in (I, H, O)] == [1.0, 0.5, 2.0]
    assert [multipliers(p, "sgd", es=True).lr for p in (I, H, O)] == [1.0, 0.25, 4.0]
    assert multipliers(H, "adam", es=True, parametrization="standard").sigma == 1.0
    with pytest.raises(ValueError, match="no muP rule for optimizer 'rmsprop'"):
        multipliers(H, "rmsprop")


def test_groups_reach_the_es_strategy():
    m = net()
    widths = change_width(m, 256, base_width=64)
    groups = mup_groups(widths, 0.01, "adam", es=True)
    es = hs.EGGROLL(m, population=4, sigma=0.1, lr=0.01, groups=groups)
    store = es.strategy.store()
    assert math.isclose(store.sigma("2.weight"), 0.1 / 2)          # hidden: σ/√4
    assert math.isclose(store.sigma("4.weight"), 0.1 * 2)          # readout: σ·√4
    assert math.isclose(store.sigma("0.weight"), 0.1)              # input: unchanged
    by_name = {g.name: g.lr for g in es.strategy.groups}
    assert sorted(by_name.values()) == pytest.approx([0.005, 0.01, 0.02])


def test_user_groups_are_merged_by_multiplying():
    m = net()
    widths = change_width(m, 256, base_width=64)
    user = [{"params": ["2.*"], "lr": 0.1, "weight_decay": 0.5, "name": "mid"}]
    got = lrs(mup_groups(widths, 0.01, "adam", groups=user))
    assert got["2.weight"] == (pytest.approx(0.1 / 4), 1.0)        # user lr x muP's hidden 1/m
    assert got["2.bias"] == (0.1, 1.0)                             # same user group, vector: split off
    assert got["0.weight"] == (0.01, 1.0)
    g = [g for g in mup_groups(widths, 0.01, "adam", groups=user) if "2.weight" in g["params"]][0]
    assert g["weight_decay"] == 0.5 and g["name"].startswith("mup/mid/")


def test_a_group_is_named_after_every_kind_it_holds():
    widths = change_width(net(), 256, base_width=64)
    names = {g["name"]: g["params"] for g in mup_groups(widths, 0.01, "adam")}   # Adam: all but hidden get lr 1x
    assert names == {"mup/default/fixed+input+output": ["0.weight", "0.bias", "2.bias", "4.weight", "4.bias"],
                     "mup/default/hidden": ["2.weight"]}
    assert [g["name"] for g in mup_groups(widths, 0.01, "adam", es=True)] == ["mup/default/fixed+input",
                                                                              "mup/default/hidden",
                                                                              "mup/default/output"]
    assert [g["name"] for g in mup_groups(widths, 0.01, parametrization="standard")] == \
        ["mup/default/fixed+input+hidden+output"]


def test_groups_muP_cannot_merge_are_refused():
    widths = change_width(net(), 128, base_width=64)
    made = mup_groups(widths, 0.01)
    with pytest.raises(ValueError, match="already made by mup_groups"):
        mup_groups(widths, 0.01, groups=made)
    with pytest.raises(ValueError, match=r"cannot merge key\(s\) \['momentum'\]"):
        mup_groups(widths, 0.01, groups=[{"params": "0.*", "momentum": 0.9}])
    with pytest.raises(ValueError, match="match no parameter"):
        mup_groups(widths, 0.01, groups=[{"params": "nope.*"}])
    with pytest.raises(ValueError, match="no width record"):
        mup_groups(widths, 0.01, names=["0.weight", "extra"])


def test_torch_groups_drive_a_torch_optimizer():
    m = net()
    widths = change_width(m, 128, base_width=64)
    opt = torch.optim.Adam(torch_groups(m, mup_groups(widths, 1e-3, "adam")))
    per = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    assert per[id(m[2].weight)] == pytest.approx(5e-4) and per[id(m[0].weight)] == 1e-3


def test_output_multiplier_scales_the_readout_forward():
    m = net()
    widths = change_width(m, 256, base_width=64)
    x = torch.randn(5, 3)
    before = m(x)
    handles = add_output_multipliers(m, widths)
    assert len(handles) == 1
    b = m[4].bias
    torch.testing.assert_close(m(x), (before - b) / 4 + b)         # α·W x + b: the bias is no readout weight
    for h in handles:
        h.remove()


def test_attention_scale_is_one_over_d_anchored():
    assert attention_scale(64, 64) == 1 / 8                     # SDPA's own 1/√d at the base
    assert attention_scale(256, 64) == 8 / 256                  # 1/d beyond it
    base, big = TinyLM(13, 64, 1, 8), TinyLM(13, 256, 1, 8)
    assert set_attention_scale(big, 64) == 1 and big.blocks[0].attn_scale == 1 / 8   # TinyLM: head_dim fixed
    idx = torch.randint(0, 13, (2, 5))
    widths = compare_widths(base, big)
    assert widths["blocks.0.qkv.weight"].kind == "hidden"
    assert big(idx).shape == (2, 5, 13)


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_one_gradient_step_moves_each_layer_alike_at_every_width(optimizer):
    """Gradient muP, numerically: rms change of each layer's output (on its own input) after one
    step is flat in width under muP; under standard parametrisation the hidden layer's grows (Adam: ∝ n)."""
    def change(n, parametrization):
        torch.manual_seed(0)
        base, model = (nn.Sequential(nn.Linear(8, w), nn.Tanh(), nn.Linear(w, w), nn.Tanh(), nn.Linear(w, 4))
                       for w in (64, n))
        widths = compare_widths(base, model)
        if parametrization == "mup":
            add_output_multipliers(model, widths)
            rescale_readout_init(model, widths)
        groups = mup_groups(widths, 1e-3 if optimizer == "adam" else 0.05, optimizer, parametrization=parametrization)
        opt = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}[optimizer](torch_groups(model, groups))
        x, y = torch.randn(8, 8, generator=torch.Generator().manual_seed(1)), 5 * torch.randn(8, 4)  # y >> logits;
        # a small batch: the B·√n cross terms of ΔW h next to its n diagonal vanish sooner in width
        ins = {}
        hooks = [model[i].register_forward_pre_hook(lambda m, a, i=i: ins.__setitem__(i, a[0].detach()), prepend=True)
                 for i in (2, 4)]
        ((model(x) - y) ** 2).mean().backward()
        for h in hooks:
            h.remove()
        before = {i: model[i](ins[i]).detach() for i in (2, 4)}
        opt.step()
        return {i: (model[i](ins[i]).detach() - before[i]).pow(2).mean().sqrt().item() for i in (2, 4)}

    widths = (64, 256, 1024)
    def slope(pz, i):
        cs = [change(n, pz)[i] for n in widths]
        return math.log(cs[-1] / cs[0]) / math.log(widths[-1] / widths[0])
    for i in (2, 4):
        assert abs(slope("mup", i)) <= 0.15, (optimizer, i, slope("mup", i))
    assert slope("standard", 2) >= 0.5, slope("standard", 2)
