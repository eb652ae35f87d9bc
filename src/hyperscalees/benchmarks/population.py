"""Question: does a step's time grow linearly with the population, and its memory not at all?

A small MLP (16-64-64-4, every member sees the same 4 input rows) runs one full EGGROLL
step for populations 2^10 ... 2^18, evaluated ``chunk`` members at a time, with the
library's defaults otherwise: past the 64 MiB forward-noise cache, the update regenerates
noise in chunks of ``update_chunk`` = 4096 pairs. Each population runs in a fresh process
(CPU) so its peak RSS is its own: time should scale as N^1 (fitted exponent), and memory
above the post-setup floor should stay flat -- the only O(N) state is the fitness vector
(4 bytes per member).
"""
from __future__ import annotations

import math
import time

import torch

from ..nn.module_es import EGGROLL
from ..strategies.config import ESConfig
from ..nn.evaluate import evaluate
from ..models import mlp
from .base import Report, environment, in_subprocess, measure_peak, side_by_side

QUESTION = "time and peak memory per step as the population grows, chunked evaluation"
COLUMNS = ["population", "chunk", "s_per_step", "us_per_member", "peak_mib", "work_mib"]
ROWS_PER_MEMBER = 4


def configs(quick: bool) -> dict:
    if quick:
        return dict(exponents=range(4, 7), chunk=8, warmup=1, repeats=2, budget_s=120)
    return dict(exponents=range(10, 19), chunk=1024, warmup=1, repeats=3, budget_s=1500)


def probe(population: int, chunk: int, warmup: int, repeats: int, device: str = "cpu") -> dict:
    """One population size: median s/step and peak memory (run it in a fresh process)."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = mlp([16, 64, 64, 4], "relu").to(device)
    x = torch.randn(ROWS_PER_MEMBER, 16, generator=g).to(device)
    y = torch.randn(ROWS_PER_MEMBER, 4, generator=g).to(device)
    es = EGGROLL(model, population=population, sigma=0.05, rank=1, lr=1e-3, optimizer="adam", seed=0)

    def fitness(m, lo, hi, step):
        out = m(x.repeat(hi - lo, 1)).view(hi - lo, ROWS_PER_MEMBER, -1)
        return -(out - y).pow(2).mean(dim=(1, 2))

    def step():
        es.tell(evaluate(es, fitness, chunk))

    timing = {}
    mem = measure_peak(lambda: timing.update(side_by_side({"step": step}, warmup, repeats, device)), device)
    t = timing["step"]
    return {"median": t.median, "min": t.min, "max": t.max, **mem}


def fit_exponent(ns, ts) -> float:
    """Least-squares slope of log t against log N."""
    lx, ly = [math.log(n) for n in ns], [math.log(t) for t in ts]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def run(quick: bool = False, device: str = "cpu", log=print, max_exponent: int | None = None,
        isolate: bool = True) -> Report:
    """``isolate``: one fresh process per population (CPU peak RSS is then its own)."""
    c = configs(quick)
    rep = Report("population", QUESTION, COLUMNS)
    ns, ts, works, failed, skipped = [], [], [], None, []
    start = time.perf_counter()
    for e in c["exponents"]:
        if max_exponent is not None and e > max_exponent:
            break
        n = 2 ** e
        repeats = c["repeats"] if n <= 2**15 else 2  # the largest steps take minutes each
        if ts and 2 * ts[-1] * (c["warmup"] + repeats) > c["budget_s"] - (time.perf_counter() - start):
            skipped.append(n)  # would not finish within the time budget: say so instead
            continue
        kw = dict(population=n, chunk=min(c["chunk"], n), warmup=c["warmup"], repeats=repeats,
                  device=str(device))
        try:
            cpu = torch.device(device).type == "cpu"
            r = in_subprocess(f"{__name__}:probe", kw) if cpu and isolate else probe(**kw)
        except Exception as exc:  # e.g. out of memory: report how far it got
            failed = f"N=2^{e}: {str(exc)[-300:]}"
            log(f"  N=2^{e} failed: {failed}")
            break
        ns.append(n)
        ts.append(r["median"])
        works.append(r["working_mib"])
        rep.rows.append([n, kw["chunk"], r["median"], r["median"] / n * 1e6, r["peak_mib"], r["working_mib"]])
        log(f"  N=2^{e}: {r['median']:.3f} s/step, peak {r['peak_mib']:.0f} MiB (+{r['working_mib']:.1f})")
    big = [(n, t) for n, t in zip(ns, ts) if n >= 8 * c["chunk"]]
    big = big if len(big) >= 2 else list(zip(ns, ts))
    rep.summary = {
        "time_exponent": fit_exponent(*zip(*big)) if len(big) >= 2 else float("nan"),
        "time_exponent_all": fit_exponent(ns, ts) if len(ns) >= 2 else float("nan"),
        "largest_population": max(ns) if ns else 0,
        "work_mib_min": min(works) if works else float("nan"),
        "work_mib_max": max(works) if works else float("nan"),
        "fitness_vector_mib_at_largest": (max(ns) * 4 / 2**20) if ns else float("nan"),
        "failed": failed,
        "skipped_for_time": skipped,
        "time_budget_s": c["budget_s"],
        "environment": environment(),
    }
    bound = ESConfig.noise_cache_mib + 32.0
    rep.summary["mem_bound_mib"] = bound
    rep.summary["mem_bounded"] = bool(works) and (max(works) - min(works)) < bound
    rep.notes += [
        f"MLP 16-64-64-4, {ROWS_PER_MEMBER} shared input rows per member, chunk {c['chunk']} members, "
        f"past the noise cache the update regenerates in chunks of {ESConfig.update_chunk} pairs (the default); "
        "one fresh process per population",
        "time_exponent: fitted over N >= 8 chunks (below that the step is a single chunk and fixed costs "
        "dominate); time_exponent_all over every N",
        "mem_bounded: working memory (peak RSS above the post-setup floor) varies across N by less than the "
        "forward-noise cache budget (noise drawn for evaluation chunks, kept for the same step's update, "
        "capped in bytes; past it the update regenerates) + 32 MiB: a constant, independent of N",
    ]
    return rep
