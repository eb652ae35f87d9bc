"""``hyperscalees bench NAME [--quick] [--json] [--device cpu|cuda]``: measured performance.

Each benchmark answers one question (see ``hyperscalees.benchmarks``) and prints a
readable table; with ``--json`` its last stdout line is one JSON object.

The comparison with other PyPI libraries is not here: it installs them into throw-away
venvs, a dev tool rather than library code, so it ships as ``bench/peers.py`` in the
source checkout only (``python bench/peers.py --help``).
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Callable

BENCHMARKS = ("throughput", "population", "calls")
# Benchmarks that live outside the installed package: name -> how to run them instead.
MOVED = {"peers": "python bench/peers.py"}


def add_flags(p) -> None:
    """The flags every benchmark takes (also used by the scripts under ``bench/``)."""
    p.add_argument("--quick", action="store_true", help="tiny sizes: checks it runs, numbers mean little")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where to measure (default: cpu)")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    p.add_argument("--out", type=Path, default=None, help="also write the table and JSON to this file")


def register(subparsers) -> None:
    p = subparsers.add_parser("bench", help="measure ES cost against inference, population scaling, RL calls",
                              description=__doc__)
    moved = "; ".join(f"{k}: run `{v}` from a source checkout" for k, v in MOVED.items())
    p.add_argument("name", choices=BENCHMARKS + tuple(MOVED), metavar="NAME",
                   help=f"{' | '.join(BENCHMARKS)}; {moved}")
    add_flags(p)
    p.set_defaults(func=run)


def run(args) -> int:
    if args.name in MOVED:
        print(f"hyperscalees bench {args.name}: not part of the installed package (it installs other "
              f"libraries into throw-away venvs). From a source checkout run: {MOVED[args.name]} "
              f"[--quick] [--json] [--device cpu|cuda] [--out FILE]", file=sys.stderr)
        return 2
    return measure(importlib.import_module(f"hyperscalees.benchmarks.{args.name}").run, args)


def measure(bench_run: Callable, args) -> int:
    """Run ``bench_run(quick=, device=, log=)`` and print its table (and JSON line, and ``--out`` file)."""
    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        print("hyperscalees bench: --device cuda but CUDA is not available", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)
    report = bench_run(quick=args.quick, device=args.device, log=log)
    text = report.table()
    print(text)
    line = report.to_json()
    if args.json:
        print(line)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n" + line + "\n")
    return 0
