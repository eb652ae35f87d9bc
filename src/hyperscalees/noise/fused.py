"""The GPU noise path: one fused Triton launch per parameter draw (optional).

The eager torch path hashes with about twenty elementwise kernels per parameter (pair
keys, element hash, uniform, erfinv, scale); on a GPU each is a launch of ~1.5 µs of work
behind ~12 µs of CPU dispatch, and a step became launch-bound. :func:`draw_` writes the
same draw in one launch (noise/triton_kernel.py).

Integer bits equal the torch path's. ``uniform`` and ``rademacher`` values are identical
on every device; ``gaussian`` is within :data:`GAUSSIAN_ULP_BOUND` float32 ulps of the
float64 erfinv (checked over every possible input under Triton's CPU interpreter; not yet
confirmed on a GPU: tests/noise/test_fused.py holds a CUDA run to the same bound), and so
within a few ulps of the CPU.

Triton is imported only here and only on first use; ``import hyperscalees`` needs torch
alone. ``interpret=True`` loads the kernel under Triton's CPU interpreter (CI's check).
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import sys
from pathlib import Path
from typing import Optional

import torch
from torch import Tensor

from .distributions import DISTRIBUTIONS

SOURCE = Path(__file__).with_name("triton_kernel.py")
DIST_CODES = {"gaussian": 0, "uniform": 1, "rademacher": 2, "int": 3, "int_uniform": 4}
BLOCK = 1024
GAUSSIAN_ULP_BOUND = 5  # measured max 4.3 over all 2²³ inputs under Triton's interpreter, not yet on a GPU: tests/noise/test_fused.py

assert set(DIST_CODES) == set(DISTRIBUTIONS)


@contextlib.contextmanager
def _env(name: str, value: str):
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old


@functools.lru_cache(maxsize=2)
def kernels(interpret: bool = False):
    """The kernel module compiled for the GPU, or for Triton's interpreter; None without Triton."""
    if importlib.util.find_spec("triton") is None:
        return None
    name = f"hyperscalees.noise._triton_kernel_{'interpreted' if interpret else 'compiled'}"
    spec = importlib.util.spec_from_file_location(name, SOURCE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton reads the kernel's source through its module
    with _env("TRITON_INTERPRET", "1" if interpret else "0"):
        try:
            spec.loader.exec_module(module)
        except Exception:  # a Triton too old or broken to build the kernel: the torch path serves
            del sys.modules[name]
            return None
    return module


def available(device: torch.device) -> bool:
    """Whether the compiled kernel can run on ``device`` (CUDA with Triton installed)."""
    return device.type == "cuda" and kernels(False) is not None


def _signed(v: int) -> int:
    return (v & 0xFFFFFFFF) - ((v & 0x80000000) << 1)


def key_words(key: int, mixed_key: int, device) -> Tensor:
    """The two int32 words the kernel reads: a parameter's epoch key and its hash."""
    return key_table([(key, mixed_key)], device)[0]


def key_table(keys: list[tuple[int, int]], device, out: Tensor | None = None) -> Tensor:
    """(P, 2) key words of many parameters, made and sent in one copy (into ``out`` if given).

    A blocking host-to-device copy waits for the GPU's queue; from pinned memory it need not.
    """
    host = torch.tensor([[_signed(k), _signed(m)] for k, m in keys], dtype=torch.int32)
    device = torch.device(device)
    if device.type == "cuda":
        host = host.pin_memory()
    if out is not None:
        return out.copy_(host, non_blocking=True)
    return host.to(device, non_blocking=True) if device.type == "cuda" else host.to(device)


def draw_(keys: Tensor, pairs: Tensor, index: Tensor | None, out: Tensor, distribution: str,
          interpret: bool = False) -> Tensor:
    """Fill ``out`` (K, n) with the noise of elements ``index`` of ``pairs`` (K,).

    ``index`` None means elements 0..n−1; shape (n,) is shared by all pairs, (K, n) picks
    per pair. ``out`` may be float32 or a lower precision (cast at the store). The launch
    is a torch operator (``hyperscalees::fused_draw_``), so dispatch modes and graph
    capture see it like any other op.
    """
    if kernels(interpret) is None:
        raise RuntimeError("the fused noise kernel needs Triton (pip install triton)")
    if out.stride(1) != 1 or (index is not None and index.stride(-1) != 1):
        raise ValueError("draw_ wants rows of unit stride")
    if out.shape[0] and out.shape[1]:
        fused_draw_op(out, keys, pairs, index, DIST_CODES[distribution], interpret)
    return out


@torch.library.custom_op("hyperscalees::fused_draw_", mutates_args=("out",))
def fused_draw_op(out: Tensor, keys: Tensor, pairs: Tensor, index: Optional[Tensor], dist: int,
                  interpret: bool) -> None:
    module = kernels(interpret)
    k, n = out.shape
    index_row_stride = 0 if index is None or index.dim() == 1 else index.stride(0)
    grid = (k * triton_cdiv(n, BLOCK),)
    # Triton consults TRITON_INTERPRET while launching too, not only when decorating.
    with _env("TRITON_INTERPRET", "1") if interpret else contextlib.nullcontext():
        module.draw_kernel[grid](out, keys, pairs, index if index is not None else pairs, n, out.stride(0),
                                 index_row_stride, DIST=dist, HAS_INDEX=index is not None, BLOCK=BLOCK)


def values_(bits: Tensor, out: Tensor, distribution: str, interpret: bool = False) -> Tensor:
    """out = the kernel's noise values of int32 words ``bits`` (flat, same numel): the float
    map alone, so tests can check it on every one of its 2²³ inputs."""
    module = kernels(interpret)
    if module is None:
        raise RuntimeError("the fused noise kernel needs Triton (pip install triton)")
    n = bits.numel()
    with _env("TRITON_INTERPRET", "1") if interpret else contextlib.nullcontext():
        module.values_kernel[(triton_cdiv(n, VALUES_BLOCK),)](bits, out, n, DIST=DIST_CODES[distribution],
                                                             BLOCK=VALUES_BLOCK)
    return out


VALUES_BLOCK = 1 << 16


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)
