"""How much a worker's threads speed up its work: the scaling model's price of ``--worker-threads``.

A Ray worker of K threads (``RayConfig.worker_threads``) replays each update once for K cores, where
K one-thread workers replay it K times: the update replay, the cost that does not shrink as workers
are added (``scale.py``), is then paid once a node. What that buys depends on how well the worker's
evaluation and its replay use K threads. Both are timed here at 1 and at K threads and summed up as
Amdahl's serial fraction s (K threads run 1 / (s + (1 - s)/K) times faster), which the model extends
to the K of a node; that extension is an assumption, stated with the result.

- replay: EGGROLL's update on SmolLM2's MLP matrix (576 x 1536) at the seeds' population (1,536
  members), as ``scale.replay_rate`` times it (at 512 members two threads bought nothing: too little
  work a tile);
- evaluation: population generation of a random-weight Llama with SmolLM2's widths (hidden 576, MLP
  1,536; two layers and a 256-token vocabulary, so the measurement stays seconds long), 64 members x 2
  prompts a forward, in-process (at 16 x 2 two threads bought nothing: a worker needs a batch to thread).
"""
from __future__ import annotations

import os
import time

import torch

from ..ops.fixed_order import torch_threads


def serial_fraction(one: float, many: float, threads: int) -> float:
    """Amdahl's serial fraction from ``one`` thread's seconds and ``threads`` threads' ``many``, in [0, 1]."""
    if threads < 2 or one <= 0:
        raise ValueError(f"needs threads >= 2 and a positive one-thread time, got {threads} and {one}")
    s = (many / one - 1.0 / threads) / (1.0 - 1.0 / threads)
    return min(1.0, max(0.0, s))


def median_seconds(fn, reps: int) -> float:
    fn()                                                   # warm-up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


REPLAY_POPULATION = {True: 64, False: 1536}   # quick, full


def replay_seconds(quick: bool, threads: int) -> float:
    from .. import EGGROLL
    population = REPLAY_POPULATION[quick]
    with torch_threads(threads):
        es = EGGROLL(torch.nn.Linear(576, 1536, bias=False), population=population, sigma=0.01, lr=0.01, rank=1)
        shaped = torch.linspace(-1, 1, population)
        return median_seconds(lambda: es.update(shaped), 1 if quick else 5)


def evaluation_seconds(quick: bool, threads: int) -> float:
    from ..distributed import LocalBackend
    from .distributed import LLMRecipe
    recipe = LLMRecipe(population=4 if quick else 64, tokens=4 if quick else 16, hidden=576, layers=1 if quick else 2)
    with torch_threads(threads), LocalBackend(recipe) as backend:
        return median_seconds(backend.evaluate, 1 if quick else 3)


def measure(quick: bool, threads: int = 2) -> dict:
    """{"threads": K, "replay"/"evaluate": {"one_s", "many_s", "serial"}}; K is capped at the cores this process
    may use (one core: nothing measured, serial fractions 1, so the model gives threads no speed-up)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = min(threads, cores)
    if threads < 2:
        return {"threads": 1, "replay": {"serial": 1.0}, "evaluate": {"serial": 1.0}, "note": "one core: not measured"}
    out = {"threads": threads}
    rounds = 1 if quick else 3              # 1 and K threads in turn, the median of each: a busy moment hits both
    for name, fn in (("replay", replay_seconds), ("evaluate", evaluation_seconds)):
        try:
            times = [(fn(quick, 1), fn(quick, threads)) for _ in range(rounds)]
        except ImportError as e:                            # transformers missing: no speed-up assumed
            out[name] = {"serial": 1.0, "note": f"not measured ({e})"}
            continue
        one, many = (sorted(t)[len(t) // 2] for t in zip(*times))
        out[name] = {"one_s": one, "many_s": many, "serial": serial_fraction(one, many, threads)}
    return out
