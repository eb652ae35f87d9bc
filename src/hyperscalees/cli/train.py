"""``hyperscalees train TASK [flags]``: build a ``TrainConfig`` from flags and run the engine.

Each task is a sub-command, so ``train digits --help`` shows that task's defaults and its
own options. ES flags come from ``ESConfig``, engine flags from ``EngineConfig``, task flags
from the task's ``Options`` dataclass. Ctrl-C or SIGTERM ends the run after the current
step with a checkpoint and exits 130 or 143.
"""
from __future__ import annotations

import argparse
import contextlib
import math
from dataclasses import fields
import signal
import sys

import torch

from ..distributed import BACKENDS, backend_factory
from ..distributed.ray_checks import check_ray_settings
from ..engine import STRATEGIES, EngineConfig, TrainConfig, has_checkpoint, make_config, run as run_engine, saved_config
from ..noise.distributions import DISTRIBUTIONS, INT_SCALE
from ..ops.precision import PRECISIONS
from ..strategies.config import ESTIMATORS, ESConfig
from ..strategies.rules.optimizers import OPTIMIZERS
from ..strategies.rules import RULES
from ..strategies.shaping import GROUP_FITNESS, SHAPINGS
from ..engine.backprop import run_backprop
from ..engine.config import ENGINE_TASK_DEFAULTS
from ..tasks import TASKS, get_task
from .train_help import HELP, METAVARS, epilog
from .base import (StoreExplicit, add_dataclass_flags, collect, explicit, fail, flag_name, json_line, name_flags,
                   os_error, plain)

TRAINERS = ("es", "backprop")
BACKPROP_LR = 3e-3  # Adam's usual step for small float models, used by --trainer backprop unless --lr is given
# the rest is about this invocation
RESUMED_ENGINE = ("steps", "eval_every", "checkpoint_every", "checkpoint_minutes", "snapshot_minutes", "chunk",
                  "restart_patience", "restart_min_delta")
# choices read from the registries when the flags are built (a registered rule or shaping appears)
ES_CHOICES = {"optimizer": lambda: tuple(OPTIMIZERS), "shaping": lambda: tuple(sorted(SHAPINGS)),
              "distribution": DISTRIBUTIONS, "estimator": ESTIMATORS, "group_fitness": GROUP_FITNESS,
              "update_rule": lambda: tuple(RULES), "update_precision": PRECISIONS}
TASK_WIDTH = object()  # what a bare --mup stands for: the task's default width (not a str: argparse would parse it)
def register(subparsers) -> None:
    p = subparsers.add_parser("train", help="train a task with ES", formatter_class=argparse.RawDescriptionHelpFormatter,
                              description="Train TASK with evolution strategies; `train TASK --help` lists its flags, "
                                          "its options and examples.",
                              epilog="examples:\n  hyperscalees train xor           # seconds; solves XOR\n"
                                     "  hyperscalees train digits --help  # a task's flags, options and examples")
    tasks = p.add_subparsers(dest="task", required=True, metavar="TASK",
                             help="one of: " + ", ".join(TASKS))
    for name, cls in TASKS.items():
        doc = plain((cls.__doc__ or "").strip())
        tp = tasks.add_parser(name, help=doc.splitlines()[0], description=doc, epilog=epilog(cls),
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              usage=f"hyperscalees train {name} [FLAGS]  (flags below; examples at the end)")
        add_task_flags(tp, cls)
        tp.set_defaults(func=run)
    p.set_defaults(func=run)


def add_task_flags(parser: argparse.ArgumentParser, task_cls) -> None:
    """All flags of ``train TASK``: the task's options first (what a user of one task looks for),
    then strategy, ES, engine and distributed flags (names never collide)."""
    parser._optionals.title = f"{task_cls.name} options"  # argparse lists its own group first: the task's
    task_flags = add_dataclass_flags(parser, task_cls.Options, "options")  # help and choices: the task's own fields
    run = parser.add_argument_group("run")
    run.add_argument("--strategy", dest="run.strategy", action=StoreExplicit, choices=tuple(STRATEGIES),
                        default="eggroll", help="eggroll (low-rank) or open_es (full-rank) (default: eggroll)")
    trainers = TRAINERS if hasattr(task_cls, "loss") else ("es",)  # backprop needs a differentiable loss
    run.add_argument("--trainer", dest="run.trainer", action=StoreExplicit, choices=trainers, default="es",
                        help="es: evolution strategies" + ("; backprop: Adam on the task's differentiable loss, the "
                                                           "float reference (lr defaults to 3e-3 then)"
                                                           if len(trainers) > 1 else "") + " (default: es)")
    add_mup_flag(run, task_cls)
    run.add_argument("--budget-minutes", dest="run.budget_minutes", action=StoreExplicit, type=float,
                        default=None, metavar="MINUTES", help="wall-clock budget in minutes (--time-budget MINUTES·60)")
    es = parser.add_argument_group("evolution strategy")
    flags = add_dataclass_flags(es, ESConfig, "es", defaults=task_cls.defaults, choices=ES_CHOICES, helps=HELP)
    eng = parser.add_argument_group("engine")
    task_engine = {k: task_cls.defaults.get(k, getattr(EngineConfig, k)) for k in ENGINE_TASK_DEFAULTS}
    flags += add_dataclass_flags(eng, EngineConfig, "engine", defaults={"steps": task_cls.defaults.get("steps"),
                                                                        **task_engine},
                                 helps=HELP, metavars=METAVARS)
    eng.add_argument("--chunk-size", dest="engine.chunk", action=StoreExplicit, type=int, default=argparse.SUPPRESS,
                     metavar="N", help="same as --chunk")
    dist = parser.add_argument_group("distributed")
    dist.add_argument("--backend", dest="run.backend", action=StoreExplicit, choices=tuple(BACKENDS), default="local",
                      help="where members are evaluated: local (this process) or ray (worker actors) (default: local)")
    for backend in BACKENDS.values():
        if getattr(backend, "Config", None) is not None:
            flags += add_dataclass_flags(dist, backend.Config, "backend", helps=HELP, skip=("startup_timeout",),
                                         metavars={"address": "auto|HOST:PORT", "temp_dir": "DIR"})
    clash = sorted(set(task_flags) & set(flags))
    assert not clash, f"task option(s) {clash} of {task_cls.name} collide with core flags"


def add_mup_flag(parser: argparse.ArgumentParser, task_cls) -> None:
    """``--mup [BASE]``: muP anchored at BASE, by default the task's default width (where its σ and
    lr were tuned). Every task has the flag, so one whose model has no width refuses it by name."""
    opt = task_cls.width_option
    if opt is None:
        text = f"muP width transfer: not for {task_cls.name} (its model has no width option)"
    else:
        base = next(f.default for f in fields(task_cls.Options) if f.name == opt)
        text = (f"train under muP anchored at width BASE of --{opt.replace('_', '-')} (default: {base}, where "
                f"{task_cls.name}'s σ and lr were tuned): σ and lr per parameter scale with width, so they carry over")
    parser.add_argument("--mup", dest="run.mup", action=StoreExplicit, type=int, nargs="?", const=TASK_WIDTH, default=None,
                        metavar="BASE", help=text)


def mup_base(args: argparse.Namespace, task_cls) -> int | None:
    """The base width ``--mup [BASE]`` asks for, or None without the flag."""
    base = getattr(args, "run.mup", None)
    if base is None:
        return None
    if task_cls.width_option is None:
        raise ValueError(f"--mup does not apply to {task_cls.name}: its model has no width option (muP applies to "
                         f"{', '.join(n for n, t in TASKS.items() if t.width_option is not None)})")
    if base is TASK_WIDTH:
        return next(f.default for f in fields(task_cls.Options) if f.name == task_cls.width_option)
    return base


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The ``TrainConfig`` the parsed flags describe (raises ValueError on invalid values).

    With ``--resume DIR``, settings not typed on this command line come from the saved run,
    so ``train TASK --resume DIR`` continues it without repeating its flags.
    """
    strategy, es, engine, options = (getattr(args, "run.strategy"), collect(args, "es"), collect(args, "engine"),
                                     collect(args, "options"))
    typed = explicit(args)
    strategy = strategy if "run.strategy" in typed else None  # untyped: the task's options choose (a preset)
    task_cls = get_task(args.task)
    given = {k: v for k, v in options.items() if f"options.{k}" in typed}
    options.update({k: v for k, v in task_cls.option_defaults(given).items() if f"options.{k}" not in typed})
    es.update({k: v for k, v in task_cls.model_es_defaults(options).items() if f"es.{k}" not in typed})
    engine.update({k: v for k, v in task_cls.engine_defaults(options).items() if f"engine.{k}" not in typed})
    minutes = getattr(args, "run.budget_minutes", None)
    if minutes is not None:
        if "engine.time_budget" in typed:
            raise ValueError("give --budget-minutes or --time-budget, not both")
        if not (math.isfinite(minutes) and minutes > 0):
            raise ValueError(f"budget_minutes must be a finite number > 0, got {minutes!r}")
        engine["time_budget"] = 60.0 * minutes
    mup = mup_base(args, task_cls)
    resume = engine.get("resume")
    if resume and has_checkpoint(resume):
        saved, typed = saved_config(resume).to_dict(), explicit(args)
        if saved["task"] == args.task:
            if "run.strategy" not in typed:
                strategy = saved["strategy"]
            es.update({k: v for k, v in saved["es"].items() if f"es.{k}" not in typed})
            options.update({k: v for k, v in saved["options"].items() if f"options.{k}" not in typed})
            engine.update({k: saved["engine"][k] for k in RESUMED_ENGINE  # a key an older run lacks: the default
                           if f"engine.{k}" not in typed and k in saved["engine"]})
            mup = mup if "run.mup" in typed else saved.get("mup_base")
    return make_config(args.task, strategy=strategy, es=es, engine=engine, options=options, mup_base=mup)


def run(args: argparse.Namespace) -> int:
    prog = f"hyperscalees train {args.task}"
    try:
        cfg = config_from_args(args)
    except (ValueError, RuntimeError) as e:
        return fail(prog, name_flags(str(e), field_flags(get_task(args.task))))
    except OSError as e:
        return fail(prog, os_error(e))
    try:
        refuse_inapplicable(args, cfg)
        backend = backend_from_args(args)
    except (ValueError, TypeError) as e:
        return fail(prog, str(e))
    task_cls = get_task(args.task)
    from_model = ({f"es.{k}" for k in task_cls.model_es_defaults(cfg.options)}  # chosen for the model / env
                  | {f"engine.{k}" for k in task_cls.engine_defaults(cfg.options)}
                  | {f"options.{k}" for k in task_cls.option_defaults(cfg.options)})
    notes = start_notes(cfg, explicit(args) | from_model)
    # stdout carries the summary alone: what Ray's workers (or anything else) print goes to stderr
    quiet = contextlib.redirect_stdout(sys.stderr) if cfg.engine.json or getattr(args, "run.backend") != "local" \
        else contextlib.nullcontext()
    try:
        with quiet:
            summary = _train(args, cfg, backend, notes)
    except (ValueError, FileNotFoundError, RuntimeError, ImportError) as e:
        return fail(prog, str(e))
    except OSError as e:
        return fail(prog, os_error(e))
    for note in summary["notes"]:
        print(f"note: {note}", file=sys.stderr)
    print(json_line(summary) if cfg.engine.json else format_summary(summary))
    if summary["signal"]:
        print(interrupted_message(summary), file=sys.stderr)
        return 128 + signal.Signals[summary["signal"]].value
    return 0


def _train(args: argparse.Namespace, cfg: TrainConfig, backend, notes: list[str]) -> dict:
    def say_notes(more: list[str] = ()):  # once the run is built: not before an error that would make them moot
        for note in [*notes, *more]:
            print(f"note: {note}", file=sys.stderr)

    if getattr(args, "run.trainer", "es") == "backprop":
        lr = cfg.es.lr if "es.lr" in explicit(args) else BACKPROP_LR
        say_notes()
        return run_backprop(cfg, lr)
    return run_engine(cfg, backend, on_start=say_notes)


def refuse_inapplicable(args: argparse.Namespace, cfg: TrainConfig) -> None:
    """Refuse a typed flag the run would silently ignore (one line naming it)."""
    typed = explicit(args)
    if getattr(args, "run.trainer", "es") == "backprop":
        stray = sorted(k[3:] for k in typed if k.startswith("es.") and k not in ("es.lr", "es.seed"))
        stray += sorted(k[len("backend."):] for k in typed if k.startswith("backend."))
        stray += ["backend"] * ("run.backend" in typed and getattr(args, "run.backend") != "local")
        stray += ["mup"] * ("run.mup" in typed)
        if stray:
            raise ValueError(f"--{stray[0].replace('_', '-')} does not apply to --trainer backprop (it trains "
                             "in-process by gradient with Adam: only --lr and --seed of the ES flags apply)")
    if "es.optimizer" in typed and cfg.es.update_rule != "optimizer":
        raise ValueError(f"--optimizer {cfg.es.optimizer} does not apply: this run's update rule is "
                         f"{cfg.es.update_rule!r}, not a torch optimizer (add --update-rule optimizer to use one)")


def field_flags(task_cls) -> dict[str, str]:
    """Every config field ``train TASK`` has a flag for, and that flag."""
    parts = [ESConfig, EngineConfig, task_cls.Options] + [b.Config for b in BACKENDS.values()
                                                          if getattr(b, "Config", None) is not None]
    return {f.name: flag_name(f.name) for cls in parts for f in fields(cls)} | {"mup_base": "--mup"}


def backend_from_args(args: argparse.Namespace):
    """``recipe -> backend`` for the backend ``--backend`` names, configured by its flags
    (checked now; a flag of another backend is refused, naming the backend it needs)."""
    name, typed = getattr(args, "run.backend"), explicit(args)
    options = collect(args, "backend")
    own = getattr(BACKENDS[name], "Config", None)
    own = {f.name for f in fields(own)} if own is not None else set()
    stray = sorted(k for k in options if k not in own and f"backend.{k}" in typed)
    if stray:
        needs = [n for n, b in BACKENDS.items() if getattr(b, "Config", None) is not None
                 and stray[0] in {f.name for f in fields(b.Config)}]
        raise ValueError(f"--{stray[0].replace('_', '-')} needs --backend {needs[0] if needs else '?'}")
    factory = backend_factory(name, {k: v for k, v in options.items() if k in own})
    config = getattr(factory, "keywords", {}).get("config")
    if name == "ray":  # before Ray starts: a bad address or a missing GPU is one line, not a hang
        check_ray_settings(config.address, config.gpus_per_worker, config.dashboard, torch.cuda.is_available())
    return factory


def start_notes(cfg: TrainConfig, typed: frozenset[str]) -> list[str]:
    """Things worth knowing before a run starts, one line each."""
    notes = []
    if cfg.mup_base is not None:
        opt = get_task(cfg.task).width_option
        notes.append(f"muP anchored at {opt} {cfg.mup_base} (this run: {cfg.options[opt]}); σ and lr per parameter "
                     "follow mup/rules.py")
    if not (cfg.engine.out or cfg.engine.resume):
        notes.append("no --out given: nothing will be saved (no checkpoint, metrics or curve)")
    if cfg.es.distribution == "int" and "es.sigma" not in typed and not cfg.engine.resume:
        notes.append(f"--distribution int draws values of std ≈ {INT_SCALE}: consider a σ about {INT_SCALE}x "
                     f"smaller than the default (--sigma {cfg.es.sigma / INT_SCALE:g})")
    return notes


def interrupted_message(s: dict) -> str:
    where = (f"checkpoint at step {s['steps']} saved in {s['paths']['out']}; continue with "
             f"`hyperscalees train {s['task']} --resume {s['paths']['out']}`" if s["paths"]
             else "nothing saved (no --out)")
    return f"interrupted by {s['signal']} at step {s['steps']}/{s['target_steps']}: {where}"


def format_summary(s: dict) -> str:
    metrics = "  ".join(f"{k}={v:.4g}" if isinstance(v, (int, float)) else f"{k}={v}"
                        for k, v in s["metrics"].items())
    lines = [f"{s['task']} ({s['strategy']}): {s['steps']}/{s['target_steps']} steps in {s['wall_time']:.1f}s"
             f" [stopped by {s['stopped']}]", f"  {metrics}  solved={s['solved']}"]
    if s["paths"]:
        lines.append(f"  outputs in {s['paths']['out']}")
    return "\n".join(lines)
