"""Question: what does the thread-count guarantee of the update cost?

With ``deterministic=True`` (the default) the update's GEMMs run as fixed single-threaded
tiles, so its bits do not depend on the thread count; ``False`` lets BLAS use every
thread. Both run side by side in one process, interleaved with plain inference of the
same tokens, for the throughput benchmark's MLP at T=1 (where the update weighs most).

Run:  .venv/bin/python bench/deterministic_cost.py [--quick] [--json] [--out FILE]
"""
from __future__ import annotations

import argparse
import sys

import hyperscalees as hs
from hyperscalees.benchmarks.base import Report, chunked_inference, environment, make_workload, side_by_side

QUESTION = "ES step / inference at T=1 with and without the update's thread-count guarantee"


def run(quick: bool = False) -> Report:
    widths, pop, warmup, repeats = ((64,), 256, 1, 2) if quick else ((256, 512, 1024), 4096, 2, 9)
    rep = Report("deterministic_cost", QUESTION, ["width", "pop", "infer_ms", "det_ms", "fast_ms",
                                                  "det_over_inference", "fast_over_inference"])
    for d in widths:
        work = make_workload("mlp", d, 1, pop)
        fns = {"inference": chunked_inference(work, pop, pop)}
        for name, det in (("det", True), ("fast", False)):
            es = hs.EGGROLL(work.model, population=pop, sigma=0.01, rank=1, lr=1e-3, seed=0, deterministic=det)
            fns[name] = (lambda es=es: es.tell(hs.evaluate(es, work.fitness, pop)))
        t = side_by_side(fns, warmup, repeats)
        inf = t["inference"].median
        rep.rows.append([d, pop, inf * 1e3, t["det"].median * 1e3, t["fast"].median * 1e3,
                         inf / t["det"].median, inf / t["fast"].median])
        print(f"  d={d}: det {inf / t['det'].median:.3f}  fast {inf / t['fast'].median:.3f}", file=sys.stderr)
    rep.summary = {"environment": environment()}
    rep.notes.append("both ES runs train the same model object in turn: they measure cost, not learning")
    return rep


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", action="store_true")
    p.add_argument("--out")
    args = p.parse_args(argv)
    rep = run(args.quick)
    text = rep.table()
    print(text)
    if args.json:
        print(rep.to_json())
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n" + rep.to_json() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
