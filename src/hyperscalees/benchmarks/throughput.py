"""Question: what does one full EGGROLL step cost next to plain inference on the same tokens?

For each configuration (model kind, width, sequence length T, population N), three
callables run interleaved in one process, after warm-up, median of repeats:

- ``inference``: N sequences through the *unperturbed* model, fitness included, in
  the same member chunks as the ES step (so both enjoy the same cache behaviour);
- ``eggroll``: one full step -- noise generation, chunked population forward through
  ``hs.EGGROLL(...).perturbed()`` (the real hook path), fitness shaping and update;
- ``openes`` (width 1024 only): full-rank OpenES materializes (K, out, in) noise per
  pair, so it runs on a few members; its per-member cost is compared with EGGROLL's.

Memory of one cold call each of inference, the ES step and a backprop training step of the
same model on the same batch (same chunks, loss = -fitness, Adam) is measured per configuration
in a fresh subprocess (CPU) or with torch's allocator statistics (CUDA). The figure to read is
*working* memory: the growth above the process's floor after set-up (model, data, strategy;
on a CPU ~300 MiB of it is torch itself). Peak RSS ratios are kept for the record, but that
floor dilutes them towards 1.
"""
from __future__ import annotations

import torch

from ..nn.module_es import EGGROLL, OpenES
from .base import (EXACT_RSS_ENV, Report, backprop_step, chunked_inference, environment, es_step, in_subprocess,
                   make_workload, measure_peak, side_by_side)

QUESTION = "tokens/s of one full ES step vs plain inference of the same tokens"
COLUMNS = ["model", "width", "seq", "pop", "chunk", "infer_tok_s", "eggroll_tok_s", "es_over_inference",
           "openes_s_member", "eggroll_s_member", "eggroll_over_openes", "infer_peak_mib", "es_peak_mib",
           "peak_mem_ratio", "infer_work_mib", "es_work_mib", "es_over_infer_work", "backprop_work_mib",
           "es_over_backprop_work"]
CHUNK_TOKENS = 4096  # members per chunk = CHUNK_TOKENS // T: activations stay cache-sized


def configs(quick: bool) -> dict:
    if quick:
        return dict(kinds=("mlp", "lm"), widths=(32,), shapes=((1, 16), (4, 8)), openes_width=32,
                    openes_members=4, chunk_tokens=16, warmup=1, repeats=2, memory=False)
    return dict(kinds=("mlp", "lm"), widths=(256, 512, 1024), shapes=((1, 4096), (16, 1024), (64, 256)),
                openes_width=1024, openes_members=16, chunk_tokens=CHUNK_TOKENS, warmup=2, repeats=9, memory=True)


def _chunk(seq: int, pop: int, chunk_tokens: int) -> int:
    c = max(2, chunk_tokens // seq)
    return min(pop, c - c % 2)


def _build(kind, width, seq, pop, device, strategy="eggroll", noise_cache_mib=64.0):
    work = make_workload(kind, width, seq, pop, device=device)
    cls = EGGROLL if strategy == "eggroll" else OpenES
    es = cls(work.model, population=pop, sigma=0.01, rank=1, lr=1e-3, optimizer="adam", seed=0,
             noise_cache_mib=noise_cache_mib)
    return work, es


def memory_probe(kind: str, width: int, seq: int, pop: int, chunk: int, device: str, which: str) -> dict:
    """Peak memory of one cold call of ``which`` ('inference', 'eggroll' or 'backprop'); run it in a fresh
    process. The ES strategy is built for every probe, so the floor holds the same objects."""
    torch.set_num_threads(torch.get_num_threads())
    work, es = _build(kind, width, seq, pop, device)
    run = {"inference": lambda: chunked_inference(work, pop, chunk), "eggroll": lambda: es_step(es, work, chunk),
           "backprop": lambda: backprop_step(work, pop, chunk)}[which]()
    return measure_peak(run, device)


def _memory(kind, width, seq, pop, chunk, device) -> dict:
    out = {}
    for which in ("inference", "eggroll", "backprop"):
        kw = dict(kind=kind, width=width, seq=seq, pop=pop, chunk=chunk, device=str(device), which=which)
        out[which] = (in_subprocess(f"{__name__}:memory_probe", kw, env=EXACT_RSS_ENV) if torch.device(device).type == "cpu"
                      else memory_probe(**kw))
    return out


def run(quick: bool = False, device: str = "cpu", log=print) -> Report:
    c = configs(quick)
    rep = Report("throughput", QUESTION, COLUMNS)
    for kind in c["kinds"]:
        for width in c["widths"]:
            for seq, pop in c["shapes"]:
                chunk = _chunk(seq, pop, c["chunk_tokens"])
                work, es = _build(kind, width, seq, pop, device)
                fns = {"inference": chunked_inference(work, pop, chunk), "eggroll": es_step(es, work, chunk)}
                m = c["openes_members"]
                t = side_by_side(fns, c["warmup"], c["repeats"], device)
                if width == c["openes_width"] and seq <= 16:
                    # separately, so OpenES's huge dense draws cannot disturb the ratio above
                    # without the noise cache: at a real population OpenES's dense draws
                    # (out*in per pair) can never be kept, so its update regenerates them
                    owork, oes = _build(kind, width, seq, m, device, "openes", noise_cache_mib=0)
                    t["openes"] = side_by_side({"openes": es_step(oes, owork, 2)},  # one pair at a time
                                               c["warmup"], c["repeats"], device)["openes"]
                    del owork, oes
                tokens = pop * seq
                inf_tps, es_tps = tokens / t["inference"].median, tokens / t["eggroll"].median
                eg_member = t["eggroll"].median / pop
                op_member = t["openes"].median / m if "openes" in t else float("nan")
                mem = _memory(kind, width, seq, pop, chunk, device) if c["memory"] else None
                mi, me, mb = (mem["inference"], mem["eggroll"], mem["backprop"]) if mem else ({}, {}, {})
                nan = float("nan")
                work_ratio = lambda a, b: a.get("working_mib", nan) / max(b.get("working_mib", nan), 1.0)
                row = [kind, width, seq, pop, chunk, inf_tps, es_tps, es_tps / inf_tps, op_member, eg_member,
                       op_member / eg_member, mi.get("peak_mib", nan), me.get("peak_mib", nan),
                       me.get("peak_mib", nan) / mi.get("peak_mib", nan), mi.get("working_mib", nan),
                       me.get("working_mib", nan), work_ratio(me, mi), mb.get("working_mib", nan), work_ratio(me, mb)]
                rep.rows.append(row)
                log(f"  {kind} d={width} T={seq} N={pop}: es/inf={row[7]:.3f}"
                    + (f" openes/eggroll per member={row[10]:.1f}" if "openes" in t else ""))
    rep.summary = summarize(rep)
    rep.summary["environment"] = environment()
    rep.notes += [
        f"inference and ES step use the same member chunks ({c['chunk_tokens']} tokens per chunk) and the same "
        "fitness; timings are medians of interleaved repeats after warm-up",
        "es_over_inference = ES-step tokens/s / inference tokens/s (1.0 = ES costs nothing extra)",
        f"OpenES runs {c['openes_members']} members, 2 at a time (its dense noise is out*in per pair); its "
        "per-member cost is extrapolated linearly to the EGGROLL population (every member needs its own "
        "full-rank draw, regenerated again for the update, as at any real population: the forward-noise cache "
        "is off for it), including its per-step fixed costs spread over those few members",
        "memory: one cold call each in a fresh process; *_work_mib is the growth above the post-setup floor "
        "(working memory: read these); *_peak_mib is process peak RSS, floor included (torch alone is ~300 MiB on "
        "a CPU), so peak_mem_ratio is diluted towards 1",
        "es_over_infer_work: ES step's working memory / inference's; es_over_backprop_work: / a backprop training "
        "step's (same model, batch and chunks; loss -fitness; Adam; one chunk's activations stored at a time; "
        "ratios floor the denominator at 1 MiB)",
    ]
    return rep


def summarize(rep: Report) -> dict:
    rows = [dict(zip(rep.columns, r)) for r in rep.rows]
    long_seq = [r for r in rows if r["seq"] >= 16] or rows
    t1 = [r for r in rows if r["seq"] == 1]
    worst = min(long_seq, key=lambda r: r["es_over_inference"])
    out = {"es_over_inference": worst["es_over_inference"],
           "es_over_inference_at": f"{worst['model']} d={worst['width']} T={worst['seq']} N={worst['pop']}",
           "es_over_inference_t1": min((r["es_over_inference"] for r in t1), default=float("nan"))}
    op = [r for r in rows if r["eggroll_over_openes"] == r["eggroll_over_openes"]]
    out["eggroll_over_openes"] = min((r["eggroll_over_openes"] for r in op), default=float("nan"))
    out["eggroll_over_openes_by_config"] = {f"{r['model']} T={r['seq']}": r["eggroll_over_openes"] for r in op}
    mem = [r for r in rows if r["peak_mem_ratio"] == r["peak_mem_ratio"]]
    out["peak_mem_ratio"] = max((r["peak_mem_ratio"] for r in mem), default=float("nan"))
    out["peak_mem_ratio_working"] = max((r["es_over_infer_work"] for r in mem), default=float("nan"))
    out["es_over_backprop_work_max"] = max((r["es_over_backprop_work"] for r in mem), default=float("nan"))
    out["es_over_backprop_work_min"] = min((r["es_over_backprop_work"] for r in mem), default=float("nan"))
    return out
