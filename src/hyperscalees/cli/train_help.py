"""What ``train TASK --help`` says beyond the flags' own fields: the ES and engine flags' help
(those dataclasses belong to layers below the command line, which owns their wording), the
examples every help ends with, and for ``llm`` the keys ``--task-options`` takes per problem set.
"""
from __future__ import annotations

import textwrap
from dataclasses import MISSING, fields

from ..noise.distributions import INT_SCALE
from ..tasks.problems import PROBLEM_SETS
from .base import plain

HELP = {
    # evolution strategy
    "population": "members per step (even: antithetic pairs)",
    "sigma": f"noise scale σ (with --distribution int, about {INT_SCALE}x smaller)",
    "rank": "rank r of the low-rank perturbations", "lr": "learning rate (finite, > 0)",
    "optimizer": "torch optimizer that applies the ES gradient estimate",
    "seed": "noise, data and init seed",
    "shaping": "how raw fitness becomes update weights (centered_rank: ranks, robust to outliers)",
    "weight_decay": "optimizer weight decay (finite, >= 0)",
    "momentum": "SGD momentum in [0, 1) (sgd only)",
    "lr_decay": "multiply lr by this after every step, in (0, 1]",
    "sigma_decay": "multiply σ by this after every step, in (0, 1]",
    "fp32_masters": "bf16/fp16 weights are stepped through fp32 master copies; --no-fp32-masters adds each step "
                    "to the rounded weights (metrics' update_landed shows what rounding threw away)",
    "tie_sigma_growth": "after a step whose antithetic pairs all tie (no update), multiply σ by this until "
                        "a step does not tie (>= 1; 1: off; one host read per step when on)",
    "noise_reuse": "steps sharing one noise draw (0: one draw for the whole run)",
    "distribution": f"noise distribution, all of std 1 except int (std ≈ {INT_SCALE}, an int8 table): "
                    f"with int use a σ about {INT_SCALE}x smaller",
    "estimator": "mean: the ES estimate; sign: AltEGGROLL's sign(A)·sign(B)ᵀ estimate",
    "baseline_every": "K > 0: members i with i %% K in {0, 1} run unperturbed as a fitness baseline (0: none)",
    "update_chunk": "antithetic pairs regenerated at once in the update; bounds its memory",
    "noise_cache_mib": "MiB of a step's noise kept between chunks and the update (0: always regenerate)",
    # engine
    "steps": "total ES steps (a resumed run continues up to this count)",
    "time_budget": "end the run within SECONDS of wall time, its last validation included (one still running "
                   "then is cut short; lm's test split is scored after)",
    "eval_every": "held-out metrics every K steps",
    "eval_at_start": "held-out metrics before a fresh run's first step as well: its starting point, logged as step 0 "
                     "and as the summary's \"before\", inside --time-budget like every evaluation (on by default for "
                     "llm: --no-eval-at-start skips it)",
    "checkpoint_every": "checkpoint every K steps (0: by time, --checkpoint-minutes)",
    "checkpoint_minutes": "also checkpoint whenever MINUTES of wall time passed since the last one (0: never)",
    "snapshot_minutes": ("export the model to OUT/snapshots/step_N every MINUTES of the run's wall clock (0: never), "
                         "to score a curve of held-out metrics against wall time afterwards (train llm)"),
    "restart_patience": "re-draw the weights and start the update rule afresh after K steps without a better "
                        "evaluation, unless the task's target is reached (0: never)",
    "restart_min_delta": "an evaluation is better only if it beats the best since the last (re)start by more than "
                         "this (task metric units)",
    "out": "run directory for checkpoints, metrics and curve.png (default: none, nothing is saved)",
    "resume": "continue the run saved in DIR; flags not given here keep that run's values",
    "device": "torch device (default: cuda if available, else cpu)", "json": "print one JSON summary line",
    "chunk": "members per forward pass (even); bounds memory",
    "group_fitness": "how (P, G) fitness becomes one score per member: mean over G, or shape each group alone",
    "update_rule": "how estimates move the weights (optimizer: a torch.optim optimizer steps -ĝ)",
    "deterministic": "let the update's GEMMs use every CPU thread: faster at T=1 on many cores, but its last "
                     "bits then depend on the thread count (by default they do not)",
    "update_precision": "operands of the update GEMM, accumulated in fp32: auto = the weights' bf16/fp16 or "
                        "TF32 on CUDA, fp32 on CPU",
    "overwrite": "replace a run already saved in --out (without it, that is refused)",
    "tensorboard": "also log each step's metrics as TensorBoard scalars in DIR (pip install 'hyperscalees[tensorboard]')",
    # distributed (--backend ray)
    "workers": "Ray worker actors, each holding a model replica",
    "address": "an existing Ray cluster: auto or HOST:PORT (default: start a local one on 127.0.0.1 only)",
    "gpus_per_worker": "GPUs each worker actor reserves", "cpus_per_worker": "CPUs each worker actor reserves",
    "straggler_timeout": "seconds before a running chunk is also handed to an idle worker "
                         "(default: 3x the median chunk time)",
    "hash_every": "steps between checks that every replica's parameters equal the coordinator's (0: never)",
    "max_restarts": "new actors per worker slot after deaths before continuing with fewer workers",
    "dashboard": "start Ray's dashboard (local Ray only, on 127.0.0.1)",
    "temp_dir": "directory for a local Ray's session files (default: Ray's, /tmp/ray)",
    "in_flight": "chunks a worker is handed at once: 2 queues the next behind the running one (an actor runs its "
                 "calls in order), hiding the round trip between them; 1 waits for each result",
    "group_size": "workers per group coordinator: the driver hands chunks to groups of this many workers, each "
                  "group on one node run by its own coordinator (1: the driver hands every worker its chunks)",
    "shared_replay": "with --group-size K: a group's K workers share one copy of the trained weights in the node's "
                     "memory and each replays 1/K of every update, where each otherwise replays all of it (the "
                     "same bits; needs an update rule that moves each parameter alone: torch's optimizers do)",
    "driver_threads": "torch threads for the driver's own replay of each update; more spin on after it and "
                      "cost the coordinator CPU (default 1, as each worker; the bits do not depend on it)",
    "worker_threads": "torch threads of each worker, for its evaluation and its replay of every update (needs "
                      "--cpus-per-worker at least as many): one worker of K threads per node replays each update once "
                      "for the node's K cores, where K one-thread workers replay it K times",
}
METAVARS = {"checkpoint_minutes": "MINUTES", "snapshot_minutes": "MINUTES", "out": "DIR", "resume": "DIR",
            "time_budget": "SECONDS", "eval_every": "K", "checkpoint_every": "K",
            "steps": "N", "chunk": "N", "device": "DEVICE", "tensorboard": "DIR", "restart_patience": "K",
            "restart_min_delta": "DELTA"}


# what a task needs on top of its defaults for its examples to run (llm: a model to fine-tune)
EXAMPLE_FLAGS = {"llm": "--model smollm2", "rl": "--env CartPole-v1"}


def examples(task_cls) -> list[tuple[str, str]]:
    """(command, what it does) for ``train TASK --help``'s closing examples."""
    name, extra = task_cls.name, EXAMPLE_FLAGS.get(task_cls.name, "")
    run = f"hyperscalees train {name}{' ' + extra if extra else ''}"
    steps = task_cls.defaults.get("steps", 100)
    out = [(run, f"the task's tuned defaults ({steps} steps), nothing saved"),
           (f"{run} --steps 20 --out runs/{name}", "save checkpoints, metrics.csv and curve.png in runs/" + name),
           (f"hyperscalees train {name} --resume runs/{name} --steps 40", "continue that run to step 40"),
           (f"hyperscalees eval runs/{name}", "score the saved model again")]
    if task_cls.width_option is not None:
        flag = "--" + task_cls.width_option.replace("_", "-")
        width = next(f.default for f in fields(task_cls.Options) if f.name == task_cls.width_option)
        out.append((f"{run} {flag} {4 * width} --mup", f"4x wider; muP carries σ and lr over from {flag} {width}"))
    return out


def task_option_keys() -> list[str]:
    """``--task-options`` keys of each llm problem set, with their defaults (read from PROBLEM_SETS)."""
    rows = []
    for name, cls in PROBLEM_SETS.items():
        keys = [f"{f.name}={f.default!r}" for f in fields(cls.Options) if f.default is not MISSING]
        rows.append(textwrap.fill(f"{name}: {', '.join(keys) if keys else '(none)'}", 100, initial_indent="  ",
                                  subsequent_indent="    "))
    return rows


def epilog(task_cls) -> str:
    """The text after ``train TASK --help``'s flags: option-dependent defaults, llm's task-option
    keys, then examples (help always ends with examples)."""
    parts = [plain(task_cls.defaults_help())] if task_cls.defaults_help() else []
    if any(f.name == "task_options" for f in fields(task_cls.Options)):
        parts.append("--task-options keys (JSON) per --task:\n" + "\n".join(task_option_keys()))
    width = max(len(c) for c, _ in examples(task_cls))
    parts.append("examples:\n" + "\n".join(f"  {c:<{width}}  # {w}" for c, w in examples(task_cls)))
    return "\n\n".join(parts)
