"""Turn random 32-bit words into noise values of a chosen distribution.

Every distribution has zero mean and unit variance, except the integer-valued ones, whose
scale is their point: ``int`` is trunc(16·N(0,1)) (nano-egg's table, std ≈ 15.5) and
``int_uniform`` is d-eggs' small uniform integers in [-15, 15] (sign from bit 0, magnitude
from bits 1-4: P(0) = 1/16, each other value 1/32, E[v²] = 77.5).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

DISTRIBUTIONS = ("gaussian", "uniform", "rademacher", "int", "int_uniform")
INT_SCALE = 16  # nano-egg's table: trunc(16 * N(0,1)) stored as int8
INT_UNIFORM_MAX = 15  # d-eggs' noise_from_hash: sign from bit 0, magnitude from bits 1-4
INTEGER_DISTRIBUTIONS = ("int", "int_uniform")  # integer-valued: what the int8 layers accept
# A bound on |value| of each integer distribution: ``int`` gives at most 84 on every one of its 2^23
# inputs on the CPU (tests/noise/test_int_uniform.py); 85 leaves room for the GPU's erfinv, which
# differs by one on a few inputs. ``int_uniform``: 15.
INTEGER_MAX = {"int": 85, "int_uniform": INT_UNIFORM_MAX}


def check_distribution(name: str) -> str:
    if name not in DISTRIBUTIONS:
        raise ValueError(f"unknown noise distribution {name!r}; choose one of {DISTRIBUTIONS}")
    return name


def to_unit_uniform(bits: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Top 23 bits -> uniform in (0, 1), exact in float32 and never 0 or 1.

    (top + 0.5) needs one bit more than top: with 24 bits the largest word rounded
    to exactly 1.0 in float32 and the Gaussian became +inf.
    """
    top = bits >> 9
    top &= 0x7FFFFF
    return top.to(dtype).add_(0.5).mul_(2.0**-23)


def bits_to_noise(bits: Tensor, distribution: str, dtype: torch.dtype = torch.float32) -> Tensor:
    """Map int32 words to noise values; float32 maths, cast to ``dtype`` at the end."""
    check_distribution(distribution)
    out = torch.empty(bits.shape, dtype=torch.float32, device=bits.device)
    out = bits_into_noise_(bits.clone(), out, distribution)
    if distribution in INTEGER_DISTRIBUTIONS and dtype == torch.int8:
        return out.to(torch.int8)
    return out.to(dtype)


def bits_into_noise_(bits: Tensor, out: Tensor, distribution: str) -> Tensor:
    """:func:`bits_to_noise` written into ``out`` (float32, any view), consuming ``bits``.

    The sampler's hot path: ``bits`` is a fresh buffer it may overwrite, and the only
    float pass that allocates nothing is one that writes where the values must end up.
    Gives exactly the values of the step-by-step definitions above.
    """
    if distribution in GAUSSIAN_LIKE:
        return finish_gaussian_(centred_uniform_from_bits_(bits, out), distribution)
    if distribution == "uniform":
        # √3·(2u − 1): 2u − 1 is exact, so this is one IEEE rounding -- the same value on every
        # device and in the fused GPU kernel (a two-step 2√3·u − √3 could meet a fused multiply-add)
        return centred_uniform_from_bits_(bits, out).mul_(math.sqrt(3.0))
    if distribution == "int_uniform":
        sign = (bits & 1) * 2 - 1
        bits >>= 1
        bits &= INT_UNIFORM_MAX
        return out.copy_(bits * sign)
    if distribution == "rademacher":
        bits >>= 31
        bits &= 1
        return out.copy_(bits).mul_(-2).add_(1)
    check_distribution(distribution)


GAUSSIAN_LIKE = ("gaussian", "int")  # the distributions built on 2u − 1 and erfinv


def centred_uniform_from_bits_(bits: Tensor, out: Tensor) -> Tensor:
    """out = 2u − 1 from the top 23 bits, u as in :func:`to_unit_uniform`; consumes ``bits``.

    2u − 1 = top·2⁻²² + (2⁻²³ − 1): exact in float32, as is the two-step form. The native
    kernel (noise/_unit.c) computes the same values from the hash in one pass.
    """
    bits >>= 9
    bits &= 0x7FFFFF
    out.copy_(bits)  # int -> float conversion, straight into place
    return out.mul_(2.0**-22).add_(2.0**-23 - 1.0)


def finish_gaussian_(centred: Tensor, distribution: str) -> Tensor:
    """2u − 1 in place -> √2·erfinv(2u − 1) (``gaussian``) or trunc(16·that) (``int``)."""
    torch.erfinv(centred, out=centred).mul_(math.sqrt(2.0))
    return centred.mul_(INT_SCALE).trunc_() if distribution == "int" else centred
