"""Integer arithmetic of the int8 models: exact matmuls, named roundings, the materialized-member identity."""
import math

import pytest
import torch

from hyperscalees.ops import _reference as ref
from hyperscalees.ops.int8 import (FLOAT32_EXACT_FAN_IN, acc_bound, clip8, div_round_half_away, exp_lut, floor_div, gelu_int8,
                                   int_matmul, lowrank_term, maxabs_requantize, mean_abs_norm, member_vector, rope,
                                   rope_tables, round_shift, shift_of, trunc_div)


def rand_int8(*shape, seed=0):
    return torch.randint(-127, 128, shape, generator=torch.Generator().manual_seed(seed)).to(torch.int8)


def test_clip_never_makes_minus_128():
    y = clip8(torch.tensor([-1000, -128, -127, 0, 127, 128, 5000]))
    assert y.dtype == torch.int8 and y.tolist() == [-127, -127, -127, 0, 127, 127, 127]


def test_float32_bound_is_tight_and_stated():
    assert FLOAT32_EXACT_FAN_IN == 1040
    assert 1040 * 127**2 < 2**24 <= 1041 * 127**2
    # the worst case at the bound: every product 127·127, summed exactly in float32
    for fan_in in (1040, 7):
        x = torch.full((3, fan_in), 127, dtype=torch.int8)
        w = torch.full((5, fan_in), 127, dtype=torch.int8)
        assert torch.equal(int_matmul(x, w, "float32"), x.long() @ w.long().T)
    # one more product and float32 rounds (an odd total above 2^24): the bound is real
    x = torch.full((1, 1041), 127.0)
    assert int((x @ x.T).item()) != 1041 * 127**2
    with pytest.raises(AssertionError, match="2\\^24"):
        int_matmul(torch.zeros(1, 1041, dtype=torch.int8), torch.zeros(2, 1041, dtype=torch.int8), "float32")


@pytest.mark.parametrize("fan_in", [16, 256, 1040, 1500])
def test_int_matmul_paths_equal_int64(fan_in):
    x, w = rand_int8(33, fan_in, seed=1), rand_int8(24, fan_in, seed=2)
    exact = x.long() @ w.long().T
    assert torch.equal(int_matmul(x, w), exact)                      # auto: float32 <= 1040, else float64
    assert torch.equal(int_matmul(x, w, "float64"), exact)
    if hasattr(torch, "_int_mm"):
        try:
            assert torch.equal(int_matmul(x, w, "int_mm"), exact)   # the CUDA path; some CPU builds run it too
        except RuntimeError as e:
            pytest.skip(f"torch._int_mm unavailable on this CPU build: {e}")


def test_roundings_on_hand_inputs():
    n = torch.tensor([-7, 7, -5, 5, -3, 3, 1, -1])
    assert floor_div(n, 2).tolist() == [-4, 3, -3, 2, -2, 1, 0, -1]          # toward -inf (nano-egg //, >>)
    assert trunc_div(n, 2).tolist() == [-3, 3, -2, 2, -1, 1, 0, 0]           # toward 0 (C's /)
    assert div_round_half_away(n, torch.tensor(2)).tolist() == [-4, 4, -3, 3, -2, 2, 1, -1]  # roundf
    assert div_round_half_away(torch.tensor([1, -1, 3]), torch.tensor(4)).tolist() == [0, 0, 1]
    v = torch.tensor([100, -100, 64, -64, 63, -63, 192, -192])
    assert round_shift(v, 7).tolist() == [1, -1, 1, 0, 0, 0, 2, -1]        # floor(v/128 + 1/2): ties go up
    assert (torch.tensor(100) >> 7).item() == 0 and (torch.tensor(-100) >> 7).item() == -1  # d-eggs' bias, avoided
    assert round_shift(v, 0).tolist() == v.tolist() and round_shift(v, -2).tolist() == (v * 4).tolist()


def test_round_shift_is_antisymmetric_off_ties():
    v = torch.arange(-5000, 5001)
    k = 6
    anti = round_shift(v, k) + round_shift(-v, k)
    ties = (v % (1 << k)) == (1 << (k - 1))
    assert bool((anti[~ties] == 0).all()) and bool((anti[ties] == 1).all())


def test_shift_of_accepts_powers_of_two_only():
    assert shift_of(2.0**-8) == 8 and shift_of(1.0) == 0 and shift_of(4.0) == -2
    for bad in (0.003, 0.0, -2.0**-8, float("nan"), float("inf"), 2.0**-41):
        with pytest.raises(ValueError, match="power of two"):
            shift_of(bad)


@pytest.mark.parametrize("g", [2, 1])  # members per draw: antithetic pairs, or independent members
@pytest.mark.parametrize("rank,k", [(1, 8), (2, 5), (3, 0), (1, -2)])
def test_lowrank_term_equals_one_division_of_the_materialized_member(rank, k, g):
    """x Wᵀ + round_shift(s (xB) Aᵀ, k), then floor(/d), equals floor((x W2ᵀ + 2^(k-1)) / (2^k d))."""
    kp, rows, fan_in, fan_out, d = 3, 4, 48, 20, 16 * math.isqrt(48)
    gen = torch.Generator().manual_seed(rank + 10 * k)
    x = rand_int8(g * kp * rows, fan_in, seed=k + 5)
    w = rand_int8(fan_out, fan_in, seed=9)
    a = torch.randint(-80, 81, (kp, fan_out, rank), generator=gen).float()
    b = torch.randint(-80, 81, (kp, fan_in, rank), generator=gen).float()
    signs = torch.tensor([[1.0, -1.0]] * kp) if g == 2 else torch.ones(kp, 1)
    acc = int_matmul(x, w).double() + lowrank_term(x, a, b, signs, k)
    fast = clip8(torch.floor(acc / d)).long()
    xs = x.view(g * kp, rows, fan_in)
    for i in range(g * kp):
        w2 = ref.int_member_matrix(w, a[i // g], b[i // g], int(signs.view(-1)[i]), k)
        want = ref.int_linear_reference(xs[i], w2, max(k, 0), d)
        assert torch.equal(fast.view(g * kp, rows, fan_out)[i], want), f"member {i}"


@pytest.mark.parametrize("fan_in,scale,rank,k,want_dtype", [(32, 85, 1, 8, torch.float32),     # egg's shapes
                                                             (256, 85, 2, 4, torch.float64),    # |z| too wide
                                                             (48, 20, 3, -2, torch.float32),
                                                             (64, 127, 1, -8, torch.float64)])  # k < 0 widens z
def test_lowrank_term_picks_float32_only_where_every_sum_stays_exact(fan_in, scale, rank, k, want_dtype):
    """With the caller's accumulator bound the term may come back in float32; it must equal the int64
    term, and so must the caller's sum with the largest possible accumulator."""
    kp, rows, fan_out = 4, 8, 24
    g = torch.Generator().manual_seed(fan_in + rank)
    x = rand_int8(2 * kp * rows, fan_in, seed=fan_in)
    a = torch.randint(-scale, scale + 1, (kp, fan_out, rank), generator=g).float()
    b = torch.randint(-scale, scale + 1, (kp, fan_in, rank), generator=g).float()
    signs = torch.tensor([[1.0, -1.0]] * kp)
    z = lowrank_term(x, a, b, signs, k, b_max=scale, acc_max=acc_bound(fan_in))
    assert z.dtype == want_dtype
    s = signs.long().view(kp, 2, 1, 1)
    u = x.long().view(kp, 2, rows, fan_in) @ b.long().unsqueeze(1)                     # (K, 2, R, r)
    want = round_shift(s * (u @ a.long().transpose(1, 2).unsqueeze(1)), k).view(-1, fan_out)
    assert torch.equal(z.long(), want)
    assert torch.equal(lowrank_term(x, a, b, signs, k, b_max=scale).long(), want)        # no bound: float64
    extreme = torch.full_like(z, acc_bound(fan_in))
    assert torch.equal((z + extreme).long(), want + int(acc_bound(fan_in)))


def test_member_vectors_and_the_zero_guarded_norm():
    v = torch.tensor([16, -127, 127, 0], dtype=torch.int8)
    eps = torch.tensor([[40.0, -300.0, 300.0, -8.0]])
    got = member_vector(v, eps, torch.tensor([[1.0, -1.0]]), 4)     # (1, 2, 1, 4)
    assert got.view(2, 4).tolist() == [[19, -127, 127, 0], [14, -108, 108, 1]]  # ±(40/16=2.5 -> 3 / -2)
    one = member_vector(v, eps, torch.tensor([[1.0]]), 4)              # an independent member: (1, 1, 1, 4)
    assert one.shape == (1, 1, 1, 4) and one.view(4).tolist() == [19, -127, 127, 0]
    x = torch.zeros(2, 8, dtype=torch.int8)                             # Σ|x| = 0: nano-egg divided by 0 here
    assert torch.equal(mean_abs_norm(x, torch.full((8,), 16)), torch.zeros(2, 8, dtype=torch.int64))
    x = torch.tensor([[3, -5, 0, 0, 0, 0, 0, 0]])                        # Σ|x| = 8 = D: m = 1
    assert mean_abs_norm(x, torch.full((8,), 16)).tolist() == [[48, -80, 0, 0, 0, 0, 0, 0]]
    x = torch.tensor([[30, -30, 30, -31]])                              # m = floor(121 / 4) = 30
    w = torch.tensor([1, 1, 1, 1])
    assert mean_abs_norm(x, w, rounding="floor").tolist() == [[1, -1, 1, -2]]
    assert mean_abs_norm(x, w, rounding="trunc").tolist() == [[1, -1, 1, -1]]


def test_maxabs_requantize_rounds_half_away_exactly():
    assert maxabs_requantize(torch.tensor([[1, -2, 4]])).tolist() == [[32, -64, 127]]  # 31.75, -63.5, 127
    assert maxabs_requantize(torch.zeros(1, 5, dtype=torch.int64)).tolist() == [[0] * 5]
    v = torch.randint(-5000, 5001, (64, 33), generator=torch.Generator().manual_seed(0))
    m = v.abs().amax(dim=-1, keepdim=True).double()
    want = torch.sign(v) * torch.floor(v.abs().double() * 127 / m + 0.5)
    assert torch.equal(maxabs_requantize(v).long(), want.long())


def test_lookup_tables():
    e = exp_lut()
    assert e[0] == 2**18 and e[6] == round(math.exp(-1) * 2**18) and bool((e[:-1] >= e[1:]).all())
    assert int(e[100]) == 0 and int(e[70]) > 0
    q = torch.arange(-127, 128)
    gl = gelu_int8(q)
    assert gl[127] == 0 and gl[-1] == 127 and int(gl[0]) == 0 and int(gl.min()) == -3   # min of 16·gelu ≈ -2.7
    cos, sin = rope_tables(5, 8)
    x = torch.randint(-127, 128, (5, 8))
    assert torch.equal(rope(x[:1], cos[:1], sin[:1]), x[:1])                   # position 0: identity
    angle = torch.tensor([t * 10000 ** (-2.0 * i / 8) for t in range(5) for i in range(4)]).view(5, 4).double()
    xe, xo = x[:, 0::2].double(), x[:, 1::2].double()
    want = torch.stack([xe * angle.cos() - xo * angle.sin(), xe * angle.sin() + xo * angle.cos()], -1).flatten(-2)
    assert float((rope(x, cos, sin).double() - want).abs().max()) <= 0.5 + 1e-3
