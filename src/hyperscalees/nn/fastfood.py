"""A seeded Fastfood projection P: ℝᵏ -> ℝᵈ, regenerated from its key and never stored dense.

Dimensions: m vectors, k subspace size, D = the power of two ≥ k, nb = ⌈d / D⌉ blocks, d the
parameter's size.

The intrinsic-dimension papers (Li et al., arXiv:1804.08838; Aghajanyan et al.,
arXiv:2012.13255) evolve θ = θ₀ + P z with a random P; a dense d×k P does not fit for a
large model, so P is the Fastfood transform ``S·H G Π H B`` (Le et al., 2013): B random
signs, H the orthonormal Walsh–Hadamard transform, Π a permutation, G Gaussian rescaled to
‖G‖² = D. Here P stacks nb independent D×D blocks, each fed the whole (zero-padded) z, so a
product costs O(d log D) and P's factors are O(d) numbers drawn when needed.

Scale: P's entries have variance 1/k, so a k-vector of unit noise moves each weight by about
one unit: σ on z means what σ means on the full model.

The factors come from a CPU ``torch.Generator`` seeded with the parameter's key, so P is the
same on every device and in every process (Ray workers rebuild it, nobody ships it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ..ops.hadamard import fwht


@dataclass(frozen=True)
class Fastfood:
    """P for one parameter of ``d`` numbers and a subspace of size ``k``, keyed by ``key``."""
    key: int
    d: int
    k: int

    def __post_init__(self):
        if not isinstance(self.k, int) or isinstance(self.k, bool) or self.k < 1:
            raise ValueError(f"subspace size k must be a whole number >= 1, got {self.k!r}")
        if self.d < 1:
            raise ValueError(f"a projected parameter needs at least one number, got d={self.d}")

    @property
    def block(self) -> int:
        return 1 << (self.k - 1).bit_length()  # D: the power of two >= k

    @property
    def blocks(self) -> int:
        return -(-self.d // self.block)        # nb

    def factors(self, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
        """(signs, permutation, gains), each (nb, D), drawn on the CPU from ``key``."""
        gen = torch.Generator().manual_seed(self.key)
        shape = (self.blocks, self.block)
        signs = torch.randint(0, 2, shape, generator=gen).mul_(2).sub_(1).float()
        # one randperm per block: O(D) each, ~5x faster on a CPU than argsort of (nb, D) uniforms, which
        # dominated the factors' cost (a subspace of an LLM draws them for ~10^8 weights per chunk)
        perm = torch.stack([torch.randperm(self.block, generator=gen) for _ in range(self.blocks)])
        gains = torch.randn(shape, generator=gen)
        gains *= math.sqrt(self.block) / gains.norm(dim=-1, keepdim=True)
        return signs.to(device), perm.to(device), gains.to(device)

    def project(self, z: Tensor, factors: tuple[Tensor, Tensor, Tensor] | None = None) -> Tensor:
        """P z for z (m, k) -> (m, d), in z's dtype; pass :meth:`factors` to reuse them over calls."""
        if z.dim() != 2 or z.shape[1] != self.k:
            raise ValueError(f"z must be (m, {self.k}), got {tuple(z.shape)}")
        signs, perm, gains = self.factors(z.device) if factors is None else factors
        m, nb, big = z.shape[0], self.blocks, self.block
        x = z.new_zeros(m, nb, big)                           # (m, nb, D)
        x[..., :self.k] = z[:, None, :]
        x = fwht(x * signs.to(z.dtype))                       # H B z, per block
        x = x.gather(-1, perm.expand(m, nb, big))             # Π
        x = fwht(x * gains.to(z.dtype))                       # H G
        return (x * math.sqrt(big / self.k)).reshape(m, nb * big)[:, :self.d]
