"""The command line every study under ``bench/`` shares: ``python bench/STUDY.py [--quick] [--json] ...``.

The studies (ES vs GRPO, ES vs PPO, the signal and muP sweeps) are this project's own
measurements, run from a source checkout, not tools of the installed package. They take the
flags of ``hyperscalees bench`` (``--quick --json --device --threads --out``) plus their own, and
print the same table and JSON line, so a result file reads the same whichever way it was made.
"""
from __future__ import annotations

import argparse
import functools
import json
import sys
from typing import Callable

from hyperscalees.benchmarks.base import BenchSetupError
from hyperscalees.cli.bench import _int_at_least, _positive_float, add_flags, measure

COMMON = frozenset({"quick", "json", "device", "threads", "out"})  # the flags add_flags gives every benchmark
positive_int, seed, positive_float = _int_at_least(1), _int_at_least(0), _positive_float


def last_json(text: str) -> dict | None:
    """The last line of ``text`` that is a JSON object (a run's ``--json`` summary, a study's record), or
    None: what a study reads back from a child's output or a saved result file."""
    for line in reversed((text or "").strip().splitlines()):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            return obj
    return None


def parser(script: str, doc: str) -> argparse.ArgumentParser:
    """A study's parser with the common flags; ``doc`` (its module docstring) is the --help text."""
    p = argparse.ArgumentParser(prog=f"python bench/{script}", description=doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_flags(p)
    return p


def main(p: argparse.ArgumentParser, run: Callable, argv=None, child_threads: bool = False) -> int:
    """Parse ``argv``, pass every study flag given (not None) to ``run``, print its report.

    ``child_threads``: the study measures in child processes, so ``--threads`` (default 1) goes
    to its runs, not to this process."""
    args = p.parse_args(argv)
    own = {k: v for k, v in vars(args).items() if k not in COMMON and v is not None}
    if child_threads:
        own["threads"], args.threads = args.threads or 1, None
    try:
        return measure(functools.partial(run, **own), args)
    except BenchSetupError as e:
        print(f"{p.prog}: {e}", file=sys.stderr)
        return 1
