"""The fused noise kernel: counter hash -> uniform -> noise value, in one pass (Triton).

Loaded only through :mod:`hyperscalees.noise.fused`, which imports this file once per mode
(compiled for the GPU, or under Triton's interpreter so CI checks it on a CPU): whether
``triton.jit`` builds a GPU or an interpreted function is fixed when the decorator runs.

One program writes ``BLOCK`` values of one pair's row. Everything a value depends on is
read from device memory -- the parameter's key, the pair indices, the element indices --
so the launch holds no per-step Python scalars and can be replayed inside a CUDA graph.

The integer part is bit-identical to :mod:`hyperscalees.noise.keys` (lowbias32 on
uint32, which wraps exactly like the int32 tensors of the torch path). Of the float maps,
``uniform`` and ``rademacher`` and the centred uniform 2u − 1 are each at most one IEEE
rounding, hence the same on every device. The Gaussian's erfinv is M. Giles'
single-precision approximation ("Approximating the erfinv function", GPU Computing Gems,
2011), written out here because Triton has no erfinv; its distance from the float64
erfinv is bounded and tested over all 2²³ inputs (tests/noise/test_fused.py; measured under Triton's
CPU interpreter, not yet confirmed on a GPU).
"""
from __future__ import annotations

import triton
import triton.language as tl

GAUSSIAN, UNIFORM, RADEMACHER, INT = 0, 1, 2, 3  # the ``DIST`` codes, in fused.DIST_CODES


@triton.jit
def _lowbias32(x):
    """lowbias32 on uint32 (keys.mix_int)."""
    x ^= x >> 16
    x *= 0x7FEB352D
    x ^= x >> 15
    x *= 0x846CA68B
    x ^= x >> 16
    return x


@triton.jit
def _erfinv(x):
    """erfinv on float32 in (-1, 1), Giles' two-branch polynomial."""
    w = -tl.log((1.0 - x) * (1.0 + x))
    central = w < 5.0
    wc = w - 2.5
    pc = 2.81022636e-08
    pc = 3.43273939e-07 + pc * wc
    pc = -3.5233877e-06 + pc * wc
    pc = -4.39150654e-06 + pc * wc
    pc = 0.00021858087 + pc * wc
    pc = -0.00125372503 + pc * wc
    pc = -0.00417768164 + pc * wc
    pc = 0.246640727 + pc * wc
    pc = 1.50140941 + pc * wc
    wt = tl.sqrt(tl.maximum(w, 5.0)) - 3.0
    pt = -0.000200214257
    pt = 0.000100950558 + pt * wt
    pt = 0.00134934322 + pt * wt
    pt = -0.00367342844 + pt * wt
    pt = 0.00573950773 + pt * wt
    pt = -0.0076224613 + pt * wt
    pt = 0.00943887047 + pt * wt
    pt = 1.00167406 + pt * wt
    pt = 2.83297682 + pt * wt
    return tl.where(central, pc, pt) * x


@triton.jit
def _noise_value(bits, DIST: tl.constexpr):
    """uint32 words -> float32 noise values of distribution ``DIST`` (distributions.py)."""
    if DIST == 2:
        value = 1.0 - 2.0 * (bits >> 31).to(tl.float32)
    elif DIST == 4:  # int_uniform: sign from bit 0, magnitude from bits 1-4
        magnitude = ((bits >> 1) & 15).to(tl.float32)
        value = tl.where((bits & 1) == 1, magnitude, -magnitude)
    else:
        top = ((bits >> 9) & 0x7FFFFF).to(tl.float32)
        centred = top * 2.384185791015625e-07 + (1.1920928955078125e-07 - 1.0)  # 2u − 1, exact
        if DIST == 1:
            value = centred * 1.7320508075688772  # √3 (2u − 1): one rounding
        else:
            value = _erfinv(centred) * 1.4142135623730951
            if DIST == 3:
                value = (value * 16.0).to(tl.int32).to(tl.float32)  # trunc(16 N), as INT_SCALE
    return value


@triton.jit
def draw_kernel(out_ptr, key_ptr, pairs_ptr, index_ptr, n, out_row_stride, index_row_stride,
                DIST: tl.constexpr, HAS_INDEX: tl.constexpr, BLOCK: tl.constexpr):
    """out[k, j] = noise of element ``index[(k,) j]`` (or ``j``) of pair ``pairs[k]``.

    ``key_ptr`` holds two int32 words: the parameter's epoch key and its hash. The grid is
    1-D over (pair, block) so neither a huge population nor a huge parameter meets the
    65 535 limit of a second grid axis.
    """
    pid = tl.program_id(0)
    blocks = (n + BLOCK - 1) // BLOCK  # not tl.cdiv: a jit helper the interpreter rejects once triton is imported
    k = pid // blocks
    offs = (pid % blocks) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    key = tl.load(key_ptr).to(tl.uint32)
    mixed_key = tl.load(key_ptr + 1).to(tl.uint32)
    pair = tl.load(pairs_ptr + k).to(tl.uint32)
    pair_key = _lowbias32(_lowbias32((pair * 0x9E3779B9) ^ key) + mixed_key)
    if HAS_INDEX:
        idx = tl.load(index_ptr + k.to(tl.int64) * index_row_stride + offs, mask=mask, other=0).to(tl.uint32)
    else:
        idx = offs.to(tl.uint32)
    bits = _lowbias32(pair_key + idx * 0x85EBCA6B)
    value = _noise_value(bits, DIST)
    tl.store(out_ptr + k.to(tl.int64) * out_row_stride + offs, value.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def values_kernel(bits_ptr, out_ptr, n, DIST: tl.constexpr, BLOCK: tl.constexpr):
    """out = noise values of given int32 words: the float map alone, for exhaustive tests."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    bits = tl.load(bits_ptr + offs, mask=mask, other=0).to(tl.uint32)
    tl.store(out_ptr + offs, _noise_value(bits, DIST), mask=mask)
