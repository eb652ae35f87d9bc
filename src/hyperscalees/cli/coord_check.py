"""``hyperscalees coord-check``: muP's coordinate check (``benchmarks/coord_check.py`` does the work).

Trains one model at several widths for a few steps under the standard parametrisation and
under muP, records every module's mean |output| at each step, and prints the slope of log
mean|output| against log width per module and step. ``--out DIR`` also writes
``coord_check.png`` (needs matplotlib) and ``coord_check.txt`` (the table, then the JSON line).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .base import examples_epilog, fail, json_line, plain

PROG = "hyperscalees coord-check"
MODELS, OPTIMIZERS, PARAMETRIZATIONS = ("mlp", "transformer"), ("es", "adam", "sgd"), ("standard", "mup")


def _widths(text: str) -> list[int]:
    try:
        ws = [int(w) for w in text.split(",") if w.strip()]
    except ValueError:
        ws = []
    if len(set(ws)) < 2 or min(ws) < 1:
        raise argparse.ArgumentTypeError(f"must be at least two distinct positive widths, comma-separated, got {text!r}")
    return ws


def _parametrizations(text: str) -> list[str]:
    pzs = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in pzs if p not in PARAMETRIZATIONS]
    if not pzs or bad:
        raise argparse.ArgumentTypeError(f"choose from {' | '.join(PARAMETRIZATIONS)} (comma-separated), got {text!r}")
    return pzs


def register(subparsers) -> None:
    p = subparsers.add_parser("coord-check", help="muP coordinate check: activation size vs width, per step",
                              description=plain(__doc__),
                              **examples_epilog([("hyperscalees coord-check", "mlp, ES, standard and muP, 5 steps"),
                                                 ("hyperscalees coord-check --model transformer --optimizer adam "
                                                  "--out runs/cc", "TinyLM under Adam, with coord_check.png")]))
    p.add_argument("--model", default="mlp", choices=MODELS,
                   help="mlp: 16-n-n-n-n-10 ReLU regression; transformer: TinyLM, 2 blocks, head dim 64 (default: mlp)")
    p.add_argument("--widths", type=_widths, default=[64, 128, 256, 512, 1024], metavar="W,W,...",
                   help="widths to train at (default: 64,128,256,512,1024)")
    p.add_argument("--base-width", type=int, default=None, help="where muP's multipliers are 1 (default: the smallest)")
    p.add_argument("--optimizer", default="es", choices=OPTIMIZERS, help="es (EGGROLL driving Adam) | adam | sgd")
    p.add_argument("--parametrization", type=_parametrizations, default=list(PARAMETRIZATIONS), metavar="P[,P]",
                   help="standard | mup, or both comma-separated (default: standard,mup)")
    p.add_argument("--steps", type=int, default=5, metavar="T", help="training steps; activations at t = 0..T (default: 5)")
    p.add_argument("--lr", type=float, default=None,
                   help="learning rate at the base width (default: one at which standard blows up, per model and optimizer)")
    p.add_argument("--sigma", type=float, default=0.05, help="es only: σ at the base width (default: 0.05)")
    p.add_argument("--seeds", type=int, default=None, help="seeds averaged per width (default: mlp 3, transformer 2)")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.add_argument("--out", type=Path, default=None, metavar="DIR", help="write coord_check.png and coord_check.txt here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.steps < 1:
        return fail(PROG, f"--steps must be >= 1, got {args.steps}")
    from ..benchmarks import coord_check
    from ..engine.plotting import pyplot
    if args.out is not None:  # before minutes of training: a missing matplotlib is a clear error at once
        try:
            pyplot()
        except ImportError as e:
            return fail(PROG, f"--out: {e} (or leave out --out)")
    try:
        cc = coord_check.run(args.model, args.widths, args.optimizer, args.parametrization, args.steps, args.lr,
                             args.sigma, args.base_width, args.seeds,
                             log=lambda msg: print(msg, file=sys.stderr, flush=True))
    except ValueError as e:
        return fail(PROG, str(e))
    text, line = coord_check.table(cc), json_line(coord_check.summary(cc))
    print(text)
    if args.json:
        print(line)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "coord_check.txt").write_text(text + "\n" + line + "\n")
        coord_check.plot(cc, args.out / "coord_check.png")
        print(f"wrote {args.out / 'coord_check.txt'} and {args.out / 'coord_check.png'}", file=sys.stderr)
    return 0
