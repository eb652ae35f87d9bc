"""``hyperscalees train TASK [flags]``: build a ``TrainConfig`` from flags and run the engine.

Each task is a sub-command, so ``train digits --help`` shows that task's defaults and its
own options. ES flags come from ``ESConfig``, engine flags from ``EngineConfig``, task flags
from the task's ``Options`` dataclass.
"""
from __future__ import annotations

import argparse
import json
import sys

from ..distributed import LocalBackend
from ..engine import STRATEGIES, EngineConfig, TrainConfig, has_checkpoint, make_config, run as run_engine
from ..engine.checkpoint import load_checkpoint_config
from ..noise.distributions import DISTRIBUTIONS
from ..strategies.config import OPTIMIZERS, UPDATES, ESConfig
from ..strategies.rules import RULES
from ..strategies.shaping import GROUP_FITNESS, SHAPINGS
from ..tasks import TASKS
from .base import StoreExplicit, add_dataclass_flags, collect, explicit, fail

RESUMED_ENGINE = ("steps", "eval_every", "checkpoint_every", "chunk")  # the rest is about this invocation
ES_CHOICES = {"optimizer": OPTIMIZERS, "shaping": tuple(sorted(SHAPINGS)), "distribution": DISTRIBUTIONS,
              "update": UPDATES, "group_fitness": GROUP_FITNESS, "update_rule": tuple(RULES)}
HELP = {
    "population": "members per step (even: antithetic pairs)", "sigma": "noise scale σ",
    "rank": "rank r of the low-rank perturbations", "lr": "learning rate", "seed": "noise, data and init seed",
    "steps": "total ES steps (a resumed run continues up to this count)",
    "time_budget": "stop before the next step would exceed SECONDS of wall time",
    "eval_every": "held-out metrics every K steps", "checkpoint_every": "checkpoint every K steps (0: at the end)",
    "out": "run directory for checkpoint, metrics and curve.png",
    "resume": "continue the run saved in DIR; flags not given here keep that run's values",
    "device": "torch device (default: cuda if available, else cpu)", "json": "print one JSON summary line",
    "chunk": "members per forward pass (even); bounds memory",
    "group_fitness": "how (P, G) fitness becomes one score per member: mean over G, or shape each group alone",
    "update_rule": "how estimates move the weights (optimizer: a torch.optim optimizer steps -ĝ)",
    "fallback_mib": "MiB of per-member parameter copies the generic vmap layer may make per forward",
}


def register(subparsers) -> None:
    p = subparsers.add_parser("train", help="train a task with ES", description=__doc__.splitlines()[0])
    tasks = p.add_subparsers(dest="task", required=True, metavar="TASK",
                             help="one of: " + ", ".join(TASKS))
    for name, cls in TASKS.items():
        tp = tasks.add_parser(name, help=(cls.__doc__ or "").strip().splitlines()[0],
                              description=(cls.__doc__ or "").strip())
        add_task_flags(tp, cls)
        tp.set_defaults(func=run)
    p.set_defaults(func=run)


def add_task_flags(parser: argparse.ArgumentParser, task_cls) -> None:
    """All flags of ``train TASK``: strategy, ES, engine and task options (names never collide)."""
    parser.add_argument("--strategy", dest="run.strategy", action=StoreExplicit, choices=STRATEGIES,
                        default="eggroll", help="eggroll (low-rank) or open_es (full-rank) (default: eggroll)")
    es = parser.add_argument_group("evolution strategy")
    flags = add_dataclass_flags(es, ESConfig, "es", defaults=task_cls.defaults, choices=ES_CHOICES, helps=HELP)
    eng = parser.add_argument_group("engine")
    flags += add_dataclass_flags(eng, EngineConfig, "engine", defaults={"steps": task_cls.defaults.get("steps")},
                                 helps=HELP)
    opt = parser.add_argument_group(f"{task_cls.name} options")
    for f in add_dataclass_flags(opt, task_cls.Options, "options"):
        assert f not in flags, f"task option {f} of {task_cls.name} collides with a core flag"


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The ``TrainConfig`` the parsed flags describe (raises ValueError on invalid values).

    With ``--resume DIR``, settings not typed on this command line come from the saved run,
    so ``train TASK --resume DIR`` continues it without repeating its flags.
    """
    strategy, es, engine, options = (getattr(args, "run.strategy"), collect(args, "es"), collect(args, "engine"),
                                     collect(args, "options"))
    resume = engine.get("resume")
    if resume and has_checkpoint(resume):
        saved, typed = load_checkpoint_config(resume), explicit(args)
        if saved.get("task") == args.task:
            if "run.strategy" not in typed:
                strategy = saved["strategy"]
            es.update({k: v for k, v in saved["es"].items() if f"es.{k}" not in typed})
            options.update({k: v for k, v in saved["options"].items() if f"options.{k}" not in typed})
            engine.update({k: saved["engine"][k] for k in RESUMED_ENGINE if f"engine.{k}" not in typed})
    return make_config(args.task, strategy=strategy, es=es, engine=engine, options=options)


def run(args: argparse.Namespace) -> int:
    prog = f"hyperscalees train {args.task}"
    try:
        cfg = config_from_args(args)
    except (ValueError, RuntimeError) as e:
        return fail(prog, str(e))
    try:
        summary = run_engine(cfg, LocalBackend())
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        return fail(prog, str(e))
    for note in summary["notes"]:
        print(f"note: {note}", file=sys.stderr)
    if cfg.engine.json:
        print(json.dumps(summary))
    else:
        print(format_summary(summary))
    return 0


def format_summary(s: dict) -> str:
    metrics = "  ".join(f"{k}={v:.4g}" for k, v in s["metrics"].items())
    lines = [f"{s['task']} ({s['strategy']}): {s['steps']}/{s['target_steps']} steps in {s['wall_time']:.1f}s"
             f" [stopped by {s['stopped']}]", f"  {metrics}  solved={s['solved']}"]
    if s["paths"]:
        lines.append(f"  outputs in {s['paths']['out']}")
    return "\n".join(lines)
