"""Integer arithmetic of the int8 models (EGG, the int8 transformer), exact and documented.

Everything here is a pure function of integer tensors; every rounding is named:

- **floor**: ``torch.div(a, d, rounding_mode="floor")`` and ``>>`` on negative integers round
  toward -inf (``-7 >> 1 == -4``), as nano-egg's ``//`` and arithmetic shifts do.
- **trunc**: ``rounding_mode="trunc"`` rounds toward 0, as C's ``/`` in d-eggs does.
- **round half away from zero**: :func:`div_round_half_away` (C's ``roundf``), exactly in
  integers -- ``torch.round`` would round half to even.
- **round half up**: :func:`round_shift`, ``floor(v / 2^k + 1/2)``, for perturbations (below).

Saturation is to [-127, 127]; -128 is never produced (:data:`QMAX`).

**Integer-valued floats.** The fast paths hold integers in float tensors, because CPU float
kernels are several times faster than int64 ones (an int64 division cost 5 ms per call here).
Float arithmetic on integers is exact while every value stays below 2^24 (float32) or 2^53
(float64), and ``floor(fl(a / d))`` equals the integer floor division for |a| < 2^24 (float32)
or 2^53 (float64): a non-integer a/d is at least 1/d from the next integer, more than the
rounding error |a/d|·2^-24. Each function states its bound.

**Matmuls** accumulate exactly (:func:`matmul_acc`, :func:`int_matmul`). On a CPU int8 x int8
products are summed in float32, which is exact while every partial sum stays below 2^24:
|x|, |w| <= 127 bound a sum of ``fan_in`` products by fan_in * 127^2, so float32 is used for
fan_in <= 1040 (:data:`FLOAT32_EXACT_FAN_IN`; 1040 * 127^2 = 16,774,160 < 2^24 = 16,777,216)
and float64 above. On CUDA ``torch._int_mm`` (int8 x int8 -> int32) runs where its shape
rules allow. (The CUDA path is written device-agnostically but not measured: no GPU here.)

**Perturbations** of an integer matrix follow EGGROLL: member i's accumulator is
``x Wᵀ + round_shift(s_i (x B) Aᵀ, k)`` -- the shared int8 GEMM plus a per-member low-rank
integer term (float64: exact, |terms| < 2^53), added *before* the layer's scaled division.
``k`` comes from the noise scale, which must be a power of two (:func:`shift_of`). Round half up
keeps a pair's two perturbations opposite except on exact ties; nano-egg's and d-eggs' plain
floor shift gives every pair a -1/2 bias (``100 >> 7 == 0`` but ``-100 >> 7 == -1``). And since
floor(a + y) = a + floor(y) for integer a, the member's output equals one division of the
materialized fixed-point weight ``W·2^k + s·A Bᵀ`` (``ops/_reference.py``).

Dimensions: K pairs, P = 2K members, R rows per member (member-major), r rank.
"""
from __future__ import annotations

import math
from functools import lru_cache

import torch
from torch import Tensor

QMAX = 127
FLOAT32_EXACT = 2**24  # integer-valued float32 below this are exact; so are sums and products staying below
FLOAT32_EXACT_FAN_IN = (FLOAT32_EXACT - 1) // (QMAX * QMAX)  # 1040: fan_in * 127^2 < 2^24
FIXED_POINT = 4  # activations and weights are 16x their real value


def clip8(x: Tensor) -> Tensor:
    """Saturate to [-127, 127] and store as int8 (never -128)."""
    return x.clamp(-QMAX, QMAX).to(torch.int8)


def float32_is_exact(fan_in: int) -> bool:
    """True when any sum of ``fan_in`` int8 x int8 products is exact in float32 (< 2^24)."""
    return fan_in * QMAX * QMAX < FLOAT32_EXACT


def acc_dtype(fan_in: int) -> torch.dtype:
    """The float dtype that holds ``fan_in``-long int8 dot products exactly."""
    return torch.float32 if float32_is_exact(fan_in) else torch.float64


def matmul_acc(x: Tensor, w: Tensor) -> Tensor:
    """Exact x Wᵀ as integer-valued floats (:func:`acc_dtype`), x (..., in) int8-valued (any dtype),
    ``w`` (out, in) int8 or already that float dtype. On CUDA: ``torch._int_mm`` where it applies."""
    fan_in = w.shape[1]
    dtype = acc_dtype(fan_in)
    x2 = x.reshape(-1, fan_in)
    if x2.is_cuda and _int_mm_ok(x2, w):
        out = torch._int_mm(x2.to(torch.int8), w.to(torch.int8).T.contiguous()).to(dtype)
    else:
        out = x2.to(dtype) @ w.to(dtype).T
    return out.view(*x.shape[:-1], w.shape[0])


def floor_div_float_(acc: Tensor, d: int) -> Tensor:
    """floor(acc / d) of integer-valued floats, in place: exact for |acc| < 2^24 (float32) or 2^53 (float64)."""
    return acc.div_(d).floor_()


def _int_mm_ok(x2: Tensor, w: Tensor) -> bool:
    """torch._int_mm's CUDA shape rules: m > 16, k and n multiples of 8 (k >= 16)."""
    m, k = x2.shape
    n = w.shape[0]
    return x2.is_cuda and m > 16 and k >= 16 and k % 8 == 0 and n % 8 == 0


def int_matmul(x: Tensor, w: Tensor, how: str = "auto") -> Tensor:
    """Exact x Wᵀ for int8-valued x (..., in) and W (out, in), as int64 (..., out).

    ``how``: ``auto`` (the rule of the module docstring), ``float32`` (asserts the bound),
    ``float64``, ``int_mm`` (torch._int_mm; also runs on recent CPU builds, so tests check it).
    """
    fan_in = w.shape[1]
    x2 = x.reshape(-1, fan_in)
    if how == "auto":
        if x2.is_cuda and _int_mm_ok(x2, w):
            how = "int_mm"
        else:
            how = "float32" if float32_is_exact(fan_in) else "float64"
    if how == "int_mm":
        out = torch._int_mm(x2.to(torch.int8).contiguous(), w.to(torch.int8).T.contiguous()).to(torch.int64)
    elif how == "float32":
        assert float32_is_exact(fan_in), f"fan_in {fan_in} * 127^2 >= 2^24: float32 sums would round"
        out = (x2.to(torch.float32) @ w.to(torch.float32).T).to(torch.int64)
    elif how == "float64":
        out = (x2.to(torch.float64) @ w.to(torch.float64).T).to(torch.int64)
    else:
        raise ValueError(f"unknown int_matmul path {how!r}; use auto, float32, float64 or int_mm")
    return out.view(*x.shape[:-1], w.shape[0])


def egg_divisor(fan_in: int) -> int:
    """nano-egg's matmul divisor 16·isqrt(fan_in): 256 for fan_in 256, 512 for 1024."""
    return 16 * math.isqrt(fan_in)


def floor_div(a: Tensor, d) -> Tensor:
    return torch.div(a, d, rounding_mode="floor")


def trunc_div(a: Tensor, d) -> Tensor:
    return torch.div(a, d, rounding_mode="trunc")


def div_round_half_away(n: Tensor, d: Tensor) -> Tensor:
    """n / d rounded half away from zero (C's roundf), exactly in integers; d > 0."""
    q = floor_div(2 * n.abs() + d, 2 * d)
    return torch.where(n < 0, -q, q)


def round_shift(v: Tensor, k: int) -> Tensor:
    """floor(v / 2^k + 1/2) for integer v: round half up (k <= 0: v · 2^-k, exact)."""
    if k <= 0:
        return v if k == 0 else v * (1 << -k)
    return (v + (1 << (k - 1))) >> k


SHIFT_RANGE = (-16, 40)


def shift_of(scale: float, what: str = "noise") -> int:
    """k with scale == 2^-k exactly (-16 <= k <= 40); integer layers apply noise as shifts."""
    m, e = math.frexp(scale) if scale > 0 and math.isfinite(scale) else (0.0, 0)  # scale = m · 2^e
    k = 1 - e
    if m != 0.5 or not SHIFT_RANGE[0] <= k <= SHIFT_RANGE[1]:
        raise ValueError(f"{what}: integer layers need a noise scale σ·sigma_scale/√rank that is a power of two "
                         f"2^-k with {SHIFT_RANGE[0]} <= k <= {SHIFT_RANGE[1]}, got {scale!r} "
                         "(e.g. σ = 2^-8 for the 'int' distribution)")
    return k


def round_shift_float_(z: Tensor, k: int) -> Tensor:
    """:func:`round_shift` of integer-valued floats, in place: floor((z + 2^(k-1))·2^-k), exact while
    |z| + 2^(k-1) (k > 0) or |z|·2^-k (k < 0) stays below 2^53 (float64) or 2^24 (float32)."""
    if k <= 0:
        return z if k == 0 else z.mul_(float(1 << -k))
    return z.add_(float(1 << (k - 1))).mul_(2.0**-k).floor_()


def lowrank_term(x: Tensor, a: Tensor, b: Tensor, signs: Tensor, k: int, b_max: float = float("inf"),
                 acc_max: float | None = None) -> Tensor:
    """round_shift(s_i (x B_i) A_iᵀ, k) per member: x (P·R.., in) -> integer-valued floats (P·R.., out).

    a (K, out, r), b (K, in, r) integer-valued, signs (K, g) (g = 2 antithetic, 1 independent). x B is summed in float32 when
    in·127·``b_max`` < 2^24 (``b_max`` bounds |B|), else float64. The rest is float64, exact (the
    products stay far below 2^52 for any int8-scale noise) -- or float32 on a CPU when the caller
    says how large the accumulator it adds the term to can be (``acc_max``) and this step's factors
    bound every |z| + 2^(k-1) + acc_max below 2^24: then every value, the caller's sum included, is
    an integer below 2^24 and float32 holds it exactly (half the memory traffic of the population
    forward's largest tensors). The bound reads max|x B| and max|A| on the host, free on a CPU; a
    GPU keeps float64 rather than wait for the read.
    """
    kp, fan_in = a.shape[0], x.shape[-1]
    g = signs.shape[1]
    dtype = torch.float32 if fan_in * QMAX * b_max < FLOAT32_EXACT else torch.float64
    xk = x.reshape(kp, g, -1, fan_in).to(dtype)                              # (K, g, R, in)
    u = xk @ b.to(dtype).unsqueeze(1)                                        # (K, 2, R, r)
    zdtype = torch.float64
    if acc_max is not None and u.device.type == "cpu" and u.numel() and a.numel():
        z_max = float(u.abs().amax()) * float(a.abs().amax()) * a.shape[-1]  # |Σ_r u_r a_r| <= r·max|u|·max|a|
        widest = z_max * 2.0 ** max(-k, 0) + (2.0 ** (k - 1) if k > 0 else 0.0)   # inside round_shift_float_
        if widest + acc_max < FLOAT32_EXACT:
            zdtype = torch.float32
    u = u.to(zdtype).mul_(signs.to(zdtype).view(kp, g, 1, 1))
    a = a.to(zdtype) * 2.0**-k          # the shift folded into the small factor: exact (a power of two)
    if a.shape[-1] == 1:                                                     # rank 1: an outer product
        z = u * a.view(kp, 1, 1, -1)
    else:
        z = u @ a.transpose(1, 2).unsqueeze(1)                               # (K, 2, R, out)
    if k > 0:                           # floor(z·2^-k + 1/2): z·2^-k + 1/2 is a multiple of 2^-k, exact
        z.add_(0.5).floor_()
    return z.view(*x.shape[:-1], a.shape[1])


def acc_bound(fan_in: int) -> float:
    """The largest |x Wᵀ| of int8-range x and W: what a perturbation term is added to."""
    return float(fan_in * QMAX * QMAX)


def member_vector(v: Tensor, eps: Tensor, signs: Tensor, k: int) -> Tensor:
    """(K, g, 1, n) per-member int8-range vectors clip(v + round_shift(s·ε, k)); eps (K, n), signs (K, g)."""
    kp, g = signs.shape
    pert = eps.to(torch.int64).view(kp, 1, 1, -1) * signs.to(torch.int64).view(kp, g, 1, 1)
    return (v.to(torch.int64) + round_shift(pert, k)).clamp(-QMAX, QMAX)


def mean_abs_norm(x: Tensor, w: Tensor, b: Tensor | None = None, rounding: str = "floor") -> Tensor:
    """The integer "layernorm": no centring, divide by the mean |x| (guarded against 0).

    m = max(floor(Σ|x| / D), 1); out = div(x·w, m) (+ b), div flooring (nano-egg's EGG_LN) or
    truncating (d-eggs); the caller clips. nano-egg's table row for m = 0 holds XLA's
    divide-by-zero garbage; here m = 0 (an input whose mean |x| is below 1, e.g. all zeros)
    divides by 1. ``w``/``b`` broadcast: (D,) or per member (K, 2, 1, D) against x viewed as
    (K, 2, R, D). In float32, exact: Σ|x| <= 127·D < 2^24 (D < 132,000) and |x·w| <= 127².
    """
    if x.shape[-1] * QMAX >= FLOAT32_EXACT:
        raise ValueError(f"mean_abs_norm: width {x.shape[-1]} would make float32 sums inexact")
    xf = x.to(torch.float32)
    m = torch.floor(xf.abs().sum(dim=-1, keepdim=True) / x.shape[-1]).clamp_min(1)
    q = (xf * w) / m
    out = torch.floor(q) if rounding == "floor" else torch.trunc(q)
    return out if b is None else out + b


def maxabs_requantize(v: Tensor) -> Tensor:
    """d-eggs' per-vector requantisation: round_half_away(v·127 / max|v|) over the last dim.

    d-eggs computes this in float32 (with max + 1e-9); here it is exact integer arithmetic,
    so it can differ from d-eggs where float32 rounding flips a half. An all-zero vector stays 0.
    Computed as floor((2·127·|v| + M) / 2M) in float64: exact for |v| < 2^44.
    """
    a = v.to(torch.float64).abs()
    m = a.amax(dim=-1, keepdim=True).clamp_min(1)                  # all zeros: 0 / 1 -> 0
    q = a.mul_(2 * QMAX).add_(m).div_(2 * m).floor_()
    return clip8(q.copysign_(v.to(torch.float64)))


# -- lookup tables (built once from Python floats: identical on every device) -------------------
EXP_SCALE_BITS = 18   # EXP_LUT entries are exp(-i/6) · 2^18
EXP_STEPS_PER_NAT = 6  # one logit unit of the int8 transformer is 1/6 nat
ROPE_BITS = 20


@lru_cache(maxsize=None)
def _exp_lut_values() -> tuple[int, ...]:
    vals = [int(math.floor(math.exp(-i / EXP_STEPS_PER_NAT) * 2**EXP_SCALE_BITS + 0.5)) for i in range(256)]
    return tuple(v if v >= 1 else 0 for v in vals)


@lru_cache(maxsize=256)
def _on_device(values: tuple, dtype: torch.dtype, device: torch.device) -> Tensor:
    # one copy up per table, dtype and device, not one per forward (a host->device copy on a GPU)
    return torch.tensor(values, dtype=dtype, device=device)


def _table(values: tuple, dtype: torch.dtype, device) -> Tensor:
    """The cached device copy of a table; shared by every caller, so never written to."""
    device = torch.device("cpu" if device is None else device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return _on_device(values, dtype, device)


def exp_lut(device=None, dtype: torch.dtype = torch.int64) -> Tensor:
    """(256,) round(exp(-i/6)·2^18), 0 where below 1 (d-eggs' softmax table); cached per device, read-only."""
    return _table(_exp_lut_values(), dtype, device)


@lru_cache(maxsize=None)
def _gelu_lut_values() -> tuple[int, ...]:
    out = []
    for q in range(-QMAX, QMAX + 1):
        x = q / 16.0
        g = 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0))) * 16.0
        out.append(int(math.copysign(math.floor(abs(g) + 0.5), g)))  # round half away from zero
    return tuple(out)


def gelu_lut(device=None) -> Tensor:
    """(255,) int64: entry q + 127 is round_half_away(16·gelu(q/16)), q in [-127, 127]; cached per device, read-only."""
    return _table(_gelu_lut_values(), torch.int64, device)


def gelu_int8(x: Tensor) -> Tensor:
    """GELU of int8-range values (4 fractional bits) by table lookup."""
    return gelu_lut(x.device)[x.to(torch.int64) + QMAX]


@lru_cache(maxsize=None)
def _rope_values(positions: int, head_dim: int, base: float) -> tuple[tuple[int, ...], tuple[int, ...]]:
    cos, sin = [], []
    for t in range(positions):
        for i in range(head_dim // 2):
            theta = t * base ** (-2.0 * i / head_dim)
            cos.append(int(math.floor(math.cos(theta) * 2**ROPE_BITS + 0.5)))
            sin.append(int(math.floor(math.sin(theta) * 2**ROPE_BITS + 0.5)))
    return tuple(cos), tuple(sin)


def rope_tables(positions: int, head_dim: int, base: float = 10000.0, device=None) -> tuple[Tensor, Tensor]:
    """(positions, head_dim/2) int64 cos and sin of t·base^(-2i/head_dim), in 2^-20 units; cached per device, read-only."""
    if head_dim % 2:
        raise ValueError(f"RoPE needs an even head_dim, got {head_dim}")
    cos, sin = _rope_values(positions, head_dim, float(base))
    shape = (positions, head_dim // 2)
    return _table(cos, torch.int64, device).view(shape), _table(sin, torch.int64, device).view(shape)


def rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate pairs (2i, 2i+1) of x (..., T, head_dim) in fixed point, rounding half up (+2^19 >> 20).

    cos/sin (T, head_dim/2) in 2^-20 units. d-eggs uses int64; here integer-valued float64,
    exact while |x| < 2^31 (products below 2^52), and returns float64 integers.
    """
    xf = x.to(torch.float64)
    c, s_ = cos.to(torch.float64), sin.to(torch.float64)
    even, odd = xf[..., 0::2], xf[..., 1::2]
    half, scale = float(1 << (ROPE_BITS - 1)), 2.0**-ROPE_BITS
    re = (even * c - odd * s_ + half).mul_(scale).floor_()
    ro = (even * s_ + odd * c + half).mul_(scale).floor_()
    return torch.stack([re, ro], dim=-1).flatten(-2)


__all__ = ["EXP_SCALE_BITS", "EXP_STEPS_PER_NAT", "FIXED_POINT", "FLOAT32_EXACT", "FLOAT32_EXACT_FAN_IN", "QMAX", "acc_dtype", "clip8",
           "div_round_half_away", "egg_divisor", "exp_lut", "float32_is_exact", "floor_div", "floor_div_float_",
           "acc_bound", "gelu_int8", "gelu_lut", "int_matmul", "lowrank_term", "matmul_acc", "maxabs_requantize", "mean_abs_norm",
           "member_vector", "rope", "rope_tables", "round_shift", "round_shift_float_", "shift_of", "trunc_div"]
