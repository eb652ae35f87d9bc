"""``hyperscalees arch MODEL``: the parameter table of a language model (d-eggs' ``print_arch``).

One row per parameter (name, shape, dtype, count) and the total, for the sizes given as
flags -- the same flags ``train lm`` takes, so the table describes exactly the model a run
would build.
"""
from __future__ import annotations

import argparse
import math

import torch

from ..models.registry import LM_MODELS, build_lm
from ..tasks.lm.task import LMOptions, lm_sizes
from .base import examples_epilog, fail, json_line

PROG = "hyperscalees arch"


def register(subparsers) -> None:
    p = subparsers.add_parser("arch", help="print a language model's parameter count table",
                              description="Parameter table (name, shape, dtype, count, total) of an lm model.",
                              **examples_epilog([("hyperscalees arch egg", "the model `train lm --model egg` builds"),
                                                 ("hyperscalees arch float-gru --hidden 256", "the same at width 256")]))
    p.add_argument("model", metavar="MODEL", choices=sorted(LM_MODELS), help=f"one of {', '.join(sorted(LM_MODELS))}")
    # train lm's defaults, so `arch MODEL` describes the model `train lm --model MODEL` builds
    p.add_argument("--hidden", type=int, default=LMOptions.hidden, help=f"model width (default: {LMOptions.hidden})")
    p.add_argument("--layers", type=int, default=LMOptions.layers, help=f"layers (default: {LMOptions.layers})")
    p.add_argument("--heads", type=int, default=0, help="attention heads of a transformer (0: its default)")
    p.add_argument("--window", type=int, default=LMOptions.window,
                   help=f"context length of a transformer (default: {LMOptions.window})")
    p.add_argument("--vocab", type=int, default=256, help="vocabulary size (default: 256, bytes)")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    p.set_defaults(func=run)


def table(model) -> list[tuple[str, tuple[int, ...], str, int]]:
    return [(name, shape, dtype, math.prod(shape)) for name, shape, dtype in model.describe()]


def run(args: argparse.Namespace) -> int:
    try:
        sizes = lm_sizes(args.model, args.hidden, args.layers, args.window, args.heads)
        with torch.device("meta"):  # shapes only: a huge --hidden is counted, never allocated
            model = build_lm(args.model, args.vocab, **sizes)
    except (ValueError, TypeError) as e:
        return fail(PROG, str(e))
    except (MemoryError, RuntimeError) as e:
        return fail(PROG, f"cannot build {args.model} with --hidden {args.hidden} --layers {args.layers}: "
                          f"{str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__}")
    rows = table(model)
    total = sum(r[3] for r in rows)
    if args.json:
        print(json_line({"model": args.model, "sizes": sizes, "vocab": args.vocab, "total": total,
                         "parameters": [{"name": n, "shape": list(s), "dtype": d, "count": c} for n, s, d, c in rows]}))
        return 0
    w = max([len(r[0]) for r in rows] + [4])
    print(f"{'name':<{w}}  {'shape':<16} {'dtype':<8} {'count':>12}")
    for n, s, d, c in rows:
        print(f"{n:<{w}}  {str(tuple(s)):<16} {d:<8} {c:>12,}")
    print(f"{'total':<{w}}  {'':<16} {'':<8} {total:>12,}")
    return 0
