"""``iterinfo`` -> which antithetic pairs run, and each leaf's noise store for them.

HyperscaleES vmaps a model over ``iterinfo = (epoch, thread_id)``, one thread at a time.
PyTorch has no such vmap, so here one call runs many threads at once:
``iterinfo = (epoch, thread_ids)`` with ``thread_ids`` a 1-D int tensor (or range) of P
members, and every input is member-major (leading dim = P x rows per member).

Dimensions: P members in the call, K = P/2 pairs, r rank.
``thread_ids`` must come in whole antithetic pairs: ``(2k, 2k+1), (2j, 2j+1), ...``. A
contiguous even-aligned range is the common case; repeated pairs are allowed too, which
is what EGGROLLBSNoiser's "thread id mod G" evaluation over many prompts needs.

A leaf's noise comes from the core: a :class:`NoiseStore` (budget 0, since nothing is kept
between calls) over a :class:`Population` whose ``seed`` is the leaf's integer key and whose
one parameter is named after the noiser's ``seed``. So noise(key, epoch // noise_reuse, pair,
element), its σ/√r and its antithetic signs are the core's, not a second implementation.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..noise.population import Population
from ..noise.spec import ESMode, ParamSpec
from ..noise.store import NoiseStore


@dataclass(frozen=True)
class Threads:
    epoch: int
    members: Tensor  # (P,) thread ids, in the order of the inputs' leading dim
    pairs: Tensor    # (K,) pair index k = thread // 2 of each consecutive (even, odd) couple

    @property
    def size(self) -> int:
        return self.members.numel()

    def is_range(self) -> bool:
        """True when the threads are exactly 0, 1, ..., P-1 (what an update needs)."""
        return bool(torch.equal(self.members, torch.arange(self.size, device=self.members.device)))

    def population_size(self, baseline_every: int = 0) -> int:
        """Smallest population holding every pair of the call (whole groups when there are baselines).

        The size only bounds the pair indices: a pair's noise does not depend on it.
        """
        size = 2 * (int(self.pairs.max()) + 1)
        return -(-size // baseline_every) * baseline_every if baseline_every else size

    def signs(self, pop: Population) -> Tensor:
        """(K, 2) the population's signs of this call's pairs: ±1, 0 for baseline members."""
        return pop.signs(device=self.pairs.device)[self.pairs]


def _as_epoch(epoch) -> int:
    if isinstance(epoch, Tensor):
        flat = epoch.reshape(-1)
        if flat.numel() == 0 or not bool((flat == flat[0]).all()):
            raise ValueError("all threads of one call must share one epoch")
        return int(flat[0])
    return int(epoch)


def parse_iterinfo(iterinfo, device=None) -> Threads | None:
    """Validate ``None`` or ``(epoch, thread_ids)``; raise naming what is wrong."""
    if iterinfo is None:
        return None
    if not isinstance(iterinfo, (tuple, list)) or len(iterinfo) != 2:
        raise ValueError(f"iterinfo must be None or (epoch, thread_ids), got {type(iterinfo).__name__}")
    epoch, threads = iterinfo
    if isinstance(threads, int):
        raise ValueError("thread_ids must be a 1-D sequence of member indices (whole antithetic pairs), "
                         "not a single int: this port evaluates members in one batched call")
    members = torch.as_tensor(list(threads) if isinstance(threads, range) else threads, device=device)
    if members.dim() != 1 or members.is_floating_point():
        raise ValueError(f"thread_ids must be a 1-D integer tensor, got shape {tuple(members.shape)}"
                         f" dtype {members.dtype}")
    members = members.long()
    if members.numel() == 0 or members.numel() % 2:
        raise ValueError(f"thread_ids must hold whole antithetic pairs (an even count), got {members.numel()}")
    even, odd = members[0::2], members[1::2]
    if bool((even < 0).any()) or bool((even % 2 != 0).any()) or not torch.equal(odd, even + 1):
        raise ValueError("thread_ids must come as antithetic couples (2k, 2k+1), e.g. a contiguous "
                         "even-aligned range")
    epoch = _as_epoch(epoch)
    if epoch < 0:
        raise ValueError(f"epoch must be >= 0, got {epoch}")
    return Threads(epoch=epoch, members=members, pairs=even // 2)


def leaf_population(frozen: dict, sigma: float, key, epoch: int, size: int, baseline_every: int = 0) -> Population:
    """The core Population that names one leaf's draw.

    ``size`` bounds the pair indices (a forward) or is N (an update); ``baseline_every``
    makes the core give baseline members sign 0.
    """
    return Population(step=epoch, seed=int(key), size=size, sigma=float(sigma), rank=frozen["rank"],
                      noise_reuse=frozen["noise_reuse"], distribution=frozen["distribution"],
                      baseline_every=baseline_every)


def noise_name(frozen: dict) -> str:
    """Parameter name handed to the core sampler: the noiser seed, so seeds give independent noise."""
    return f"seed{frozen['seed']}"


def leaf_store(frozen: dict, pop: Population, shape: tuple[int, ...], mode: ESMode, lowrank: bool,
               device) -> NoiseStore:
    """A store holding one leaf (of ``shape``) as parameter :func:`noise_name`; budget 0: draws are never kept."""
    name = noise_name(frozen)
    spec = ParamSpec(name, tuple(shape), mode)
    return NoiseStore(pop, {name: spec}, [name] if lowrank else [], {name: torch.device(device)}, budget_bytes=0)
