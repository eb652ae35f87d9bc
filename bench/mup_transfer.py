"""Question: is the hyper-parameter that is best at a small width still best at a large one?

Tensor Programs V's Figure 1 for the models of ``hyperscalees.benchmarks.width_models``: the deep MLP
(16→n→n→n→n→10, ReLU, regression) or the small transformer LM (``models.TinyLM``, 2 blocks, head
dimension 64). At each width, train once per value of a log2 grid and keep the final training loss;
the best value per width is the grid point with the lowest loss. Under muP the best value should stay
put as width grows (issue 42: within a factor 2 across at least 32× in width); under the standard
parametrisation it drifts (down, for lr). The sweeps (``--sweeps``):

- ``adam_lr``: Adam's lr; ``es_lr``: ES's lr at σ 0.05; ``es_sigma``: ES's σ at lr 2^-6 (ES is
  EGGROLL rank 1, 32 members, driving Adam) -- the default three;
- ``adam_beta1``, ``adam_beta2``: Adam's β at a fixed lr (``--lr``), on a grid of 1-β = 2^-k;
- ``adam_decay``: the lr schedule, an exponential decay to a final fraction 2^-k of ``--lr``;
- ``adam_init``: the init variance, a multiplier 2^k on every random weight's base-width std, the
  other widths following muP's per-layer rule (``mup.init_per_layer``), at ``--lr``.

ezmup (cloneofsimo/ezmup) claims transfer across 64× in width and of Adam's β, the schedule and the
init variance; ``docs/guide/mup.md`` sets what these sweeps measured beside those claims.

One of the project's studies (the muP guide's transfer figures), run from a source checkout:

    python bench/mup_transfer.py [--quick] [--json] [--plot FILE] [--seeds S ...] [--model mlp|transformer]
        [--widths N ...] [--sweeps NAME ...] [--steps K] [--lr LR] [--grid V ...]

Each point is the mean final loss over the seeds (default 0). The default (MLP, widths 64, 256, 1024,
the three default sweeps) takes about 5 minutes a seed on one idle CPU core. ``hyperscalees
coord-check`` is the check a user runs on their own model; this sweep is the evidence behind it.
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import study_cli
import torch
from hyperscalees.benchmarks.base import Report, environment
from hyperscalees.benchmarks.width_models import MODELS, PARAMETRIZATIONS, batch, build, evaluate, losses, prepare
from hyperscalees.engine.plotting import pyplot, save_figure
from hyperscalees.mup import compare_widths, init_per_layer, mup_groups, torch_groups
from hyperscalees.mup.width import is_constant

QUESTION = "best hyper-parameter per width, standard vs muP: does it transfer from the smallest width to the largest?"
COLUMNS = ["sweep", "parametrization", "width", "best", "best_loss", "losses"]
ES_SIGMA, ES_LR, ADAM_LR, ROWS = 0.05, 2.0 ** -6, 2.0 ** -6, 32
SWEEPS = ("adam lr", "es lr", "es sigma", "adam beta1", "adam beta2", "adam decay", "adam init")
OWN_ADAM = ("adam beta1", "adam beta2", "adam decay", "adam init")   # trained by adam_loss
DEFAULT_SWEEPS = SWEEPS[:3]
# how a swept value is compared across widths: β by 1-β (the averaging horizon), the rest as is
DISTANCE = {"adam beta1": lambda b: 1.0 - b, "adam beta2": lambda b: 1.0 - b}


def grids(quick: bool) -> dict:
    """Every sweep's grid. Adam's lr reaches 2^-14: the standard parametrisation's best falls about
    2× per 2× in width (2^-10 at 1024 from 2^-6 at 64), so a 64× span needs the room. ES's σ grid
    reaches 0.003125: with 0.0125 its lowest point, the best σ at widths 256 and 1024 sat on the
    grid's edge (mup_transfer_2026-11-27.txt)."""
    if quick:
        return {"adam lr": [2.0 ** -9, 2.0 ** -7], "es lr": [2.0 ** -7, 2.0 ** -5], "es sigma": [0.025, 0.1],
                "adam beta1": [0.5, 0.875], "adam beta2": [0.9375, 0.99609375], "adam decay": [1.0, 0.125],
                "adam init": [0.5, 2.0]}
    return {"adam lr": [2.0 ** k for k in range(-14, -3)], "es lr": [2.0 ** k for k in range(-9, -4)],
            "es sigma": [0.003125, 0.00625, 0.0125, 0.025, 0.05, 0.1],
            "adam beta1": [0.0] + [1.0 - 2.0 ** -k for k in range(1, 7)],
            "adam beta2": [1.0 - 2.0 ** -k for k in range(2, 15, 2)],
            "adam decay": [2.0 ** -k for k in range(0, 8)], "adam init": [2.0 ** k for k in range(-3, 3)]}


def configs(quick: bool, model: str = "mlp") -> dict:
    """Widths, steps and grids. ES gets 40 steps (at 20 it had barely moved the loss: 0.85 from 0.92).
    The transformer's widths are multiples of its head dimension (64): heads grow, head_dim stays."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; choose one of {MODELS}")
    steps = {"adam": 4, "es": 3} if quick else {"adam": 30, "es": 40}
    widths = {("mlp", True): (64, 128), ("mlp", False): (64, 256, 1024),
              ("transformer", True): (64, 128), ("transformer", False): (64, 128, 256, 512)}[(model, quick)]
    return dict(model=model, widths=widths, steps=steps, grids=grids(quick))


def adam_loss(model: str, sweep: str, value: float, width: int, base: int, pz: str, steps: int, seed: int,
              lr: float) -> float:
    """Adam with β, a decaying lr or a scaled init: the model ``prepare`` builds under ``pz`` (muP's
    readout multiplier, init, attention scale), trained by its own Adam over muP's groups."""
    s = prepare(model, width, base, pz, "adam", lr, rows=ROWS, seed=seed)
    base_model = build(model, base, seed)
    widths = compare_widths(base_model, s.model)
    if sweep == "adam init":    # each random weight's base std times value, scaled per layer by muP's rule
        stds = {n: value * p.std().item() for n, p in base_model.named_parameters() if p.dim() >= 2
                and not is_constant(p)}
        init_per_layer(s.model, widths, stds, torch.Generator().manual_seed(seed))
    groups = mup_groups(widths, lr, "adam", parametrization=pz)
    betas = (value if sweep == "adam beta1" else 0.9, value if sweep == "adam beta2" else 0.999)
    opt = torch.optim.Adam(torch_groups(s.model, groups), betas=betas)
    final = value if sweep == "adam decay" else 1.0
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: final ** (t / max(steps - 1, 1)))
    x, y = batch(model, ROWS)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        losses(model, s.model(x), y)[0].backward()
        opt.step()
        sched.step()
    return evaluate(model, s.model)


def final_loss(sweep: str, value: float, width: int, base: int, pz: str, steps: int, seed: int = 0,
               model: str = "mlp", lr: float = ADAM_LR) -> float:
    if sweep not in SWEEPS:
        raise ValueError(f"unknown sweep {sweep!r}; choose one of {SWEEPS}")
    if sweep in OWN_ADAM:
        loss = adam_loss(model, sweep, value, width, base, pz, steps, seed, lr)
    else:
        optimizer = sweep.split()[0]
        s = prepare(model, width, base, pz, optimizer, ES_LR if sweep == "es sigma" else value,
                    sigma=value if sweep == "es sigma" else ES_SIGMA, rows=ROWS, seed=seed)
        for _ in range(steps):
            s.step()
        loss = evaluate(model, s.model)
    return loss if math.isfinite(loss) else math.inf


def mean_loss(sweep: str, value: float, width: int, base: int, pz: str, steps: int, seeds, **kw) -> float:
    """The final loss averaged over ``seeds`` (init and noise); inf if any seed overflowed."""
    return sum(final_loss(sweep, value, width, base, pz, steps, s, **kw) for s in seeds) / len(seeds)


def best(grid: list[float], losses: list[float]) -> tuple[float, float]:
    i = min(range(len(grid)), key=lambda j: losses[j])
    return grid[i], losses[i]


def spread(sweep: str, bests: list[float]) -> float:
    """Largest over smallest best value across widths (by 1-β for β): 1 is perfect transfer."""
    d = [DISTANCE.get(sweep, lambda v: v)(b) for b in bests]
    return max(d) / min(d) if min(d) > 0 else math.inf


def _options(c: dict, widths, sweeps, steps, grid=None) -> dict:
    if widths:
        if len(set(widths)) < 2:
            raise ValueError(f"--widths needs at least two distinct widths, got {list(widths)}")
        c["widths"] = tuple(sorted(set(widths)))
    if sweeps:
        bad = [s for s in sweeps if s.replace("_", " ") not in SWEEPS]
        if bad:
            raise ValueError(f"unknown sweep {bad[0]!r}; choose from {[s.replace(' ', '_') for s in SWEEPS]}")
        c["grids"] = {s.replace("_", " "): c["grids"][s.replace("_", " ")] for s in sweeps}
    else:
        c["grids"] = {s: c["grids"][s] for s in DEFAULT_SWEEPS}
    if steps:
        c["steps"] = {"adam": steps, "es": steps}
    if grid:
        c["grids"] = {s: sorted(set(grid)) for s in c["grids"]}
    return c


def sweep_all(c: dict, seeds, lr: float, log) -> dict:
    """{(sweep, parametrisation): {width: [mean loss per grid point]}}."""
    base, start, curves = c["widths"][0], time.perf_counter(), {}
    for sweep, grid in c["grids"].items():
        steps = c["steps"][sweep.split()[0]]
        for pz in PARAMETRIZATIONS:
            curves[(sweep, pz)] = {}
            for w in c["widths"]:
                curves[(sweep, pz)][w] = [mean_loss(sweep, v, w, base, pz, steps, seeds, model=c["model"], lr=lr)
                                          for v in grid]
                b, bl = best(grid, curves[(sweep, pz)][w])
                log(f"  {sweep} {pz} n={w}: best {b:.4g} (loss {bl:.3g}) [{time.perf_counter() - start:.0f} s]")
    return curves


def run(quick: bool = False, device: str = "cpu", log=print, plot: str | None = None, seeds=None,
        model: str = "mlp", widths=None, sweeps=None, steps: int | None = None, lr: float = ADAM_LR,
        grid=None) -> Report:
    c = _options(configs(quick, model), widths, sweeps, steps, grid)
    seeds = list(seeds) if seeds else [0]
    rep = Report("mup-transfer", QUESTION, COLUMNS)
    start = time.perf_counter()
    curves = sweep_all(c, seeds, lr, log)
    per_width, drift, spreads = {}, {}, {}
    for (sweep, pz), per in curves.items():
        grid, key = c["grids"][sweep], f"{sweep} {pz}".replace(" ", "_")
        bests = [best(grid, per[w])[0] for w in c["widths"]]
        for w, b in zip(c["widths"], bests):
            rep.rows.append([sweep, pz, w, b, best(grid, per[w])[1], " ".join(f"{x:.3g}" for x in per[w])])
        per_width[key] = dict(zip(map(str, c["widths"]), bests))
        drift[key] = bests[-1] / bests[0]
        spreads[key] = spread(sweep, bests)
    rep.summary = {
        "model": c["model"], "width_span": c["widths"][-1] / c["widths"][0],
        "best_per_width": per_width, "best_ratio_largest_over_smallest": drift,
        "within_factor_2": {k: 0.5 <= v <= 2.0 for k, v in drift.items()},
        "best_spread_all_widths": spreads, "spread_within_factor_2": {k: v <= 2.0 for k, v in spreads.items()},
        "widths": list(c["widths"]), "steps": c["steps"], "es_sigma_for_lr_sweep": ES_SIGMA,
        "es_lr_for_sigma_sweep": ES_LR, "adam_lr_for_beta_decay_init_sweeps": lr, "seeds": seeds,
        "seconds": time.perf_counter() - start, "environment": environment(),
    }
    rep.details = {"grids": c["grids"], "curves": {f"{s} {p}": {str(w): v for w, v in per.items()}
                                                   for (s, p), per in curves.items()}}
    rep.notes += [f"each point: the training loss on the fixed batch after the last step, averaged over seeds {seeds} "
                  "(init and noise; inf where a seed overflowed); base width = the smallest; spread: largest best "
                  "over smallest across every width (by 1-beta for beta sweeps)"]
    if plot:
        draw(curves, c, plot)
    return rep


def draw(curves: dict, c: dict, path) -> None:
    """Loss against the swept value, one curve per width: a row per parametrisation, a column per sweep."""
    plt = pyplot()
    sweeps = list(c["grids"])
    fig, axes = plt.subplots(len(PARAMETRIZATIONS), len(sweeps), figsize=(3.6 * len(sweeps), 5.6), squeeze=False)
    for r, pz in enumerate(PARAMETRIZATIONS):
        for k, sweep in enumerate(sweeps):
            ax, dist = axes[r][k], DISTANCE.get(sweep, lambda v: v)
            xs = [max(dist(v), 2.0 ** -16) for v in c["grids"][sweep]]
            for w, losses_w in curves[(sweep, pz)].items():
                ax.plot(xs, [min(x, 10.0) for x in losses_w], marker=".", label=f"n={w}")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{c['model']} {pz}: {sweep}", fontsize=9)
            ax.set_xlabel("1 - " + sweep.split()[1] if sweep in DISTANCE else sweep.split()[1])
            if k == 0:
                ax.set_ylabel("final train loss (capped at 10)")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=80)


def main(argv=None) -> int:
    p = study_cli.parser("mup_transfer.py", __doc__)
    p.add_argument("--seeds", type=study_cli.seed, nargs="+", default=None, metavar="S",
                   help="seeds each grid point's loss is averaged over (default: 0)")
    p.add_argument("--plot", type=Path, default=None, metavar="FILE",
                   help="draw loss vs the swept value per width to this PNG (needs matplotlib)")
    p.add_argument("--model", choices=MODELS, default=None, help="the deep MLP (default) or the small transformer LM")
    p.add_argument("--widths", type=study_cli.positive_int, nargs="+", default=None, metavar="N",
                   help="widths, the smallest the base (default: 64 256 1024; transformer 64 128 256 512)")
    p.add_argument("--sweeps", nargs="+", default=None, metavar="NAME", choices=[s.replace(" ", "_") for s in SWEEPS],
                   help="what to sweep (default: adam_lr es_lr es_sigma)")
    p.add_argument("--steps", type=study_cli.positive_int, default=None, metavar="K",
                   help="training steps per run, every sweep (default: Adam 30, ES 40)")
    p.add_argument("--lr", type=study_cli.positive_float, default=None, metavar="LR",
                   help="Adam's lr for the beta, decay and init sweeps (default: 2^-6)")
    p.add_argument("--grid", type=study_cli.positive_float, nargs="+", default=None, metavar="V",
                   help="the values every chosen sweep tries, instead of its own grid (e.g. a shorter lr grid)")
    return study_cli.main(p, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
