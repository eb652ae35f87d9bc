"""Noise of one parameter for a range of antithetic pairs, generated in bulk on the device.

Shapes: K pairs, r rank. A matrix parameter stored (rows, cols) gets, per pair, one
draw Z of (cols + rows) * r values: the first cols*r are B (cols, r), the rest A (rows, r),
so its perturbation in its own orientation is A Bᵀ. Any other parameter gets a draw of
its own numel. Element j of pair k is ``element_bits(pair_keys(key, k), j)`` -- so a
subset of elements (embedding rows) can be drawn without drawing the rest.
"""
from __future__ import annotations

import contextlib
import os
from contextvars import ContextVar

import torch
from torch import Tensor

from . import fused, native
from .distributions import GAUSSIAN_LIKE, INTEGER_DISTRIBUTIONS, bits_into_noise_, finish_gaussian_
from .keys import element_bits, epoch_key, mix_int, name_key, pair_keys
from .population import Population


def param_epoch_key(pop: Population, name: str) -> int:
    return epoch_key(name_key(pop.seed, name), pop.step, pop.noise_reuse)


SAMPLERS = ("auto", "torch", "interpret")
FUSED_SAMPLERS = ("fused", "interpret")  # what sampler() answers when the Triton kernel draws
_STATIC_KEYS: ContextVar[dict[str, Tensor] | None] = ContextVar("hyperscalees_static_keys", default=None)


def active_static_keys() -> dict[str, Tensor] | None:
    return _STATIC_KEYS.get()


@contextlib.contextmanager
def static_keys(buffers: dict[str, Tensor]):
    """Inside the block, fused draws of a parameter read its key words from ``buffers[name]``.

    A captured CUDA graph replays its launches with the pointers they had: a key made
    fresh per draw would freeze the captured step's noise. With a fixed buffer per
    parameter (:func:`fused.key_words` layout), rewritten in place before each replay, the
    replayed draw follows the step. The caller keeps the buffers equal to the step's keys.
    """
    token = _STATIC_KEYS.set(buffers)
    try:
        yield
    finally:
        _STATIC_KEYS.reset(token)




def sampler(device: torch.device) -> str:
    """Which implementation draws on ``device``: the one place this is decided.

    ``fused`` (one Triton launch; CUDA with Triton), ``native`` (the compiled C loop; CPU
    with a compiler) or ``torch`` (eager ops, everywhere). ``HYPERSCALEES_NOISE_KERNEL``
    overrides: ``torch`` forces the eager ops, ``interpret`` runs the fused kernel under
    Triton's CPU interpreter (slow; how CI checks the GPU kernel without a GPU).
    """
    choice = os.environ.get("HYPERSCALEES_NOISE_KERNEL", "auto")
    if choice not in SAMPLERS:
        raise ValueError(f"HYPERSCALEES_NOISE_KERNEL must be one of {SAMPLERS}, got {choice!r}")
    if choice == "interpret":
        return "interpret"
    if choice == "auto" and fused.available(device):
        return "fused"
    if choice == "auto" and device.type == "cpu" and native.available():
        return "native"
    return "torch"


def draw(pop: Population, name: str, pairs: Tensor, index: Tensor | int, dtype=torch.float32,
         per_pair: bool = False) -> Tensor:
    """Noise at element ``index`` for every pair: pairs (K,), index (...) -> (K, ...).

    With ``per_pair`` the index is (K, ...) and picks different elements for each pair.
    An int ``n`` stands for elements 0..n−1 (the fused kernel then reads no index at all).
    """
    device = pairs.device if isinstance(index, int) else index.device
    how = sampler(device)
    key = param_epoch_key(pop, name)
    if how in FUSED_SAMPLERS:
        buffers = _STATIC_KEYS.get()
        words = buffers[name] if buffers and name in buffers else fused.key_words(key, mix_int(key), device)
        return _draw_fused(pop, words, pairs.to(device), index, dtype, per_pair, interpret=how == "interpret")
    if how == "native" and pop.distribution in GAUSSIAN_LIKE:
        return _draw_native(key, pairs, index, dtype, per_pair, pop.distribution)
    if isinstance(index, int):
        index = torch.arange(index, device=device, dtype=torch.int32)
    pk = pair_keys(key, pairs.to(device))
    k = pk.shape[0]
    shape = (k, *index.shape[1:]) if per_pair else (k, *index.shape)
    per = max(1, index[0].numel() if per_pair else index.numel())
    out = torch.empty(shape, dtype=torch.float32, device=device)
    flat = out.view(k, per)
    idx = (index.reshape(k, per) if per_pair else index.reshape(per)).to(torch.int32)
    # Large draws go block by block into the output: the hash's temporaries stay in
    # cache and are reused, instead of a dozen fresh (K, n) tensors (page faults).
    rows = max(1, BLOCK // per)
    cols = min(per, BLOCK)
    for r0 in range(0, k, rows):
        r1 = min(k, r0 + rows)
        for c0 in range(0, per, cols):
            c1 = min(per, c0 + cols)
            sub = idx[r0:r1, c0:c1] if per_pair else idx[c0:c1]
            bits_into_noise_(element_bits(pk[r0:r1].view(-1, 1), sub), flat[r0:r1, c0:c1], pop.distribution)
    return _cast(out, pop.distribution, dtype)


def batches(pop: Population, device) -> bool:
    """Whether :func:`draw_many` can draw several parameters in one pass on ``device``: the
    compiled CPU loop (a fused GPU draw is already one launch per parameter)."""
    return sampler(torch.device(device)) == "native" and pop.distribution in GAUSSIAN_LIKE


def draw_many(pop: Population, names: list[str], pairs: Tensor, n: int) -> Tensor:
    """Elements 0..n−1 of every pair's draw of each of ``names``: (len(names), K, n).

    Row (j, k) is exactly ``draw(pop, names[j], pairs, n)[k]`` -- an element depends only on
    its pair key and index -- drawn as one hash pass and one erfinv over all of them: a
    small model's step draws dozens of small matrices, and per-parameter calls cost more
    than their values (a 4M Llama, 28 matrices: measured ~225 µs each, mostly dispatch).
    Needs :func:`batches`.
    """
    if not batches(pop, pairs.device):
        raise RuntimeError("draw_many needs the compiled CPU sampler and a Gaussian-like distribution")
    keys = [param_epoch_key(pop, name) for name in names]
    pk = torch.cat([native.pair_keys(key, mix_int(key), pairs) for key in keys])
    out = torch.empty(pk.shape[0], n, dtype=torch.float32)  # (len(names)·K, n)
    finish_gaussian_(native.centred_uniform_(pk, None, out, False), pop.distribution)
    return out.view(len(names), -1, n)


def _flat_index(k: int, index: Tensor | int, per_pair: bool) -> tuple[tuple[int, ...], Tensor | None]:
    """(output shape, contiguous int32 index as (n,) or (K, n)) of a draw; None for elements 0..n−1."""
    if isinstance(index, int):
        return (k, index), None
    shape = (k, *index.shape[1:]) if per_pair else (k, *index.shape)
    per = max(1, index[0].numel() if per_pair else index.numel())
    return shape, (index.reshape(k, per) if per_pair else index.reshape(per)).to(torch.int32).contiguous()


def _draw_native(key: int, pairs: Tensor, index: Tensor | int, dtype, per_pair: bool, distribution: str) -> Tensor:
    """:func:`draw` on a CPU with the compiled loop: pair keys and hash -> 2u − 1 in two calls
    (bit-identical to the torch ops), then erfinv."""
    pk = native.pair_keys(key, mix_int(key), pairs)
    k = pk.shape[0]
    shape, idx = _flat_index(k, index, per_pair)
    out = torch.empty(shape, dtype=torch.float32)
    finish_gaussian_(native.centred_uniform_(pk, idx, out.view(k, -1), per_pair), distribution)
    return _cast(out, distribution, dtype)


def _draw_fused(pop: Population, words: Tensor, pairs: Tensor, index: Tensor | int, dtype, per_pair: bool,
                interpret: bool) -> Tensor:
    """:func:`draw` as one Triton launch, written straight in ``dtype`` (no cast pass)."""
    k = pairs.shape[0]
    device = pairs.device
    shape, idx = _flat_index(k, index, per_pair)
    int8_ok = pop.distribution in INTEGER_DISTRIBUTIONS and dtype == torch.int8
    out_dtype = dtype if dtype.is_floating_point or int8_ok else torch.float32
    out = torch.empty(shape, dtype=out_dtype, device=device)
    fused.draw_(words, pairs, idx, out.view(k, -1), pop.distribution, interpret=interpret)
    return out if out_dtype == dtype else out.to(dtype)


def _cast(out: Tensor, distribution: str, dtype: torch.dtype) -> Tensor:
    if distribution in INTEGER_DISTRIBUTIONS and dtype == torch.int8:
        return out.to(torch.int8)
    return out if dtype == torch.float32 else out.to(dtype)


BLOCK = 1 << 19  # elements hashed at once by draw(): 2 MiB buffers, reused; measured 2.2 vs 2.7 ns/value at 1 << 17


def full_noise(pop: Population, name: str, shape, pairs: Tensor, dtype=torch.float32) -> Tensor:
    """(K, *shape) unit noise for a parameter perturbed at full rank."""
    numel = 1
    for d in shape:
        numel *= d
    return draw(pop, name, pairs, numel, dtype).view(pairs.numel(), *shape)


def lowrank_factors(pop: Population, name: str, rows: int, cols: int, pairs: Tensor, dtype=torch.float32):
    """A (K, rows, r) and B (K, cols, r) unit factors of a (rows, cols) matrix's draw."""
    r = pop.rank
    z = full_noise(pop, name, ((cols + rows) * r,), pairs, dtype)  # (K, (cols+rows)*r)
    b = z[:, : cols * r].view(-1, cols, r)
    a = z[:, cols * r :].view(-1, rows, r)
    return a, b


def lowrank_rows(pop: Population, name: str, cols: int, pairs: Tensor, rows: Tensor, dtype=torch.float32) -> Tensor:
    """Only the A rows selected by ``rows`` (K, T) -> (K, T, r); for embedding lookups."""
    r = pop.rank
    idx = cols * r + rows.to(torch.int32).unsqueeze(-1) * r + torch.arange(r, device=rows.device, dtype=torch.int32)
    return draw(pop, name, pairs, idx, dtype, per_pair=True)  # (K, T, r)


def lowrank_b(pop: Population, name: str, cols: int, pairs: Tensor, dtype=torch.float32) -> Tensor:
    """Only B (K, cols, r) of a draw: the embedding forward needs B and a few rows of A."""
    r = pop.rank
    return draw(pop, name, pairs, cols * r, dtype).view(-1, cols, r)


def full_rows(pop: Population, name: str, cols: int, pairs: Tensor, rows: Tensor, dtype=torch.float32) -> Tensor:
    """Rows (K, T) of a dense (rows, cols) draw -> (K, T, cols); OpenES embedding lookups."""
    idx = rows.to(torch.int32).unsqueeze(-1) * cols + torch.arange(cols, device=rows.device, dtype=torch.int32)
    return draw(pop, name, pairs, idx, dtype, per_pair=True)
