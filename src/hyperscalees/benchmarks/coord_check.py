"""Question: does every layer's activation size stay flat in width during training (muP's coordinate check)?

Tensor Programs V's test of a parametrisation: train the same model at several widths for a
few steps with one set of hyper-parameters and record, at every step t, the mean |output| of
every module on a fixed batch. Under muP each curve is flat in width at every t; under the
standard parametrisation a large enough lr makes the layers whose fan-in is a width blow up
(their output grows like a power of the width). The number reported per module and step is
the least-squares slope of log mean|output| against log width: 0 is flat, 0.5 is √width.

At a small lr the standard parametrisation is flat too (nothing has moved yet), so the check
is only worth something at an lr where the standard run visibly blows up; the defaults
(``DEFAULT_LR``) are such lrs. ``hyperscalees coord-check`` is the command.

"Hidden" modules are those whose output is a width-sized vector (input and hidden layers,
embeddings, norms); the readout's logits are reported beside them (under muP they start at
Θ(1/√m) by design and are Θ(1) only once training has moved them).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch

from ..engine.plotting import pyplot, save_figure
from .base import environment
from .width_models import batch, prepare

# (model, optimizer) -> an lr at which the standard parametrisation visibly blows up within 5 steps
# (measured: bench/results/cpu/coord_check_*.txt); the base width trains at it
DEFAULT_LR = {("mlp", "es"): 0.02, ("mlp", "adam"): 0.01, ("mlp", "sgd"): 0.1,
              ("transformer", "es"): 0.02, ("transformer", "adam"): 0.01, ("transformer", "sgd"): 2.0}
# model -> (rows of the batch, ES population, seeds): the transformer's 1024-wide ES step is the cost
SIZES = {"mlp": (32, 32, 3), "transformer": (4, 16, 2)}
FLAT = 0.1     # |slope| at or below this is flat (the acceptance bound of issue 23)
HIDDEN_KINDS = ("input", "hidden")


@dataclass
class CoordCheck:
    """What one check measured: ``acts[parametrization][module][width index][t]`` (mean over seeds)."""
    model: str
    optimizer: str
    lr: float
    sigma: float
    widths: list[int]
    base_width: int
    steps: int
    seeds: int
    rows: int = 0
    population: int = 0
    kinds: dict[str, str] = field(default_factory=dict)
    acts: dict = field(default_factory=dict)
    losses: dict = field(default_factory=dict)
    seconds: float = 0.0

    def slopes(self, parametrization: str) -> dict[str, list[float]]:
        """{module: [slope at t = 0 .. steps]}."""
        return {m: [fit_slope(self.widths, [a[t] for a in per_width]) for t in range(self.steps + 1)]
                for m, per_width in self.acts[parametrization].items()}

    def hidden(self) -> list[str]:
        return [m for m, k in self.kinds.items() if k in HIDDEN_KINDS]

    def worst(self, parametrization: str) -> tuple[float, float]:
        """(max |slope|, max slope) over hidden modules at t >= 1 (the finite ones: see ``diverged``)."""
        s = self.slopes(parametrization)
        vals = [v for m in self.hidden() for v in s[m][1:] if math.isfinite(v)]
        return (max(abs(v) for v in vals), max(vals)) if vals else (math.nan, math.nan)

    def diverged(self, parametrization: str) -> list[int]:
        """Widths whose activations overflowed (inf or nan) at some step: no slope is fitted there."""
        return [w for i, w in enumerate(self.widths)
                if any(not math.isfinite(v) for per in self.acts[parametrization].values() for v in per[i])]


def fit_slope(widths: list[int], values: list[float]) -> float:
    """Least-squares slope of log value against log width (nan if a value is not positive and finite)."""
    if any(not (math.isfinite(v) and v > 0) for v in values):
        return math.nan
    xs, ys = [math.log(w) for w in widths], [math.log(v) for v in values]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((a - mx) * (b - my) for a, b in zip(xs, ys)) / sum((a - mx) ** 2 for a in xs)


def record(model, kinds: dict[str, str], x) -> dict[str, float]:
    """Mean |output| of every module in ``kinds`` on the batch ``x`` (one plain forward)."""
    seen = {}
    hooks = [model.get_submodule(m).register_forward_hook(
        lambda mod, args, out, m=m: seen.__setitem__(m, out.detach().abs().mean().item())) for m in kinds]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in hooks:
            h.remove()
    return seen


def run(model: str = "mlp", widths=(64, 128, 256, 512, 1024), optimizer: str = "es",
        parametrizations=("standard", "mup"), steps: int = 5, lr: float | None = None, sigma: float = 0.05,
        base_width: int | None = None, seeds: int | None = None, population: int | None = None,
        rows: int | None = None, log=print) -> CoordCheck:
    """Train at every width and parametrisation for ``steps`` steps; None takes the model's default."""
    widths = sorted(set(widths))
    if len(widths) < 2:
        raise ValueError(f"a slope needs at least two widths, got {widths}")
    if (model, optimizer) not in DEFAULT_LR:
        raise ValueError(f"unknown model or optimizer {model!r}, {optimizer!r}")
    d_rows, d_pop, d_seeds = SIZES[model]
    rows, population, seeds = rows or d_rows, population or d_pop, seeds or d_seeds
    lr = DEFAULT_LR[(model, optimizer)] if lr is None else lr
    base_width = widths[0] if base_width is None else base_width
    cc = CoordCheck(model, optimizer, lr, sigma, widths, base_width, steps, seeds, rows, population)
    x, _ = batch(model, rows)
    start = time.perf_counter()
    for pz in parametrizations:
        per = {}    # (width index, seed) -> {module: [mean |out| at t]}
        cc.losses[pz] = {}
        for i, w in enumerate(widths):
            curves = []
            for seed in range(seeds):
                s = prepare(model, w, base_width, pz, optimizer, lr, sigma, population, rows, seed)
                cc.kinds = s.kinds
                acts, loss = [], []
                for t in range(steps + 1):
                    acts.append(record(s.model, s.kinds, x))
                    if t < steps:
                        loss.append(s.step())
                per[(i, seed)] = acts
                curves.append(loss)
            cc.losses[pz][w] = [sum(c[t] for c in curves) / seeds for t in range(steps)]
            log(f"  {pz} n={w}: loss {cc.losses[pz][w][0]:.3g} -> {cc.losses[pz][w][-1] if steps else math.nan:.3g} "
                f"({time.perf_counter() - start:.0f} s)")
        cc.acts[pz] = {m: [[sum(per[(i, s)][t][m] for s in range(seeds)) / seeds for t in range(steps + 1)]
                           for i in range(len(widths))] for m in cc.kinds}
    cc.seconds = time.perf_counter() - start
    return cc


def cell(slope: float, values: list[float]) -> str:
    """A slope for the table; where none exists, why: "zero" (the module's output is 0 at every
    width, as a zero readout's is at t = 0) or "inf/nan" (it overflowed), never a bare nan."""
    if math.isfinite(slope):
        return f"{slope:>+8.3f}"
    return f"{'zero' if all(v == 0 for v in values) else 'inf/nan':>8}"


def table(cc: CoordCheck) -> str:
    """Slopes per parametrisation, module and step, then the verdict lines."""
    cols = list(range(cc.steps + 1))
    out = [f"# coord-check: slope of log mean|output| vs log width ({cc.model}, {cc.optimizer}, lr {cc.lr:g}"
           f"{f', sigma {cc.sigma:g}' if cc.optimizer == 'es' else ''}, widths {cc.widths}, base {cc.base_width}, "
           f"{cc.seeds} seed(s))"]
    w = max(len(m) for m in [*cc.kinds, "module"]) + 2
    for pz in cc.acts:
        s = cc.slopes(pz)
        out.append(f"{pz:<12}{'module':<{w}}{'kind':<8}" + "".join(f"{'t=' + str(t):>8}" for t in cols))
        for m, k in cc.kinds.items():
            out.append(f"{'':<12}{m:<{w}}{k:<8}" + "".join(cell(v, [a[t] for a in cc.acts[pz][m]])
                                                           for t, v in enumerate(s[m])))
    for pz in cc.acts:
        worst_abs, worst = cc.worst(pz)
        bad = cc.diverged(pz)
        out.append(f"{pz}: hidden modules at t >= 1: max |slope| {worst_abs:.3f}, max slope {worst:+.3f} "
                   f"({'flat' if worst_abs <= FLAT and not bad else 'not flat'} at |slope| <= {FLAT})"
                   + (f"; overflowed (inf/nan) at widths {bad}" if bad else ""))
    return "\n".join(out)


def summary(cc: CoordCheck) -> dict:
    """The JSON record: slopes per parametrisation under keys that say so, the raw curves, the setup."""
    worst = {pz: cc.worst(pz) for pz in cc.acts}
    return {"command": "coord-check", "model": cc.model, "optimizer": cc.optimizer, "lr": cc.lr,
            "sigma": cc.sigma if cc.optimizer == "es" else None, "widths": cc.widths, "base_width": cc.base_width,
            "steps": cc.steps, "seeds": cc.seeds, "rows": cc.rows,
            "population": cc.population if cc.optimizer == "es" else None, "parametrizations": list(cc.acts), "flat_bound": FLAT,
            "kinds": cc.kinds, "hidden_modules": cc.hidden(),
            "slopes": {pz: cc.slopes(pz) for pz in cc.acts},
            "max_abs_hidden_slope_t_ge_1": {pz: v[0] for pz, v in worst.items()},
            "max_hidden_slope_t_ge_1": {pz: v[1] for pz, v in worst.items()},
            "diverged_widths": {pz: cc.diverged(pz) for pz in cc.acts},
            "mean_abs_output": {pz: {m: dict(zip(map(str, cc.widths), per)) for m, per in a.items()}
                                for pz, a in cc.acts.items()},
            "loss": {pz: {str(w): v for w, v in ls.items()} for pz, ls in cc.losses.items()},
            "seconds": cc.seconds, "environment": environment()}


def plot(cc: CoordCheck, path) -> None:
    """Mean |output| against width, log-log: a row per parametrisation, a column per chosen step."""
    plt = pyplot()
    ts = sorted({0, 1, cc.steps // 2, cc.steps} & set(range(cc.steps + 1)))
    pzs = list(cc.acts)
    fig, axes = plt.subplots(len(pzs), len(ts), figsize=(3.2 * len(ts), 2.8 * len(pzs)), squeeze=False,
                             sharex=True)
    for r, pz in enumerate(pzs):
        for c, t in enumerate(ts):
            ax = axes[r][c]
            for m, per in cc.acts[pz].items():
                style = "-" if cc.kinds[m] in HIDDEN_KINDS else "--"
                ax.plot(cc.widths, [a[t] for a in per], style, marker=".", label=f"{m} ({cc.kinds[m]})")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{pz}, t={t}", fontsize=9)
            if r == len(pzs) - 1:
                ax.set_xlabel("width")
            if c == 0:
                ax.set_ylabel("mean |output|")
    axes[0][-1].legend(fontsize=6, loc="best")
    fig.suptitle(f"coord check: {cc.model}, {cc.optimizer}, lr {cc.lr:g}", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=80)
