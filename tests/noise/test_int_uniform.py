"""Integer noise: d-eggs' uniform small integers (``int_uniform``) and the bounds the int8 layers rely on."""
import pytest
import torch

from hyperscalees.noise.distributions import INTEGER_MAX, bits_to_noise

ALL_TOP = torch.arange(1 << 23, dtype=torch.int32)


def test_int_uniform_maps_bits_like_d_eggs():
    # sign from bit 0 (set: +), magnitude from bits 1-4
    bits = torch.tensor([0b00001, 0b00000, 0b11111, 0b11110, 0b100011, -1, -2], dtype=torch.int32)
    assert bits_to_noise(bits, "int_uniform").tolist() == [0, 0, 15, -15, 1, 15, -15]
    v = bits_to_noise(torch.arange(1 << 16, dtype=torch.int32) * 40503, "int_uniform")
    counts = torch.bincount((v + 15).long(), minlength=31).float() / v.numel()
    assert abs(float(counts[15]) - 1 / 16) < 0.01 and abs(float(counts[20]) - 1 / 32) < 0.01
    assert float(v.pow(2).mean()) == pytest.approx(77.5, rel=0.03)
    assert bits_to_noise(bits, "int_uniform", torch.int8).dtype == torch.int8


def test_integer_maxima_hold_on_every_input():
    """``int`` reads the top 23 bits only: all 2^23 inputs give |v| <= 84 here (85 is the stated bound:
    the GPU's erfinv may differ by one); int_uniform <= 15."""
    assert int(bits_to_noise(ALL_TOP << 9, "int").abs().max()) == 84 < INTEGER_MAX["int"] == 85
    low = torch.arange(1 << 16, dtype=torch.int32)
    assert int(bits_to_noise(low, "int_uniform").abs().max()) == INTEGER_MAX["int_uniform"] == 15


def test_fused_kernel_draws_the_same_int_uniform_values():
    pytest.importorskip("triton")
    from test_fused import kernel_draw, reference
    pairs = torch.tensor([0, 5, 2**31 + 3])
    got = kernel_draw(0x1234ABCD, pairs, None, 1000, "int_uniform")
    assert torch.equal(got, reference(0x1234ABCD, pairs, None, 1000, "int_uniform"))
