"""Question: how much does EGGROLL lose by perturbing at low rank instead of full rank?

The seeds' claim (issue 42): "Convergence O(1/r) in the rank, and r = 1 is sufficient". Two parts
measure it, each with antithetic pairs and with independent members (``ESConfig.antithetic``):

- ``train``: EGGROLL at r ∈ {1, 2, 4, 8, 16} and full-rank OpenES, at equal population, on digits,
  the egg and CartPole (the tasks' own settings otherwise, ``engine.run``): the held-out metric at
  every evaluation, against the step and against the seconds. The egg's integer layers need
  σ/√r to be a power of two, so it runs the ranks whose √r is one (1, 4, 16) and says so.
- ``cosine``: on one fixed model and batch (digits' MLP at its initialisation, one minibatch,
  fitness −cross-entropy, the same shaping for every method: ``z_score`` by default, whose mean
  subtraction is the baseline independent members need -- with ``raw`` fitness their estimate
  carries the mean fitness times the noise, which antithetic pairs cancel), each method's estimate ĝ at each population is compared by cosine with (a) the true
  gradient from autograd and (b) a full-rank OpenES estimate at a much larger population (the
  reference, from seeds none of the tested estimates use). Mean and sd over seeds.

How to read it: r = 1 is sufficient if its held-out metric per step (and per second) matches
OpenES's and the higher ranks'. The O(1/r) claim concerns how fast a rank-r estimate approaches
the full-rank one: at a fixed population, the cosine gap ``cos(OpenES) − cos(r)`` should shrink about
as 1/r (``gap_exponent`` ≈ −1, fitted at the largest population); a gap already within the seed
spread at r = 1 says the rank does not matter there. Every cosine should rise with population.

Run: ``hyperscalees bench rank [--quick] [--json] [--plot FILE] [--seeds S ...] [--settings JSON]
[--runs-dir DIR]``; ``--settings`` replaces any key of :func:`configs` (e.g. ``{"tasks": ["digits"]}``).
"""
from __future__ import annotations

import copy
import math
import time

import torch
import torch.nn.functional as F

from ..engine.plotting import pyplot, save_figure
from ..models import mlp
from ..nn.evaluate import evaluate
from ..nn.module_es import EGGROLL, OpenES
from ..tasks.digits import DigitsTask
from .base import Report, environment
from .population import fit_exponent
from .training_curves import check_tasks, mean_sd, noise_label, train, with_settings

QUESTION = "EGGROLL rank r vs full-rank OpenES at equal population: held-out metric per step/second, estimate cosine"
COLUMNS = ["part", "task", "method", "noise", "population", "seeds", "measure", "mean", "sd", "s_per_step"]
INTEGER_TASKS = ("egg",)  # σ/√r must be a power of two: ranks whose √r is not one are skipped


def configs(quick: bool) -> dict:
    if quick:
        return dict(tasks=["digits", "egg", "cartpole"], ranks=[1, 4], antithetic=[True, False],
                    population={"digits": 32, "egg": 16, "cartpole": 16}, steps={"digits": 4, "egg": 3, "cartpole": 3},
                    eval_every={"digits": 2, "egg": 3, "cartpole": 3},
                    options={"egg": {"max_bytes": 1 << 16, "eval_tokens": 512}},
                    cos_populations=[8, 32, 128], cos_reference=2048, cos_seeds=3, cos_hidden=16, cos_batch=32,
                    cos_sigma=0.01, cos_shaping="z_score", chunk=256)
    # at 3 seeds about 30 CPU-minutes for digits, 45 for the egg, 10 for CartPole, 5 for the cosines (docs/guide/claims.md)
    return dict(tasks=["digits", "egg", "cartpole"], ranks=[1, 2, 4, 8, 16], antithetic=[True, False],
                population={"digits": 1024, "egg": 256, "cartpole": 64},
                steps={"digits": 300, "egg": 150, "cartpole": 100}, eval_every={"digits": 10, "egg": 25, "cartpole": 10},
                options={}, cos_populations=[2 ** e for e in range(4, 13)], cos_reference=2 ** 15, cos_seeds=5,
                cos_hidden=64, cos_batch=128, cos_sigma=0.01, cos_shaping="z_score", chunk=512)


def methods_for(task: str, ranks) -> tuple[list[tuple[str, int]], list[int]]:
    """(method, rank) pairs a task runs, and the ranks it cannot run."""
    ok = [r for r in ranks if task not in INTEGER_TASKS or math.isqrt(r) ** 2 == r and r & (r - 1) == 0]
    return [("eggroll", r) for r in ok] + [("openes", 1)], [r for r in ranks if r not in ok]


def label(method: str, rank: int) -> str:
    return f"r={rank}" if method == "eggroll" else "OpenES"


# -- part 1: training -------------------------------------------------------------------------
def train_part(c: dict, seeds, device: str, log, runs_dir=None) -> tuple[list, dict, list]:
    rows, curves, notes = [], {}, []
    for task in c["tasks"]:
        methods, skipped = methods_for(task, c["ranks"])
        if skipped:
            notes.append(f"{task}: ranks {skipped} skipped (integer layers need σ/√r to be a power of two)")
        pop = c["population"][task]
        for method, rank in methods:
            for anti in c["antithetic"]:
                runs = []
                for seed in seeds:
                    es = {"population": pop, "rank": rank, "seed": seed, "antithetic": anti}
                    keep = None if runs_dir is None else \
                        f"{runs_dir}/{task}_{label(method, rank)}_{noise_label(anti)}_seed{seed}"
                    runs.append(train(task, method, es, c["steps"][task], c["eval_every"][task], device,
                                      c["options"].get(task), keep=keep))
                key = f"{task}|{label(method, rank)}|{noise_label(anti)}"
                curves[key] = [r["curve"] for r in runs]
                m, sd = mean_sd(r["final"] for r in runs)
                sps = mean_sd(r["s_per_step"] for r in runs)[0]
                rows.append(["train", task, label(method, rank), noise_label(anti), pop, len(seeds),
                             f"final {runs[0]['metric']}", m, sd, sps])
                log(f"  {key}: {runs[0]['metric']} {m:.4g} ± {sd:.2g}, {sps:.3g} s/step")
    return rows, curves, notes


# -- part 2: the estimate's cosine ------------------------------------------------------------
def fixed_problem(c: dict, device: str):
    """Digits' MLP at its initialisation, one minibatch, fitness −CE per member; its true gradient."""
    task = DigitsTask(seed=0, device=device, options={"hidden": c["cos_hidden"], "batch": c["cos_batch"]})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = mlp([64, c["cos_hidden"], 10], "tanh").to(device)
    x, y = task.batch(0)
    probe = copy.deepcopy(model)
    loss = F.cross_entropy(probe(x), y)
    grads = torch.autograd.grad(loss, list(probe.parameters()))
    names = [n for n, _ in probe.named_parameters()]
    truth = torch.cat([-g.reshape(-1) for g in grads]).double()   # ∇ of the fitness −CE
    return model, (lambda m, lo, hi, step: task.fitness(m, lo, hi, 0)), names, truth


def estimate(model, fitness, names, method: str, rank: int, population: int, antithetic: bool, seed: int,
             sigma: float, chunk: int, shaping: str = "z_score") -> torch.Tensor:
    """One flat ĝ (float64) of ``method`` on the fixed problem."""
    cls = EGGROLL if method == "eggroll" else OpenES
    es = cls(copy.deepcopy(model), population=population, sigma=sigma, rank=rank, seed=seed, shaping=shaping,
             antithetic=antithetic)
    with torch.no_grad():
        g = es.gradient_estimate(evaluate(es, fitness, min(chunk, population)))
    return torch.cat([g[n].reshape(-1) for n in names]).double()


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.dot(a, b) / (a.norm() * b.norm()).clamp_min(1e-300))


def reference(model, fitness, names, c: dict) -> torch.Tensor:
    """Full-rank OpenES at ``cos_reference`` members, averaged over two seeds no tested estimate uses."""
    parts = [estimate(model, fitness, names, "openes", 1, c["cos_reference"], True, 10 ** 6 + s,
                      c["cos_sigma"], c["chunk"], c["cos_shaping"]) for s in range(2)]
    return sum(parts) / len(parts)


def cosine_part(c: dict, device: str, log) -> tuple[list, dict, dict]:
    model, fitness, names, truth = fixed_problem(c, device)
    ref = reference(model, fitness, names, c)
    checks = {"reference_vs_true": cosine(ref, truth), "parameters": int(truth.numel())}
    log(f"  reference (OpenES, {c['cos_reference']} members) vs true gradient: cos {checks['reference_vs_true']:.3f}")
    rows, table = [], {}
    methods = [("eggroll", r) for r in c["ranks"]] + [("openes", 1)]
    for method, rank in methods:
        for anti in c["antithetic"]:
            for pop in c["cos_populations"]:
                est = [estimate(model, fitness, names, method, rank, pop, anti, s, c["cos_sigma"], c["chunk"],
                                c["cos_shaping"])
                       for s in range(c["cos_seeds"])]
                key = (label(method, rank), noise_label(anti), pop)
                table[key] = {"true": mean_sd(cosine(e, truth) for e in est), "ref": mean_sd(cosine(e, ref) for e in est)}
                for what, measure in (("true", "cos vs true gradient"), ("ref", "cos vs full-rank reference")):
                    rows.append(["cosine", "digits-mlp", key[0], key[1], pop, c["cos_seeds"], measure,
                                 *table[key][what], math.nan])
            log(f"  cosine {label(method, rank)}: " + ", ".join(
                f"N={p} {table[(label(method, rank), noise_label(c['antithetic'][0]), p)]['true'][0]:.3f}"
                for p in c["cos_populations"]))
    return rows, table, checks


def rank_summary(table: dict, c: dict) -> dict:
    """The claims' figures: rank-1 vs full rank, the gap exponent in r, cosine rising with N."""
    big, out = max(c["cos_populations"]), {}
    for noise in map(noise_label, c["antithetic"]):
        full = table[("OpenES", noise, big)]["ref"][0]
        gaps = {r: full - table[(f"r={r}", noise, big)]["ref"][0] for r in c["ranks"]}
        pos = [(r, g) for r, g in gaps.items() if g > 0]
        out[noise] = {
            "rank1_over_full_cos_ref": table[("r=1", noise, big)]["ref"][0] / full if full else math.nan,
            "gap_by_rank": gaps,
            "gap_exponent": fit_exponent(*zip(*pos)) if len(pos) >= 2 else math.nan,
            "cos_true_at_largest": {m: table[(m, noise, big)]["true"][0] for m in
                                    [f"r={r}" for r in c["ranks"]] + ["OpenES"]},
            "cos_rises_with_population": {m: table[(m, noise, big)]["true"][0] >
                                          table[(m, noise, min(c["cos_populations"]))]["true"][0]
                                          for m in [f"r={r}" for r in c["ranks"]] + ["OpenES"]},
        }
    return out


def run(quick: bool = False, device: str = "cpu", log=print, seeds=None, plot=None, settings=None,
        runs_dir=None) -> Report:
    c = with_settings(configs(quick), settings)
    check_tasks(c["tasks"], allow_empty=True)  # no tasks: the cosine part alone
    seeds = list(seeds) if seeds else ([0] if quick else [0, 1, 2])
    rep, start = Report("rank", QUESTION, COLUMNS), time.perf_counter()
    train_rows, curves, notes = train_part(c, seeds, device, log, runs_dir) if c["tasks"] else ([], {}, [])
    cos_rows, table, checks = cosine_part(c, device, log)
    rep.rows = train_rows + cos_rows
    rep.summary = {"claim": "convergence O(1/r) in the rank, and r = 1 is sufficient", "seeds": seeds,
                   "by_noise": rank_summary(table, c), **checks,
                   "seconds": time.perf_counter() - start, "environment": environment()}
    rep.details = {"settings": c, "curves": {k: [[list(p) for p in run] for run in v] for k, v in curves.items()}}
    rep.notes += notes + [
        "train: each task's own settings, the population fixed per task, every method at it; mean ± sd over seeds "
        "of the final held-out metric; s_per_step includes the evaluations; curves (step, seconds, metric) in JSON",
        f"cosine: digits MLP 64-{c['cos_hidden']}-10 at init, one batch of {c['cos_batch']}, σ {c['cos_sigma']}, "
        f"shaping {c['cos_shaping']} for all; 'true' = autograd gradient of −CE, 'reference' = OpenES at "
        f"{c['cos_reference']} members (2 seeds); {c['cos_seeds']} seeds per point",
        "gap_exponent: slope of log(cos(OpenES) − cos(r)) against log r at the largest population, vs the reference "
        "(the O(1/r) claim predicts about −1; nan when fewer than two ranks trail OpenES)",
    ]
    if plot:
        draw(curves, table, c, plot)
    return rep


def _mean_curve(runs: list) -> tuple[list, list, list]:
    n = min(len(r) for r in runs)
    cols = [[sum(r[i][j] for r in runs) / len(runs) for i in range(n)] for j in range(3)]
    return cols[0], cols[1], cols[2]


def draw(curves: dict, table: dict, c: dict, path) -> None:
    """Metric vs step (top) and vs seconds (bottom) per task; cosine vs population in the last column."""
    plt = pyplot()
    tasks = list(c["tasks"])
    fig, axes = plt.subplots(2, len(tasks) + 1, figsize=(3.8 * (len(tasks) + 1), 6.4), squeeze=False)
    for k, task in enumerate(tasks):
        for key, runs in curves.items():
            t, method, noise = key.split("|")
            if t != task or not runs or not all(runs):
                continue
            steps, secs, vals = _mean_curve(runs)
            style = "-" if noise == "antithetic" else "--"
            axes[0][k].plot(steps, vals, style, label=f"{method} {noise[:4]}")
            axes[1][k].plot(secs, vals, style)
        axes[0][k].set_title(task, fontsize=9)
        axes[0][k].set_xlabel("step")
        axes[1][k].set_xlabel("seconds")
        axes[0][k].legend(fontsize=6)
    for row, what in enumerate(("true", "ref")):
        ax = axes[row][-1]
        for method, noise in dict.fromkeys((m, n) for m, n, _ in table):
            pts = sorted((p, v[what][0]) for (m, n, p), v in table.items() if m == method and n == noise)
            ax.plot(*zip(*pts), "-" if noise == "antithetic" else "--", label=f"{method} {noise[:4]}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("population")
        ax.set_ylabel(f"cos vs {'true gradient' if what == 'true' else 'full-rank reference'}")
    axes[0][-1].set_title("estimate cosine (digits MLP, fixed batch)", fontsize=9)
    fig.suptitle("claim: convergence O(1/r) in the rank, r = 1 sufficient", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=80)
