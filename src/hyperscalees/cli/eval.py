"""``hyperscalees eval DIR``: load a run's checkpoint and print its task's held-out metrics.

Reads only the model and the task state that ``checkpoint.json`` names: evaluating needs
no optimizer state, so a damaged strategy file does not stop it.
"""
from __future__ import annotations

import argparse

from ..engine import load_run
from .base import fail, json_line, os_error


def register(subparsers) -> None:
    p = subparsers.add_parser("eval", help="evaluate a saved checkpoint",
                              description="Load the checkpoint of a run directory and print its held-out metrics.")
    p.add_argument("directory", metavar="DIR", help="run directory written by `hyperscalees train --out DIR`")
    p.add_argument("--device", default=None, help="torch device to evaluate on (default: cpu)")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        cfg, task, model, step = load_run(args.directory, args.device)
    except (FileNotFoundError, ValueError, RuntimeError) as e:
        return fail("hyperscalees eval", str(e))
    except OSError as e:
        return fail("hyperscalees eval", os_error(e))
    metrics = task.evaluate(model)
    if args.json:
        print(json_line({"task": cfg.task, "step": step, "directory": args.directory, "metrics": metrics,
                         "solved": task.solved(metrics)}))
    else:
        print(f"{cfg.task} at step {step} ({args.directory})")
        for k, v in metrics.items():
            print(f"  {k:<16} {v:.6g}")
        print(f"  {'solved':<16} {task.solved(metrics)}")
    return 0
