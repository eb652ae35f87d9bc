"""The compiled hot loop of the CPU noise sampler, built on first use (optional).

On a CPU the eager hash → uniform path is about 17 elementwise torch ops, each a full
pass over memory; for small models and T=1 that was most of an ES step. ``_unit.c`` does
it in one pass. It is compiled with the machine's C compiler into a per-user cache and
loaded with ctypes (which releases the GIL, so rows are split across threads).

Its values are bit-identical to the torch path (tests/noise/test_native.py), so whether
a compiler exists changes speed only, never results. ``HYPERSCALEES_NATIVE=0`` turns it
off; ``HYPERSCALEES_CACHE`` moves the cache (default ``~/.cache/hyperscalees``).
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from torch import Tensor

SOURCE = Path(__file__).with_name("_unit.c")
FLAG_SETS = (["-O3", "-march=native"], ["-O3"])  # the first that compiles wins
MIN_PARALLEL = 1 << 16  # values below which splitting across threads costs more than it saves


def cache_dir() -> Path:
    if os.environ.get("HYPERSCALEES_CACHE"):
        return Path(os.environ["HYPERSCALEES_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "hyperscalees"


def _cpu_signature() -> str:
    """What a ``-march=native`` binary depends on: a shared cache must not serve another CPU."""
    try:
        flags = next((ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("flags")), "")
    except OSError:
        flags = ""
    return platform.machine() + flags


def _build(cc: str) -> Path | None:
    src = SOURCE.read_bytes()
    tag = hashlib.sha256(src + cc.encode() + _cpu_signature().encode() + repr(FLAG_SETS).encode()).hexdigest()[:16]
    target = cache_dir() / f"unit-{tag}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / "unit.so"
        for flags in FLAG_SETS:
            done = subprocess.run([cc, *flags, "-shared", "-fPIC", "-o", str(out), str(SOURCE)],
                                  capture_output=True, timeout=120)
            if done.returncode == 0:
                os.replace(out, target)  # atomic: parallel test workers may build at once
                return target
    return None


@functools.lru_cache(maxsize=1)
def library():
    """The loaded library (``hs_centred_uniform``, ``hs_pair_keys``), or None (disabled, no
    compiler, build failed)."""
    if os.environ.get("HYPERSCALEES_NATIVE", "1") == "0":
        return None
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    try:
        path = _build(cc)
        if path is None:
            return None
        lib = ctypes.CDLL(str(path))
        fn, keys = lib.hs_centred_uniform, lib.hs_pair_keys
    except (OSError, subprocess.SubprocessError, AttributeError):
        return None
    i64, u32, ptr = ctypes.c_int64, ctypes.c_uint32, ctypes.c_void_p
    fn.argtypes = [ptr, i64, i64, ptr, i64, i64, ptr, i64]
    fn.restype = None
    keys.argtypes = [ptr, i64, u32, u32, ptr]
    keys.restype = None
    return lib


def kernel():
    """The loaded ``hs_centred_uniform`` function, or None."""
    lib = library()
    return None if lib is None else lib.hs_centred_uniform


def pair_keys(key: int, mixed_key: int, pairs: Tensor) -> Tensor:
    """keys.pair_keys(key, pairs) in one compiled call: (K,) int64 pairs -> (K,) int32 keys."""
    lib = library()
    if lib is None:
        raise RuntimeError("the native noise kernel is not available (no C compiler, or HYPERSCALEES_NATIVE=0)")
    p = pairs.to(torch.int64).contiguous()
    out = torch.empty(p.shape, dtype=torch.int32)
    lib.hs_pair_keys(p.data_ptr(), p.numel(), key & 0xFFFFFFFF, mixed_key & 0xFFFFFFFF, out.data_ptr())
    return out


def available() -> bool:
    return kernel() is not None


_pool: ThreadPoolExecutor | None = None
_pool_pid = 0
_pool_lock = threading.Lock()


def _workers(n: int) -> ThreadPoolExecutor:
    """A pool of at least ``n`` threads, made afresh in a forked child: the parent's pool
    threads do not exist there, and work queued to them would wait forever."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid() or _pool._max_workers < n:
            _pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="hs-noise")
            _pool_pid = os.getpid()
        return _pool


def centred_uniform_(pkeys: Tensor, index: Tensor, out: Tensor, per_pair: bool) -> Tensor:
    """out[k, j] = 2u − 1 of element ``index[(k,) j]`` of pair ``k``; CPU tensors.

    pkeys (K,) int32; index (n,) int32, or (K, n) with ``per_pair``, or None for 0..n−1;
    out (K, n) float32. Rows (or, for few rows, columns) are split across torch's intra-op
    thread count.
    """
    fn = kernel()
    if fn is None:
        raise RuntimeError("the native noise kernel is not available (no C compiler, or HYPERSCALEES_NATIVE=0)")
    k, n = out.shape
    whole = index is None
    if not (pkeys.dtype == torch.int32 and (whole or index.dtype == torch.int32) and out.dtype == torch.float32):
        raise TypeError("centred_uniform_ wants int32 keys and index and a float32 output")
    if pkeys.stride(0) != 1 or (not whole and index.stride(-1) != 1) or out.stride(1) != 1 \
            or pkeys.device.type != "cpu":
        raise ValueError("centred_uniform_ wants CPU tensors with unit-stride rows")
    irs = index.stride(0) if per_pair else 0
    ors = out.stride(0)
    kp, op = pkeys.data_ptr(), out.data_ptr()
    ip = 0 if whole else index.data_ptr()

    threads = max(1, torch.get_num_threads())
    if whole and k < threads and k * n >= MIN_PARALLEL:  # split by columns below: they need indices
        return centred_uniform_(pkeys, torch.arange(n, dtype=torch.int32), out, per_pair=False)

    def run(k0, k1, j0, j1):
        fn(kp, k0, k1, None if whole else ip + 4 * j0, irs, j1 - j0, op + 4 * j0, ors)

    if threads == 1 or k * n < MIN_PARALLEL:
        run(0, k, 0, n)
        return out
    if k >= threads:
        cuts = [k * t // threads for t in range(threads + 1)]
        parts = [(cuts[t], cuts[t + 1], 0, n) for t in range(threads)]
    else:
        cuts = [n * t // threads for t in range(threads + 1)]
        parts = [(0, k, cuts[t], cuts[t + 1]) for t in range(threads)]
    futures = [_workers(threads - 1).submit(run, *p) for p in parts[1:]]
    run(*parts[0])
    for f in futures:
        f.result()
    return out
