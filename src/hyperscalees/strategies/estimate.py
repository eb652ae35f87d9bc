"""The ES estimate ĝ = (1/(Nσ)) Σ_i f_i ε_i of ∇ E[fitness], from one step's noise store.

ε_i is member i's unit-variance noise (s·A Bᵀ/√r or s·ε), σ the parameter's own σ. The
1/(Nσ) and 1/√r scales are folded into the (K,) pair weights, never full-size passes.

The bits of ĝ are a function of (step, shaped fitness) alone. Pairs are regenerated in
chunks of ``update_chunk`` pairs rounded up to whole reduction blocks, and summed block by
block in a fixed order (``ops.update``); a draw held in the store is sliced into the very
same chunks. So ``update_chunk``, the noise cache and how the forwards were chunked never
change the update, and with ``fixed`` (``ESConfig.deterministic``) neither does the thread
count: its GEMMs then run as fixed single-threaded tiles (``ops.fixed_order``).

A torch optimizer wants −ĝ in ``.grad``: ``negate`` folds the sign into the pair weights, so
−ĝ costs no pass of its own and has exactly the bits of ĝ negated (IEEE rounding is symmetric
in sign). The first chunk's GEMM writes the estimate (β = 0) instead of adding onto zeros, so
no zero-fill pass either. Pair weights depend on the chunk and the parameter's coefficient
only, so they are made once per step and shared by every parameter with that coefficient.
"""
from __future__ import annotations

import contextlib

import torch
from torch import Tensor

from ..noise.store import NoiseStore
from ..ops.fixed_order import all_threads, fixed_threads
from ..ops.update import REDUCTION_PAIRS, full_sum_, lowrank_sum_, pair_weights


def coefficient(store: NoiseStore, name: str) -> float:
    """c in ĝ = c · Σ_k w_k t_k (t_k: A Bᵀ or ε in unit draws): the store's scale over N σ²."""
    return store.scale(name) / (store.pop.size * store.sigma(name) ** 2)


def chunk_pairs(update_chunk: int) -> int:
    """Pairs regenerated at once: ``update_chunk`` rounded up to whole reduction blocks."""
    return -(-max(1, update_chunk) // REDUCTION_PAIRS) * REDUCTION_PAIRS


def estimate(store: NoiseStore, shaped: Tensor, names: list[str], update_chunk: int,
             sign_update: bool = False, consume: bool = False, fixed: bool = True,
             precision: dict[str, str] | None = None, negate: bool = False) -> dict[str, Tensor]:
    """ĝ (float32, the parameter's shape) for each of ``names``; −ĝ with ``negate``.

    With ``consume`` each whole-step draw is taken out of the store as it is used, so the
    store shrinks while the estimates grow and the two never peak together. ``precision``
    maps a name to its update-GEMM precision (ops.precision; default fp32).
    """
    precision = precision or {}
    cpu = any(store.devices[n].type == "cpu" for n in names)
    weights = PairWeights(shaped, -1.0 if negate else 1.0)
    with fixed_threads() if fixed and cpu else contextlib.nullcontext():  # see ops.fixed_order
        return {n: estimate_one(store, n, shaped, update_chunk, sign_update, consume, fixed,
                                precision.get(n, "fp32"), weights) for n in names}


class PairWeights:
    """The (K,) weights c·Σ_{i in pair} f_i s_i of each chunk of pairs, made once per step.

    They depend on (chunk, device, c) only -- every parameter's draw of a chunk carries the
    same signs -- so parameters sharing a coefficient (all low-rank matrices at one σ) share
    them: a handful of small ops per step instead of per parameter. ``sign`` is −1 for −ĝ.
    """

    def __init__(self, shaped: Tensor, sign: float = 1.0):
        self.shaped, self.sign = shaped, sign
        self._made: dict[tuple, Tensor] = {}

    def get(self, k0: int, k1: int, signs: Tensor, coef: float) -> Tensor:
        dev = signs.device
        key = (k0, k1, dev, coef)
        w = self._made.get(key)
        if w is None:
            base = self._made.get((k0, k1, dev))
            if base is None:
                f = self.shaped.to(device=dev, dtype=torch.float32)
                g = signs.shape[1]  # members per draw: 2 antithetic, 1 independent
                base = self._made[(k0, k1, dev)] = pair_weights(f[g * k0:g * k1], signs)
            w = self._made[key] = base * (self.sign * coef)
        return w


def estimate_one(store: NoiseStore, name: str, shaped: Tensor, update_chunk: int, sign_update: bool = False,
                 consume: bool = False, fixed: bool = True, precision: str = "fp32",
                 weights: PairWeights | None = None) -> Tensor:
    pop, dev, lowrank = store.pop, store.devices[name], store.is_lowrank(name)
    # ĝ = Σ f_i ε_i / (Nσ) with ε_i = s·(scale/σ)·(A Bᵀ or ε): the store's scales, no √r here
    coef = coefficient(store, name)
    weights = weights or PairWeights(shaped)
    whole = store.take(name) if consume else store.peek(name)
    total = torch.empty(store.specs[name].shape, dtype=torch.float32, device=dev)  # the first chunk writes it
    step = chunk_pairs(update_chunk)
    for k0 in range(0, pop.num_pairs, step):
        k1 = min(pop.num_pairs, k0 + step)
        if whole is None:
            with all_threads():
                noise = store.draw(name, *store.members(pop.per_draw * k0, pop.per_draw * k1, dev))
        elif k0 == 0 and k1 == pop.num_pairs:
            noise = whole  # one chunk: the whole draw, no slicing
        else:
            noise = whole.slice(k0, k1)
        w = weights.get(k0, k1, noise.signs, coef)
        if lowrank:
            a, b = (noise.a.sign(), noise.b.sign()) if sign_update else (noise.a, noise.b)
            lowrank_sum_(total, a, b, w, fixed, precision, accumulate=k0 > 0)
        else:
            full_sum_(total, noise.eps, w, fixed, accumulate=k0 > 0)
        del noise
    return total
