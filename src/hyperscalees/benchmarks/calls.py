"""Question: what does ES cost when a small policy is called many times per step (RL)?

A policy (8 -> 64 -> 64 -> 2, tanh) is called ``calls`` times per ES step on the whole
population, inside one ``es.perturbed()`` block, as an environment loop would; the step
ends with ``tell``. Side by side: the same calls on the unperturbed policy. Here the
per-call cost of a perturbed layer matters, not the GEMMs: the per-step layer plans
(``ops.LowrankPlan``) are what keep it down.
"""
from __future__ import annotations

import torch
from torch import nn

from ..nn.module_es import EGGROLL
from .base import Report, environment, side_by_side

QUESTION = "ES step of a small policy called many times per step vs the same calls without ES"
COLUMNS = ["population", "calls", "infer_ms", "es_ms", "es_over_inference", "es_us_per_call_over_infer"]


def configs(quick: bool) -> dict:
    if quick:
        return dict(populations=(16,), calls=3, warmup=1, repeats=2)
    return dict(populations=(256, 2048), calls=200, warmup=1, repeats=5)


def _policy(device) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 2)).to(device)


def run(quick: bool = False, device: str = "cpu", log=print) -> Report:
    c = configs(quick)
    rep = Report("calls", QUESTION, COLUMNS)
    worst = None
    for n in c["populations"]:
        policy = _policy(device)
        es = EGGROLL(policy, population=n, sigma=0.05, rank=1, lr=1e-3, optimizer="adam", seed=0)
        obs = torch.randn(n, 8, generator=torch.Generator().manual_seed(0)).to(device)
        fitness = torch.randn(n, generator=torch.Generator().manual_seed(1))

        def es_step():
            with es.perturbed():
                for _ in range(c["calls"]):
                    policy(obs)
            es.tell(fitness)

        def inference():
            with torch.no_grad():
                for _ in range(c["calls"]):
                    policy(obs)

        t = side_by_side({"inference": inference, "es": es_step}, c["warmup"], c["repeats"], device)
        ratio = t["inference"].median / t["es"].median
        extra_us = (t["es"].median - t["inference"].median) / c["calls"] * 1e6
        rep.rows.append([n, c["calls"], t["inference"].median * 1e3, t["es"].median * 1e3, ratio, extra_us])
        log(f"  population {n}: es/inf={ratio:.3f}")
        worst = ratio if worst is None else min(worst, ratio)
    rep.summary = {"es_over_inference": worst, "calls_per_step": c["calls"], "environment": environment()}
    rep.notes += ["es_over_inference = inference time / ES step time for the same calls (1.0 = ES free); "
                  "the ES step includes the noise draw and tell",
                  "es_us_per_call_over_infer: extra microseconds per policy call (3 perturbed layers)"]
    return rep
