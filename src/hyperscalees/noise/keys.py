"""Counter-based hashing: every random number is a pure function of integers.

Noise in hyperscalees is never stored. A value is identified by
(run seed, parameter name, epoch, antithetic pair, element index) and recomputed
on demand, on any device, for any subset of members. That is what makes chunked
evaluation, many workers and exact resume agree bit for bit.

The mixer is Chris Wellons' ``lowbias32`` integer hash. Tensors use int32 with
two's-complement wrap-around (what torch does on CPU and CUDA); the pure-Python
twins below use explicit masking and are the reference the tests compare to.
"""
from __future__ import annotations

import functools
import zlib

import torch
from torch import Tensor

MASK32 = 0xFFFFFFFF
_M1 = 0x7FEB352D
_M2 = 0x846CA68B
GOLDEN = 0x9E3779B9  # odd constant that spreads consecutive counters


def _signed32(value: int) -> int:
    value &= MASK32
    return value - (1 << 32) if value >= (1 << 31) else value


def mix_int(x: int) -> int:
    """lowbias32 on a Python int (unsigned 32-bit semantics)."""
    x &= MASK32
    x ^= x >> 16
    x = (x * _M1) & MASK32
    x ^= x >> 15
    x = (x * _M2) & MASK32
    x ^= x >> 16
    return x


@functools.lru_cache(maxsize=None)
def _int32_constants(device: torch.device) -> dict[str, Tensor]:
    """0-dim int32 tensors of the hash's constants, one set per device.

    A Python int operand is wrapped into a fresh tensor and cast on every op; with a
    few hundred hash ops per step those casts cost more than the small ops themselves.
    """
    values = {"s15": 15, "s16": 16, "m16": 0xFFFF, "m17": 0x1FFFF, "m1": _signed32(_M1), "m2": _signed32(_M2),
              "golden": _signed32(GOLDEN), "stride": _signed32(0x85EBCA6B)}
    return {k: torch.tensor(v, dtype=torch.int32, device=device) for k, v in values.items()}


def mix(x: Tensor) -> Tensor:
    """lowbias32 on an int32 tensor; bit-identical to :func:`mix_int`. ``x`` is kept."""
    if x.dtype != torch.int32:
        raise TypeError(f"mix expects an int32 tensor, got {x.dtype}")
    return mix_(x.clone())


def mix_(x: Tensor) -> Tensor:
    """In-place :func:`mix` on a fresh int32 buffer: one temporary instead of two.

    ``>>`` on int32 is arithmetic, so each shift is masked to make it logical. Every op
    is in place: an out-of-place op on a large tensor costs a fresh allocation (page
    faults), which once dominated the hash.
    """
    c = _int32_constants(x.device)
    tmp = torch.bitwise_right_shift(x, c["s16"])
    tmp &= c["m16"]
    x ^= tmp
    x *= c["m1"]
    torch.bitwise_right_shift(x, c["s15"], out=tmp)
    tmp &= c["m17"]
    x ^= tmp
    x *= c["m2"]
    torch.bitwise_right_shift(x, c["s16"], out=tmp)
    tmp &= c["m16"]
    x ^= tmp
    return x


def fold_in(key: int, *values: int) -> int:
    """Derive a new 32-bit key from ``key`` and integers, like ``jax.random.fold_in``."""
    for v in values:
        key = mix_int(mix_int(key ^ mix_int(v & MASK32)) + (v >> 32) * GOLDEN)
    return key


def name_key(seed: int, name: str) -> int:
    """Key of one parameter in one run: independent across names, stable across processes.

    ``hash(str)`` is salted per process, so a CRC of the name is used instead.
    """
    if not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    return fold_in(mix_int(seed & MASK32) ^ (seed >> 32), zlib.crc32(name.encode()))


def epoch_key(param_key: int, step: int, noise_reuse: int) -> int:
    """Key of a parameter's draw at ``step``; ``noise_reuse`` steps share one draw (0: forever)."""
    epoch = 0 if noise_reuse == 0 else step // noise_reuse
    return fold_in(param_key, epoch)


def pair_keys(key: int, pairs: Tensor) -> Tensor:
    """One well-mixed int32 key per antithetic pair index, shape of ``pairs``."""
    p = pairs.to(torch.int32)
    return mix(mix(p * _int32_constants(p.device)["golden"] ^ _signed32(key)) + _signed32(mix_int(key)))


def element_bits(pkeys: Tensor, index: Tensor) -> Tensor:
    """Random 32-bit words for (pair, element): ``pkeys`` (K, 1...) broadcast with ``index``."""
    return mix_(torch.add(pkeys, index.to(torch.int32) * _int32_constants(index.device)["stride"]))


def element_bits_int(pkey: int, index: int) -> int:
    """Python twin of :func:`element_bits` for one element (test reference)."""
    return mix_int((pkey & MASK32) + index * 0x85EBCA6B)


def pair_key_int(key: int, pair: int) -> int:
    """Python twin of :func:`pair_keys` for one pair (test reference)."""
    return mix_int(mix_int((pair * GOLDEN) ^ key) + mix_int(key))
