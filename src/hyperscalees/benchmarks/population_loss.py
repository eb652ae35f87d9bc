"""Question: does the held-out loss keep falling as the population grows?

The seeds' claim (issue 42): "Loss falls as the population grows, up to 262,144". The egg (the
``lm`` task's integer recurrent model from its bigram start; loss: ``test_bpb``, bits per byte on
the whole test split, scored once at the end) and one MLP task (digits; loss: held-out
cross-entropy) train through ``engine.run`` at populations 2^6 ... 2^18, each with its task's
other settings, ≥ 3 seeds per point, antithetic pairs and independent members alike, in two modes:

- ``steps``: a fixed number of steps: does a larger population buy a better step?
- ``wall``: a fixed wall clock per run (``--budget``): does it still pay once its cost is counted?

A series (task, mode, noise) goes up the populations until the next point would not fit its time:
``point_budget`` seconds for all its seeds (steps mode: the last point's seconds per step, doubled,
times steps and seeds), or fewer than ``min_steps`` steps in the budget (wall mode). Where each
series stopped, and why, is in the summary (``stopped``).

How to read it: the claim holds for a series if the mean loss falls with every doubling
(``falls_fraction`` = 1, ``slope_per_doubling`` < 0) up to its largest population, by more than the
seed spread. A loss that flattens or rises before 2^18 refutes "up to 262,144" on this task at these
settings (the task's lr and σ are fixed; they were chosen at its default population); a series
that stops early neither confirms nor refutes past where it stopped.

Run: ``hyperscalees bench population-loss [--quick] [--json] [--plot FILE] [--seeds S ...]
[--budget SECONDS] [--settings JSON] [--runs-dir DIR]``; ``--settings`` replaces any key of
:func:`configs`, e.g. ``{"tasks": ["digits"], "modes": ["steps"]}``. ``--runs-dir DIR`` keeps every
run's directory and a record of it (:mod:`.run_store`); the same command again with the same DIR
reads the finished runs back (``read_back`` in the summary counts them), so one seed a process
(``--seeds 0``, ``--seeds 1`` ...) and then all seeds together make the same table.
"""
from __future__ import annotations

import math
import os
import time
from datetime import datetime, timezone

from ..engine.plotting import pyplot, save_figure
from .base import BenchSetupError, Report, environment
from .run_store import RunStore
from .training_curves import TASKS, check_tasks, mean_sd, noise_label, train, with_settings

QUESTION = "held-out loss against population (2^6 ... 2^18), fixed steps and fixed wall clock"
COLUMNS = ["task", "mode", "noise", "population", "seeds", "heldout_loss", "sd", "steps", "s_per_step", "seconds"]
MODES = ("steps", "wall")
CLAIM = "loss falls as the population grows, up to 262,144"
FINISHED = ("steps", "time_budget")  # how a run ends by itself (engine/loop.py); anything else is a signal


def configs(quick: bool) -> dict:
    if quick:
        return dict(tasks=["egg", "digits"], modes=list(MODES), exponents=[3, 4], antithetic=[True, False],
                    steps={"digits": 3, "egg": 2}, budget=0.4, point_budget=60.0, min_steps=2,
                    chunk={"digits": 4096, "egg": 1024}, options={"egg": {"max_bytes": 1 << 16, "eval_tokens": 512}})
    # a point (3 seeds) within about 20 CPU-minutes: 300 s per wall-clock run; see docs/guide/claims.md
    return dict(tasks=["egg", "digits"], modes=list(MODES), exponents=list(range(6, 19)), antithetic=[True, False],
                steps={"digits": 200, "egg": 100}, budget=300.0, point_budget=1200.0, min_steps=5,
                chunk={"digits": 4096, "egg": 1024}, options={})


def check(c: dict, seeds) -> None:
    check_tasks(c["tasks"], allowed=tuple(t for t in TASKS if TASKS[t]["loss"]))
    bad = [m for m in c["modes"] if m not in MODES]
    if bad or not c["modes"]:
        raise BenchSetupError(f"--settings: unknown mode {bad[0] if bad else c['modes']!r}; choose from {list(MODES)}")
    if not c["exponents"] or any(not isinstance(e, int) or not 1 <= e <= 30 for e in c["exponents"]):
        raise BenchSetupError(f"--settings: exponents must be whole numbers in 1 ... 30, got {c['exponents']!r}")
    if not (isinstance(c["budget"], (int, float)) and math.isfinite(c["budget"]) and c["budget"] > 0):
        raise BenchSetupError(f"budget must be a number of seconds > 0, got {c['budget']!r}")
    if not seeds:
        raise BenchSetupError("--seeds: at least one seed")


def point(task: str, mode: str, anti: bool, pop: int, seeds, c: dict, device: str, store: RunStore) -> dict:
    """Every seed's run at one population; the mean and sd of the held-out loss."""
    runs = [seed_run(task, mode, anti, pop, seed, c, device, store) for seed in seeds]
    loss, sd = mean_sd(r["loss"] for r in runs)
    return {"loss": loss, "sd": sd, "losses": [r["loss"] for r in runs],
            "steps": mean_sd(r["steps"] for r in runs)[0], "s_per_step": mean_sd(r["s_per_step"] for r in runs)[0],
            "seconds": sum(r["seconds"] for r in runs), "read_back": sum(r["read_back"] for r in runs)}


def seed_run(task: str, mode: str, anti: bool, pop: int, seed: int, c: dict, device: str, store: RunStore) -> dict:
    """One seed's run at one population, or its record read back from ``--runs-dir`` (kept when it ended,
    with the date and the load it ran under), so a series of hours survives a kill and splits across
    sessions, or across processes a seed each."""
    name = f"{task}_{mode}_{noise_label(anti)}_N{pop}_seed{seed}"
    steps = c["steps"][task] if mode == "steps" else 10 ** 9
    chunk = min(pop, c["chunk"][task])
    key = {"task": task, "mode": mode, "antithetic": anti, "population": pop, "seed": seed, "chunk": chunk,
           "options": c["options"].get(task), **({"steps": steps} if mode == "steps" else {"budget_s": c["budget"]})}
    saved = store.load(name, key)
    if saved is not None:
        return {**saved, "read_back": 1}
    started, load = datetime.now(timezone.utc).isoformat(timespec="seconds"), os.getloadavg()
    keep = None if store.folder is None else store.folder / name
    r = train(task, "eggroll", {"population": pop, "seed": seed, "antithetic": anti}, steps, steps, device,
              c["options"].get(task), time_budget=c["budget"] if mode == "wall" else None, keep=keep, chunk=chunk)
    if r["stopped"] not in FINISHED:  # SIGINT/SIGTERM: a cut run is no record, and the series stops as asked
        kept = f"; the finished runs are kept in {store.folder}, and the same command again goes on" if keep else ""
        raise BenchSetupError(f"{name}: stopped by {r['stopped']} after {r['steps']} steps, not recorded{kept}")
    record = {k: r[k] for k in ("loss", "steps", "s_per_step", "seconds")} | {"started": started, "load": load}
    store.save(name, key, record)
    return {**record, "read_back": 0}


def too_long(mode: str, last: dict | None, c: dict, task: str, seeds) -> str | None:
    """Why the next (doubled) population would not fit its time, or None."""
    if last is None or not math.isfinite(last["s_per_step"]):
        return None
    next_step = 2 * last["s_per_step"]
    if mode == "steps" and next_step * c["steps"][task] * len(seeds) > c["point_budget"]:
        return (f"{len(seeds)} seeds x {c['steps'][task]} steps at about {next_step:.3g} s a step would take over "
                f"{c['point_budget']:.0f} s")
    if mode == "wall" and next_step * c["min_steps"] > c["budget"]:
        return f"fewer than {c['min_steps']} steps of about {next_step:.3g} s would fit in {c['budget']:g} s"
    return None


def series(task: str, mode: str, anti: bool, seeds, c: dict, device: str, log, store: RunStore) -> dict:
    """One (task, mode, noise) up the populations until the next point would not fit its time."""
    points, last, stopped = {}, None, None
    for e in c["exponents"]:
        pop = 2 ** e
        why = too_long(mode, last, c, task, seeds)
        if why:
            stopped = {"before": pop, "why": why}
            log(f"  {task} {mode} {noise_label(anti)}: stops before N=2^{e}: {why}")
            break
        last = points[pop] = point(task, mode, anti, pop, seeds, c, device, store)
        log(f"  {task} {mode} {noise_label(anti)} N=2^{e}: loss {last['loss']:.4g} ± {last['sd']:.2g} "
            f"({last['steps']:.0f} steps, {last['s_per_step']:.3g} s/step)")
    return {"points": points, "stopped": stopped}


def least_squares_slope(xs, ys) -> float:
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((a - mx) * (b - my) for a, b in zip(xs, ys)) / sum((a - mx) ** 2 for a in xs)


def verdict(points: dict) -> dict:
    """Does the mean loss fall with each doubling? The fitted slope per doubling, the best population."""
    ns = sorted(p for p in points if math.isfinite(points[p]["loss"]))
    losses = [points[n]["loss"] for n in ns]
    falls = [b < a for a, b in zip(losses, losses[1:])]
    slope = least_squares_slope([math.log2(n) for n in ns], losses) if len(ns) >= 2 else math.nan
    return {"largest_population": max(ns) if ns else 0,
            "best_population": ns[min(range(len(ns)), key=lambda i: losses[i])] if ns else None,
            "falls_fraction": sum(falls) / len(falls) if falls else math.nan, "slope_per_doubling": slope}


def run(quick: bool = False, device: str = "cpu", log=print, seeds=None, plot=None, settings=None, budget=None,
        runs_dir=None) -> Report:
    c = with_settings(configs(quick), settings)
    if budget is not None:
        c["budget"] = budget
    seeds = list(seeds) if seeds else [0, 1, 2]
    check(c, seeds)
    rep, start, results = Report("population-loss", QUESTION, COLUMNS), time.perf_counter(), {}
    store = RunStore(runs_dir)
    for task in c["tasks"]:
        for mode in c["modes"]:
            for anti in c["antithetic"]:
                s = results[(task, mode, noise_label(anti))] = series(task, mode, anti, seeds, c, device, log, store)
                for pop, p in s["points"].items():
                    rep.rows.append([task, mode, noise_label(anti), pop, len(seeds), p["loss"], p["sd"], p["steps"],
                                     p["s_per_step"], p["seconds"]])
    key = lambda k: "|".join(k)
    rep.summary = {"claim": CLAIM, "seeds": seeds, "loss": {t: TASKS[t]["loss"] for t in c["tasks"]},
                   "verdict": {key(k): verdict(s["points"]) for k, s in results.items()},
                   "stopped": {key(k): s["stopped"] for k, s in results.items()},
                   "steps": c["steps"], "budget_s": c["budget"], "point_budget_s": c["point_budget"],
                   "read_back": sum(p["read_back"] for s in results.values() for p in s["points"].values()),
                   "seconds": time.perf_counter() - start, "environment": environment()}
    rep.details = {"settings": c, "losses": {key(k): {str(n): p["losses"] for n, p in s["points"].items()}
                                              for k, s in results.items()}}
    rep.notes += [
        "heldout_loss: egg test_bpb (whole test split, once at the end), digits held-out cross-entropy; mean and "
        "sd over the seeds; each task's own lr, σ and rank at every population",
        f"steps mode: {c['steps']} steps; wall mode: {c['budget']:g} s per run (steps = how many fitted); "
        "s_per_step includes the evaluations",
        "slope_per_doubling: least-squares change of the mean loss per doubling of N (< 0: falls); "
        "falls_fraction: share of doublings whose mean loss fell",
    ]
    if plot:
        draw(results, c, plot)
    return rep


def draw(results: dict, c: dict, path) -> None:
    """Held-out loss against population (log2), a column per task and a row per mode; the claim beside."""
    plt = pyplot()
    width = max(6.4, 4.6 * len(c["tasks"]))  # one column still holds the claim's title
    fig, axes = plt.subplots(len(c["modes"]), len(c["tasks"]), figsize=(width, 3.4 * len(c["modes"])), squeeze=False)
    for (task, mode, noise), s in results.items():
        ax = axes[c["modes"].index(mode)][c["tasks"].index(task)]
        ns = sorted(s["points"])
        if ns:
            ax.errorbar(ns, [s["points"][n]["loss"] for n in ns], yerr=[s["points"][n]["sd"] for n in ns],
                        marker=".", capsize=2, label=noise)
        ax.axvline(2 ** 18, color="grey", lw=0.6, ls=":")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("population")
        ax.set_ylabel(TASKS[task]["loss"])
        what = f"{c['steps'][task]} steps" if mode == "steps" else f"{c['budget']:g} s per run"
        ax.set_title(f"{task}, {what}", fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle(f"seeds' claim: {CLAIM} (dotted line: 2^18)", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=80)
