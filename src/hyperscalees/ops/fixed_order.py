"""Matrix products whose bits do not depend on the thread count.

BLAS picks its kernels and blocking by the number of threads: the same CPU GEMM gives
different last bits with 1 and 2 threads (measured here even with an inner dimension of
8). A replica replaying the ES update, or a run resumed with another thread count, must
apply the very same bits, so the update's products go through :func:`addmm_blocks_`:

- the output is cut into tiles whose shapes depend only on the output's shape;
- each tile is one single-threaded GEMM per block of the inner dimension, accumulated in
  the blocks' order;
- tiles are spread over a pool of as many Python threads as torch would use (GEMMs
  release the GIL), so the work still runs in parallel.

That pool only gets cores of its own inside :func:`fixed_threads`, which holds torch's
OpenMP at one thread: after any multi-threaded op, torch's idle OpenMP workers keep
spinning on the other cores for a while (measured: tiles on two Python threads right
after a parallel op ran no faster than on one). The update runs inside it; what needs
every thread meanwhile (drawing noise) steps out with :func:`all_threads`.

On CUDA a GEMM of given shapes is computed the same way every time on a given GPU, so
blocks are plain ``addmm_`` calls there, at full speed.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import torch
from torch import Tensor

TILE = 128                 # output rows (or columns, for a single row) per single-threaded GEMM
MIN_PARALLEL = 1 << 16     # output elements below which one thread does every tile

_state = threading.local()  # .threads: the caller's torch thread count while fixed_threads is active
_pool: ThreadPoolExecutor | None = None
_pool_key: tuple[int, int] | None = None
_pool_lock = threading.Lock()


def _workers(n: int) -> ThreadPoolExecutor:
    """A pool of ``n`` threads, made afresh in a forked child (the parent's threads are gone there)."""
    global _pool, _pool_key
    with _pool_lock:
        if _pool is None or _pool_key != (os.getpid(), n):
            _pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="hs-update")
            _pool_key = (os.getpid(), n)
        return _pool


@contextmanager
def torch_threads(n: int):
    """torch at ``n`` threads inside, the caller's count again after."""
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


@contextmanager
def fixed_threads():
    """torch's OpenMP held at one thread inside; :func:`addmm_blocks_` uses the caller's count."""
    outer = getattr(_state, "threads", None)
    saved = torch.get_num_threads()
    _state.threads = outer or saved
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(saved)
        _state.threads = outer


@contextmanager
def all_threads():
    """Step out of :func:`fixed_threads` for a moment (a noise draw wants every thread)."""
    n = getattr(_state, "threads", None)
    if n is None:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(1)


def tiles(rows: int, cols: int) -> list[tuple[slice, slice]]:
    """The fixed tiling of a (rows, cols) output: row tiles, or column tiles for one row."""
    if rows == 1:
        return [(slice(0, 1), slice(c, min(cols, c + TILE * 64))) for c in range(0, cols, TILE * 64)]
    return [(slice(r, min(rows, r + TILE)), slice(0, cols)) for r in range(0, rows, TILE)]


def addmm_blocks_(out: Tensor, lefts: list[Tensor], rights: list[Tensor], accumulate: bool = True) -> Tensor:
    """out (rows, cols) += Σ_b lefts[b] @ rights[b], blocks in order; bits independent of threads.

    lefts[b] (rows, n_b), rights[b] (n_b, cols): any strides. Without ``accumulate`` the
    first block overwrites ``out`` (GEMM with β = 0: its contents, even NaN, are never read),
    so a fresh ``torch.empty`` needs no zero-fill pass. β = 0 gives the bits of accumulating
    onto zeros, except that an exact zero may keep its sign (tests/ops/test_update_fast_paths.py).
    """
    if out.device.type != "cpu":
        for i, (left, right) in enumerate(zip(lefts, rights)):
            out.addmm_(left, right, beta=1 if accumulate or i else 0)
        return out
    parts = tiles(*out.shape)
    whole_rows = parts[0][1] == slice(0, out.shape[1])  # row tiles span every column: no column slicing

    def run(assigned):
        if torch.get_num_threads() != 1:
            torch.set_num_threads(1)  # a pool thread's BLAS: one thread, one kernel choice
        for rs, cs in assigned:
            if whole_rows:
                tile, rights_cs = out[rs], rights
            else:
                tile, rights_cs = out[rs, cs], [right[:, cs] for right in rights]
            for i, (left, right) in enumerate(zip(lefts, rights_cs)):
                tile.addmm_(left[rs], right, beta=1 if accumulate or i else 0)

    with fixed_threads():
        threads = _state.threads
        if threads == 1 or out.numel() < MIN_PARALLEL or len(parts) == 1:
            run(parts)
        else:
            groups = [parts[t::threads] for t in range(threads)]
            futures = [_workers(threads - 1).submit(run, g) for g in groups[1:] if g]
            run(groups[0])
            for f in futures:
                f.result()
    return out
