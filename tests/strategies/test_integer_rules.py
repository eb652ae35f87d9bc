"""Integer update rules and ternary shapings: each exact rule on small hand-checked inputs, and exact resume."""
import math
from types import SimpleNamespace

import pytest
import torch

from hyperscalees.strategies.config import ESConfig
from hyperscalees.strategies.groups import ParamGroup
from hyperscalees.strategies.rules import RULES
from hyperscalees.strategies.rules.integer import (SECOND_MOMENTS, AdamWRule, MuonRule, ThresholdSGDRule, ZTestRule,
                                                   newton_schulz_cubic, quantized_apply, term_std, ztest_threshold)
from hyperscalees.strategies.shaping import SHAPINGS, adaptive_pair_sign, chunk_mean_filter

POP = SimpleNamespace(num_pairs=4, distribution="int_uniform", rank=1)   # vote scale of a matrix: 77.5·√4 = 155


def make(rule_cls, params, lr=1.0, wd=0.0, **kw):
    groups = [ParamGroup(tuple(params), lr, wd)]
    return rule_cls(params, groups, ESConfig(population=8, update_rule="custom"), **kw)


def step(rule, votes: dict, coef=0.25, lr_factor=1.0):
    """Hand the rule ĝ = coef · Z, as the strategy would."""
    rule.prepare(POP, {n: coef for n in votes})
    rule.apply({n: coef * torch.as_tensor(z, dtype=torch.float32) for n, z in votes.items()}, lr_factor)


def test_registered_and_float_weights_refused():
    assert {"int_ztest", "int_sgd", "int_adamw", "int_muon"} <= set(RULES)
    with pytest.raises(ValueError, match="'w' is torch.float32.*integer"):
        make(ZTestRule, {"w": torch.zeros(2)})


def test_distribution_moments():
    assert SECOND_MOMENTS["int_uniform"] == 77.5                          # d-eggs: E[v²] of [-15, 15]
    assert 15.3**2 < SECOND_MOMENTS["int"] < 15.7**2                       # trunc(16 N): std ≈ 15.5
    assert term_std("int_uniform", True, 1) == 77.5 and term_std("int_uniform", False, 1) == math.sqrt(77.5)
    assert term_std("gaussian", True, 4) == 2.0


def test_ztest_threshold_and_nano_egg_schedule():
    assert [ztest_threshold(a) for a in (1.0, 1 / 16, 1 / 8, 1 / 4)] == [0, 29, 24, 18]
    rule = make(ZTestRule, {"w": torch.zeros(2, 2, dtype=torch.int8)})
    want = {3: 0, 4: 1, 100: 13, 500: 25, 999: 29}                         # nano-egg's computed thresholds
    for t, thr in want.items():
        rule.step = t
        assert ztest_threshold(rule.alpha("w", 1.0)) == thr, t


def test_ztest_rule_by_hand():
    w = torch.tensor([[0, 5], [127, -127]], dtype=torch.int8)
    v = torch.tensor([3, 3], dtype=torch.int8)
    rule = make(ZTestRule, {"w": w, "v": v}, lr=1 / 16, alpha_decay=0)   # constant α = 1/16: thr 29
    # matrix: move iff |Z|·16 >= 29·155 = 4495, i.e. |Z| >= 281; vector: std √77.5·2 -> |Z| >= 31.9
    step(rule, {"w": [[281, -280], [300, -300]], "v": [32, -31]})
    assert w.tolist() == [[1, 5], [127, -127]] and v.tolist() == [4, 3]
    rule.step = 0
    rule2 = make(ZTestRule, {"w": w}, lr=1.0)                             # α = 1: thr 0, every nonzero Z moves
    step(rule2, {"w": [[0, -1], [-2, 1]]})
    assert w.tolist() == [[1, 4], [126, -126]]                            # Z == 0 stays (nano-egg moved it down)
    assert rule2.changed == 3


def test_quantized_apply_by_hand():
    w = torch.tensor([0, 126, 127, -127, 5, 0], dtype=torch.int8)
    acc = torch.tensor([1.5, 1.0, 2.5, -3.0, -0.99, 7.0])
    step = quantized_apply(w, acc)
    assert w.tolist() == [1, 127, 127, -127, 5, 1]                       # at most one unit per update
    assert acc.tolist() == pytest.approx([0.5, 0.0, 1.0, -1.0, -0.99, 6.0])  # clamped at a bound, else carried
    assert step.tolist() == [1, 1, 0, 0, 0, 1]


def test_threshold_sgd_by_hand():
    w = torch.tensor([10, -10, 0], dtype=torch.int8)
    rule = make(ThresholdSGDRule, {"w": w}, lr=0.5, wd=0.01)
    z_scale = math.sqrt(77.5) * 2                                          # vector: z = Z / (√77.5 · √4)
    step(rule, {"w": [39.0, 0.0, -18.0]})                                  # z = [2.2149, 0, -1.0222]
    acc = [0.5 * (39 / z_scale - 0.1), 0.5 * 0.1, 0.5 * (-18 / z_scale)]  # 0.5·(z − 0.01·w)
    assert acc[0] > 1 and -1 < acc[2] < 0
    assert w.tolist() == [11, -10, 0]
    assert rule.acc["w"].tolist() == pytest.approx([acc[0] - 1, acc[1], acc[2]], abs=1e-5)


def test_adamw_first_step_has_no_bias_correction():
    w = torch.tensor([0, 0, 3], dtype=torch.int8)
    rule = make(AdamWRule, {"w": w}, lr=2.5)
    s = math.sqrt(77.5) * 2
    step(rule, {"w": [s, -4 * s, 0.0]})
    # m/√v = 0.1 z / √(0.05 z²) = 0.4472·sign(z): acc = 2.5·0.4472 = 1.118
    assert w.tolist() == [1, -1, 3]
    assert rule.acc["w"].tolist() == pytest.approx([1.118034 - 1, -(1.118034 - 1), 0.0], abs=1e-4)


def test_muon_uses_cubic_newton_schulz_on_the_raw_momentum():
    m = torch.tensor([[3.0, 0.0], [0.0, 4.0]])
    x = m / 5.0
    for _ in range(5):
        x = 0.5 * x @ (3 * torch.eye(2) - x.T @ x)
    assert torch.allclose(newton_schulz_cubic(m), x) and float(x.diagonal().min()) > 0.99   # ≈ orthogonal
    w = torch.zeros(2, 2, dtype=torch.int8)
    emb = torch.zeros(3, 2, dtype=torch.int8)
    rule = make(MuonRule, {"w": w, "embed.weight": emb}, lr=1.0)
    assert rule.matrices == {"w"}                                          # embeddings stay on AdamW
    scale = 77.5 * 2
    step(rule, {"w": [[3 * scale, 0], [0, 4 * scale]], "embed.weight": torch.zeros(3, 2)})
    want_w, want_acc = torch.zeros(2, 2, dtype=torch.int8), x.clone()
    quantized_apply(want_w, want_acc)                                     # acc = lr·X, then the ±1 apply
    assert torch.equal(w, want_w) and torch.allclose(rule.acc["w"], want_acc, atol=1e-6)
    assert torch.allclose(rule.m["w"], torch.tensor([[3.0, 0], [0, 4.0]]))  # m = 0.85·0 + z (raw vote)


@pytest.mark.parametrize("rule_cls", [ZTestRule, ThresholdSGDRule, AdamWRule, MuonRule])
def test_resume_is_exact(rule_cls):
    g = torch.Generator().manual_seed(0)
    votes = [{"a": torch.randn(4, 3, generator=g) * 400, "b": torch.randn(3, generator=g) * 40} for _ in range(6)]

    def fresh():
        return {"a": torch.zeros(4, 3, dtype=torch.int8), "b": torch.zeros(3, dtype=torch.int8)}

    p1 = fresh()
    r1 = make(rule_cls, p1, lr=0.3)
    for v in votes:
        step(r1, v)
    p2 = fresh()
    r2 = make(rule_cls, p2, lr=0.3)
    for v in votes[:3]:
        step(r2, v)
    saved, weights = r2.state_dict(), {n: t.clone() for n, t in p2.items()}
    p3 = {n: t.clone() for n, t in weights.items()}
    r3 = make(rule_cls, p3, lr=0.3)
    r3.load_state_dict(saved)
    for v in votes[3:]:
        step(r3, v)
    assert all(torch.equal(p1[n], p3[n]) for n in p1)
    assert any(int(t.abs().sum()) for t in p1.values())                    # something moved


def test_adaptive_pair_sign_dead_zone_and_zero_fix():
    f = torch.tensor([1.0, 0.0, 0.0, 0.05, -2.0, 1.0, 3.0, 3.0])         # diffs 1, -0.05, -3, 0: mean|d| = 1.0125
    got = adaptive_pair_sign(f, alpha=0.1)                                # threshold 0.10125
    assert got.tolist() == [0.5, -0.5, 0.0, 0.0, -0.5, 0.5, 0.0, 0.0]
    assert adaptive_pair_sign(torch.zeros(6)).tolist() == [0.0] * 6     # d-eggs made these all −1
    assert SHAPINGS["pair_sign_adaptive"] is adaptive_pair_sign


def test_chunk_mean_filter_by_hand():
    d = torch.tensor([1.0, 3.0, -8.0, 0.0])
    assert chunk_mean_filter(d, chunk=2).tolist() == pytest.approx([1 + 2**1.2, 3 + 2**1.2, -8 - 4**1.2, -4**1.2])
    assert chunk_mean_filter(d).tolist() == pytest.approx((d - 1.0).tolist())   # one chunk: mean −1
    with pytest.raises(ValueError, match="chunks of 3"):
        chunk_mean_filter(d, chunk=3)
    f = torch.tensor([0.1, 0.0, 0.0, 0.1, 0.1, 0.0, 0.1, 0.0])             # diffs 0.1, -0.1, 0.1, 0.1
    filtered = SHAPINGS["pair_sign_filtered"](f)                           # + 0.05^1.2 ≈ 0.0273 each
    assert filtered.view(-1, 2)[:, 0].tolist() == [0.5, -0.5, 0.5, 0.5]


def test_adaptive_noise_overlays_by_hand():
    w = torch.zeros(2, 3, dtype=torch.int8)
    v = torch.zeros(2, dtype=torch.int8)
    rule = make(ZTestRule, {"w": w, "v": v}, lr=1.0, adaptive_noise=True)
    assert not make(ZTestRule, {"w": w}).overlays and make(AdamWRule, {"w": w}).adaptive_noise  # d-eggs' defaults
    assert [o.tolist() for o in rule.overlays["w"]] == [[64, 64], [64, 64, 64]]
    step(rule, {"w": [[500, 0, 0], [0, 0, 0]], "v": [0, -9]})              # thr 0: nonzero votes move
    assert w.tolist() == [[1, 0, 0], [0, 0, 0]] and v.tolist() == [0, -1]
    assert [o.tolist() for o in rule.overlays["w"]] == [[69, 63], [69, 63, 63]]   # +5 where moved, −1 elsewhere
    assert rule.overlays["v"][0].tolist() == [63, 69]
    rule.overlays["w"][0].copy_(torch.tensor([-3, 32]))
    f_row, f_col = rule.noise_overlays()["w"]
    assert f_row.tolist() == [0.0, 0.5] and f_col.tolist() == pytest.approx([1.0, 63 / 64, 63 / 64])
    assert rule.noise_overlays()["v"][1] is None
    # votes are weighed by the factors the noise had: row 0 (noise off) gets none
    step(rule, {"w": [[900, 900, 900], [64, 64, 64]], "v": [0, 0]})
    assert w.tolist() == [[1, 0, 0], [1, 1, 1]]
    big = torch.tensor([[127] * 3] * 2, dtype=torch.int16)
    for _ in range(40):
        rule.update_overlay("w", big)
    assert int(rule.overlays["w"][0].max()) == 127                            # clamped


def test_integer_weights_keep_an_fp32_update_gemm_on_cuda():
    """auto picks TF32 for float weights on CUDA; integer weights keep fp32 so the votes stay exact."""
    from hyperscalees.ops.precision import resolve_precision
    cuda = torch.device("cuda")
    assert resolve_precision("auto", torch.float32, cuda) == "tf32"
    assert resolve_precision("auto", torch.int8, cuda) == "fp32"
