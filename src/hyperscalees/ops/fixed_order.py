"""Matrix products whose bits do not depend on the thread count.

BLAS picks its kernels and blocking by the number of threads: the same CPU GEMM gives
different last bits with 1 and 2 threads (measured here even with an inner dimension of
8). A replica replaying the ES update, or a run resumed on another machine, must apply
the very same bits, so the update's products go through :func:`addmm_blocks_`:

- the output is cut into tiles whose shapes depend only on the output's shape;
- each tile is one single-threaded GEMM per block of the inner dimension, accumulated in
  the blocks' order;
- tiles are spread over a pool of as many Python threads as torch would use (GEMMs
  release the GIL), so the work still runs in parallel.

On CUDA a GEMM of given shapes is computed the same way every time on a given GPU, so
blocks are plain ``addmm_`` calls there.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import Tensor

TILE = 128                 # output rows (or columns, for a single row) per single-threaded GEMM
MIN_PARALLEL = 1 << 16     # output elements below which one thread does every tile

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


def tiles(rows: int, cols: int) -> list[tuple[slice, slice]]:
    """The fixed tiling of a (rows, cols) output: row tiles, or column tiles for one row."""
    if rows == 1:
        return [(slice(0, 1), slice(c, min(cols, c + TILE * 64))) for c in range(0, cols, TILE * 64)]
    return [(slice(r, min(rows, r + TILE)), slice(0, cols)) for r in range(0, rows, TILE)]


def addmm_blocks_(out: Tensor, lefts: list[Tensor], rights: list[Tensor]) -> Tensor:
    """out (rows, cols) += Σ_b lefts[b] @ rights[b], blocks in order; bits independent of threads.

    lefts[b] (rows, n_b), rights[b] (n_b, cols): any strides.
    """
    if out.device.type != "cpu":
        for left, right in zip(lefts, rights):
            out.addmm_(left, right)
        return out
    parts = tiles(*out.shape)

    def run(assigned):
        torch.set_num_threads(1)  # this thread's BLAS: one thread, one kernel choice
        for rs, cs in assigned:
            tile = out[rs, cs]
            for left, right in zip(lefts, rights):
                tile.addmm_(left[rs], right[:, cs])

    threads = torch.get_num_threads()
    try:
        if threads == 1 or out.numel() < MIN_PARALLEL or len(parts) == 1:
            run(parts)
        else:
            groups = [parts[t::threads] for t in range(threads)]
            futures = [_workers(threads - 1).submit(run, g) for g in groups[1:] if g]
            run(groups[0])
            for f in futures:
                f.result()
    finally:
        torch.set_num_threads(threads)
    return out
