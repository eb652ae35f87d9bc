"""The in-process chunk loop: a population's fitness, ``chunk`` members per perturbed forward.

A chunk is whole antithetic pairs run as one forward; noise is a pure function of (seed,
step, parameter, pair), so any chunking gives the same noise. This is the loop every
backend runs somewhere: in this process (``hs.LocalBackend``) or on a worker's replica.
"""
from __future__ import annotations

import inspect
from typing import Callable

import torch
from torch import Tensor, nn

FitnessFn = Callable[[nn.Module, int, int, int], Tensor]  # (model, lo, hi, step): every backend's too
SIGNATURE = "fitness(model, lo, hi, step)"


def check_chunk(chunk: int | None, population: int, per_draw: int = 2) -> int:
    """``chunk`` (default: the whole population) after checking it is whole antithetic pairs
    (``per_draw`` 2), or any size >= 1 when members are independent (``per_draw`` 1)."""
    chunk = population if chunk is None else chunk
    if not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < per_draw or chunk % per_draw:
        if per_draw == 1:
            raise ValueError(f"chunk must be an integer >= 1, got {chunk!r}")
        raise ValueError(f"chunk must be an even number >= 2 (whole antithetic pairs), got {chunk!r}")
    return chunk


def check_chunk_fitness(f, lo: int, hi: int) -> Tensor:
    """A chunk's fitness as a float tensor (hi - lo,) or (hi - lo, G); a ValueError names the chunk."""
    f = torch.as_tensor(f)
    if f.dim() not in (1, 2) or f.shape[0] != hi - lo:
        raise ValueError(f"fitness returned shape {tuple(f.shape)} for members [{lo}, {hi}); expected "
                         f"({hi - lo},) or ({hi - lo}, G)")
    return f.float()


def join_chunks(parts: list[Tensor]) -> Tensor:
    """The chunks' fitness, in member order, as one tensor (every chunk must have the same G)."""
    if len({tuple(p.shape[1:]) for p in parts}) > 1:
        shapes = sorted({tuple(p.shape) for p in parts})
        raise ValueError(f"fitness returned different shapes per chunk: {shapes}; expected the same G for every chunk")
    device = parts[0].device
    return torch.cat([p.to(device) for p in parts])


def check_fitness_fn(fitness_fn) -> None:
    """Refuse a fitness that cannot be called as ``(model, lo, hi, step)``, before any forward runs
    (a three-argument ``(model, lo, hi)`` one, the old form, would otherwise fail deep in a chunk)."""
    if not callable(fitness_fn):
        raise TypeError(f"the fitness must be callable as {SIGNATURE}, got {type(fitness_fn).__name__}")
    try:
        signature = inspect.signature(fitness_fn)
    except (TypeError, ValueError):  # a builtin or extension without a signature: trust it
        return
    try:
        signature.bind(None, 0, 2, 0)
    except TypeError:
        raise TypeError(f"the fitness must take {SIGNATURE} (step: the ES step the members belong to), "
                        f"got {getattr(fitness_fn, '__name__', type(fitness_fn).__name__)}{signature}") from None


def evaluate(es, fitness_fn: FitnessFn, chunk: int | None = None) -> Tensor:
    """Fitness (P,) or (P, G) of ``es``'s current population, ``chunk`` members per forward.

    ``fitness_fn(model, lo, hi, step)`` runs ``es.model`` (already perturbed for members
    [lo, hi) of step ``step``, i.e. ``es.step``) on member-major inputs and returns their
    (hi - lo,) or (hi - lo, G) scores: the same signature every backend's fitness has
    (``distributed/recipe.py``), so one fitness serves ``hs.evaluate`` and any backend.
    The result stays on the device: a copy to the host would wait for the whole queue.
    """
    check_fitness_fn(fitness_fn)
    n, step = es.population, es.step
    chunk = check_chunk(chunk, n, es.ask().per_draw)
    parts = []
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        with es.perturbed((lo, hi)):
            parts.append(check_chunk_fitness(fitness_fn(es.model, lo, hi, step), lo, hi))
    return join_chunks(parts)
