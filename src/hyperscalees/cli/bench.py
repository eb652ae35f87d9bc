"""``hyperscalees bench NAME [--quick] [--json] [--device cpu|cuda]``: measured performance.

Each benchmark answers one question (see ``hyperscalees.benchmarks``) and prints a
readable table; with ``--json`` its last stdout line is one JSON object.
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

BENCHMARKS = ("throughput", "population", "peers", "calls")


def register(subparsers) -> None:
    p = subparsers.add_parser("bench", help="measure ES cost against inference, population scaling, peers",
                              description=__doc__)
    p.add_argument("name", choices=BENCHMARKS, metavar="NAME", help=" | ".join(BENCHMARKS))
    p.add_argument("--quick", action="store_true", help="tiny sizes: checks it runs, numbers mean little")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where to measure (default: cpu)")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    p.add_argument("--out", type=Path, default=None, help="also write the table and JSON to this file")
    p.set_defaults(func=run)


def run(args) -> int:
    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        print("hyperscalees bench: --device cuda but CUDA is not available", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    mod = importlib.import_module(f"hyperscalees.benchmarks.{args.name}")
    log = lambda msg: print(msg, file=sys.stderr, flush=True)
    report = mod.run(quick=args.quick, device=args.device, log=log)
    text = report.table()
    print(text)
    line = report.to_json()
    if args.json:
        print(line)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n" + line + "\n")
    return 0
