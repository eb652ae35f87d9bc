"""The in-process backend: the population evaluated chunk by chunk in this process.

A chunk is ``chunk`` members (whole antithetic pairs) run as one perturbed forward; noise
is a pure function of (seed, step, parameter, pair), so any chunking gives the same noise.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .base import AbstractBackend, FitnessFn


def check_chunk(chunk: int | None, population: int) -> int:
    chunk = population if chunk is None else chunk
    if not isinstance(chunk, int) or chunk < 2 or chunk % 2:
        raise ValueError(f"chunk must be an even number >= 2 (whole antithetic pairs), got {chunk!r}")
    return chunk


def evaluate(es, fitness_fn: FitnessFn, chunk: int | None = None) -> Tensor:
    """Fitness (P,) or (P, G) of ``es``'s current population, ``chunk`` members per forward.

    ``fitness_fn(model, lo, hi)`` runs ``es.model`` (already perturbed for members
    [lo, hi)) on member-major inputs and returns their (hi - lo,) or (hi - lo, G) scores.
    """
    n = es.population
    chunk = check_chunk(chunk, n)
    out = []
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        with es.perturbed((lo, hi)):
            f = torch.as_tensor(fitness_fn(es.model, lo, hi))
        if f.dim() == 0 or f.shape[0] != hi - lo or f.dim() > 2 or (out and f.shape[1:] != out[0].shape[1:]):
            raise ValueError(f"fitness_fn returned shape {tuple(f.shape)} for members [{lo}, {hi}); expected "
                             f"({hi - lo},) or ({hi - lo}, G) with the same G for every chunk")
        out.append(f.float() if not out else f.float().to(out[0].device))
    return torch.cat(out)  # left on the device: a copy to the host would wait for the whole queue


class LocalBackend(AbstractBackend):
    """Chunks run one after another in this process (the default)."""

    def evaluate(self, es, fitness_fn: FitnessFn, chunk: int | None = None) -> Tensor:
        return evaluate(es, fitness_fn, chunk)
