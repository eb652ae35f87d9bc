"""Question: does ES reach an RL target in less wall clock than PPO and than full-rank OpenES on this machine?

Targets: CartPole-v1 mean eval return >= 475, Pendulum-v1 >= -200. For every env and reported
seed (default 100..109; the per-env ES settings were tuned on seeds 0..4, ``--tuning-seeds``,
which must not overlap the reported ones) one run per method, one after the other (never side
by side; the order rotates with the seed), each under the same wall-clock budget:

- ``es``: ``hyperscalees train rl --env ENV --seed S`` (EGGROLL, the env's tuned defaults: the
  command a newcomer types) in a subprocess (:func:`es_invocation`), stopped with SIGTERM once a
  row of its ``metrics.jsonl`` reaches the threshold.
- ``openes``: the same command with ``--strategy open_es`` (full-rank noise, same population,
  same settings, same evaluator).
- ``ppo``: stable-baselines3 with the rl-baselines3-zoo tuned hyperparameters (not re-tuned
  here: PPO gets the zoo's tuning budget), run by ``bench/ppo_anchor.py`` (beside this file)
  inside a throw-away venv built once under ``~/.cache/hyperscalees/bench-venvs/ppo``. PPO is
  never a dependency of hyperscalees; ``--methods es openes`` runs without it.

One evaluator for all (``tasks/rl/evaluate.py``): ``EVAL_EPISODES`` episodes in the project's
batched env from the run seed's fixed evaluation starts, deterministic actions, at the first
training step at or past every ``EVAL_EVERY_ENV_STEPS`` env steps (an ES step is a whole
population's episodes, so ES is evaluated at most once per step). PPO's policy is scored by
the same code, imported from this checkout (``ppo_anchor.py --hs-src``).

Reported per env and method: the median over seeds of the wall clock to the threshold with
its evaluations (``median_s``) and without them (``train_median_s``; each side's own
evaluation seconds subtracted), the quartiles, seeds reached (a seed that misses counts as
slower than every seed that reached, so the median is None when half or more miss), env
steps/s, and every curve. ``--runs-dir`` saves every run's record as its own JSON file;
``--plot FILE`` draws eval return against wall clock, every seed of every method. PPO's clock
starts at ``learn()`` (after building the model, about 1 s); ES's at the start of the engine run.

One of the project's studies (the RL guide's comparison), run from a source checkout:

    python bench/rl_vs_ppo.py [--quick] [--json] [--seeds 100 ... 109] [--tuning-seeds 0 1 2 3 4]
                              [--methods es openes ppo] [--envs CartPole-v1 Pendulum-v1]
                              [--budget SECONDS] [--threads N] [--plot FILE] [--runs-dir DIR] [--out FILE]
"""
from __future__ import annotations

import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import hyperscalees
import study_cli
from hyperscalees.benchmarks.base import BenchSetupError, Report, environment
from hyperscalees.engine.files import BadFileError
from hyperscalees.engine.metrics import JSONL_FILE, read_rows
from hyperscalees.engine.plotting import pyplot, save_figure
from hyperscalees.noise.native import cache_dir

QUESTION = ("wall clock to an RL target: EGGROLL vs full-rank OpenES vs PPO (stable-baselines3, rl-zoo tuned), "
            "one evaluator, same budget, median over seeds not tuned on")
THRESHOLDS = {"CartPole-v1": 475.0, "Pendulum-v1": -200.0}
PPO_PACKAGES = ("torch==2.13.0", "stable-baselines3", "gymnasium[mujoco]==1.4.0")  # mujoco: HalfCheetah-v5
READY_FILE = ".hyperscalees-ready"  # written last: a venv without it is a broken install and is rebuilt
METHODS = ("es", "openes", "ppo")
STRATEGY = {"es": "eggroll", "openes": "open_es"}
EVAL_EPISODES = 100            # episodes per evaluation, every method
EVAL_EVERY_ENV_STEPS = 10_000  # evaluation cadence in training env steps, every method
ES_MAX_STEPS = 1_000_000  # the wall-clock budget ends an ES run, not the task's default step count
TUNING_SEEDS = (0, 1, 2, 3, 4)  # the per-env ES settings (tasks/rl/task.py ENV_ES_DEFAULTS) were tuned on these
STARTUP_SLACK_S = 300  # past the budget before a run is killed: interpreter, imports, env and model set-up
STOP_GRACE_S = 60      # for an ES run to save and exit after its SIGTERM
POLL_S = 0.5
COLUMNS = ["env", "method", "threshold", "seeds", "reached", "median_s", "q25_s", "q75_s", "train_median_s",
           "env_steps_per_s"]


def configs(quick: bool) -> dict:
    if quick:
        return dict(seeds=(100,), envs=("CartPole-v1",), budget=60.0)
    return dict(seeds=tuple(range(100, 110)), envs=tuple(THRESHOLDS), budget=300.0)


# -- the ES side ---------------------------------------------------------------------------
def es_invocation(env_id: str, seed: int, budget: float, out_dir: Path, threads: int,
                  strategy: str = "eggroll") -> tuple[list[str], dict]:
    """Command line and extra environment of one ES run: the one place to adjust the ES flags.

    The run must write ``out_dir/metrics.jsonl``: one JSON object per ES step with ``step`` and
    ``time`` (seconds since the run started) and, on evaluation steps, ``eval_return``,
    ``evaluated`` (1 when this row evaluated, 0 when it repeats the last evaluation) and
    ``eval_s`` (seconds spent evaluating so far). ``env_steps`` (cumulative) gives env steps/s.
    No per-env flags: ``train rl --env ENV`` runs the env's tuned settings by itself.
    """
    argv = [sys.executable, "-m", "hyperscalees.cli.main", "train", "rl", "--env", env_id, "--seed", str(seed),
            "--strategy", strategy, "--json", "--time-budget", f"{budget:g}", "--steps", str(ES_MAX_STEPS),
            "--eval-every", "1", "--eval-every-env-steps", str(EVAL_EVERY_ENV_STEPS),
            "--eval-episodes", str(EVAL_EPISODES), "--out", str(out_dir)]
    return argv, {"OMP_NUM_THREADS": str(threads)}  # the same intra-op thread count as PPO


def read_es_curve(path: Path) -> list[list[float]]:
    """[wall s, train s, env steps, eval_return] of every row that evaluated (a torn last line is dropped)."""
    return [[float(r["time"]), float(r["time"]) - float(r.get("eval_s") or 0.0), float(r.get("env_steps") or 0),
             float(r["eval_return"])] for r in read_rows(path)
            if r.get("eval_return") is not None and r.get("time") is not None and r.get("evaluated", 1)]


def time_to_threshold(curve: list[list[float]], threshold: float, budget: float = math.inf,
                      clock: int = 0) -> float | None:
    """Entry ``clock`` (0: wall, 1: train) of the first point whose return (last entry) reaches
    ``threshold`` within ``budget`` of wall clock."""
    for point in curve:
        if point[0] > budget:
            return None
        if point[-1] >= threshold:
            return point[clock]
    return None


def run_es(env_id: str, seed: int, budget: float, threads: int, strategy: str = "eggroll") -> dict:
    """One ES run in a subprocess, stopped with SIGTERM once its metrics reach the threshold."""
    threshold = THRESHOLDS[env_id]
    with tempfile.TemporaryDirectory(prefix="hs_bench_rl_") as tmp:
        out = Path(tmp) / "run"
        argv, extra = es_invocation(env_id, seed, budget, out, threads, strategy)
        src = str(Path(hyperscalees.__file__).resolve().parents[1])  # the hyperscalees this process runs
        path = os.pathsep.join([src] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        env = {**os.environ, "PYTHONPATH": path, **extra}
        with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
            proc = subprocess.Popen(argv, stdout=stdout, stderr=stderr, env=env, text=True)
            deadline, signalled, curve = time.monotonic() + budget + STARTUP_SLACK_S, None, []
            while proc.poll() is None:
                time.sleep(POLL_S)
                try:
                    curve = read_es_curve(out / JSONL_FILE)
                except BadFileError:
                    pass  # read again at the next poll; the final read below reports it
                if signalled is None and time_to_threshold(curve, threshold, budget) is not None:
                    proc.send_signal(signal.SIGTERM)
                    signalled = "threshold"
                    deadline = min(deadline, time.monotonic() + STOP_GRACE_S)
                if time.monotonic() > deadline:
                    proc.kill()
                    signalled = "killed"
                    proc.wait()
            stdout.seek(0)
            stderr.seek(0)
            out_text, err_text = stdout.read(), stderr.read()
        try:
            curve, rows = read_es_curve(out / JSONL_FILE), read_rows(out / JSONL_FILE)
            bad = None
        except BadFileError as e:
            rows, bad = [], str(e)
    ok = proc.returncode == 0 or (signalled == "threshold" and proc.returncode == 128 + signal.SIGTERM)
    status = "ok" if ok and bad is None else _failure(proc.returncode, bad or err_text, signalled)
    time_s = time_to_threshold(curve, threshold, budget)
    # the last row that counted env steps: a SIGTERM at the threshold cuts the last step's evaluation short,
    # and that row carries no evaluation fields
    last = next((r for r in reversed(rows) if isinstance(r.get("env_steps"), (int, float))), {})
    train_total = (last.get("time") or 0.0) - (last.get("eval_s") or 0.0)
    steps_per_s = (last["env_steps"] / train_total if isinstance(last.get("env_steps"), (int, float))
                   and train_total > 0 else None)
    return {"seed": seed, "status": status, "reached": time_s is not None, "time_s": time_s,
            "train_s": time_to_threshold(curve, threshold, budget, clock=1), "env_steps_per_s": steps_per_s,
            "es_steps": len(rows), "summary": study_cli.last_json(out_text), "curve": curve, "argv": argv[3:]}


# -- the PPO side --------------------------------------------------------------------------
def venv_dir() -> Path:
    return cache_dir() / "bench-venvs" / "ppo"


def venv_python(path: Path) -> Path:
    return path / ("Scripts" if os.name == "nt" else "bin") / "python"


def venv_commands(path: Path) -> list[list[str]]:
    """What builds the PPO venv: ``python -m venv`` then pip (whose index settings apply)."""
    return [[sys.executable, "-m", "venv", str(path)],
            [str(venv_python(path)), "-m", "pip", "install", "-q", *PPO_PACKAGES]]


def ensure_ppo_venv(log=print) -> Path:
    """The PPO venv's python, building the venv first if it is not there (once, then reused)."""
    path = venv_dir()
    ready = path / READY_FILE
    if ready.exists() and venv_python(path).exists() and ready.read_text().split() == list(PPO_PACKAGES):
        return venv_python(path)
    if path.exists():
        shutil.rmtree(path)  # left by an interrupted or failed build, or built for other packages
    log(f"rl_vs_ppo: building the PPO venv {path} ({' '.join(PPO_PACKAGES)}); once, a minute or more")
    for cmd in venv_commands(path):
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
            rc, tail = proc.returncode, (proc.stderr or proc.stdout).strip()[-1500:]
        except (OSError, subprocess.TimeoutExpired) as e:
            rc, tail = None, str(e)
        if rc != 0:
            shutil.rmtree(path, ignore_errors=True)
            raise BenchSetupError(
                f"could not build the PPO venv in {path}: `{' '.join(cmd)}` failed ({tail or f'exit {rc}'}). "
                "the PPO side installs stable-baselines3 from the package index: is this machine offline? pip's own "
                "settings (PIP_INDEX_URL, PIP_FIND_LINKS) apply; HYPERSCALEES_CACHE moves the venv")
    (path / READY_FILE).write_text(" ".join(PPO_PACKAGES) + "\n")
    return venv_python(path)


def anchor_script() -> Path:
    """``bench/ppo_anchor.py``, beside this file: the script the PPO venv runs."""
    path = Path(__file__).resolve().parent / "ppo_anchor.py"
    if not path.exists():
        raise BenchSetupError(f"the PPO side runs bench/ppo_anchor.py, not found at {path}: run this study from a "
                              "whole clone of the repository")
    return path


def run_ppo(python: Path, script: Path, env_id: str, seed: int, budget: float, threads: int) -> dict:
    """One PPO run of ``ppo_anchor.py`` in the PPO venv, scored by this checkout's evaluator."""
    cmd = [str(python), str(script), "--env", env_id, "--seed", str(seed), "--threshold", repr(THRESHOLDS[env_id]),
           "--max-seconds", f"{budget:g}", "--threads", str(threads), "--eval-every", str(EVAL_EVERY_ENV_STEPS),
           "--eval-episodes", str(EVAL_EPISODES), "--hs-src", str(Path(hyperscalees.__file__).resolve().parents[1])]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the venv's packages (+ --hs-src)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=budget + STARTUP_SLACK_S, env=env)
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired:
        rc, out, err = None, "", f"killed after {budget + STARTUP_SLACK_S:g} s"
    rec = study_cli.last_json(out)
    if rc != 0 or rec is None:
        return {"seed": seed, "status": _failure(rc, err, None), "reached": False, "time_s": None,
                "train_s": None, "env_steps_per_s": None, "curve": []}
    curve = rec["curve"]
    return {**rec, "status": "ok", "reached": time_to_threshold(curve, THRESHOLDS[env_id], budget) is not None,
            "time_s": time_to_threshold(curve, THRESHOLDS[env_id], budget),
            "train_s": time_to_threshold(curve, THRESHOLDS[env_id], budget, clock=1)}


def _failure(rc, text: str, signalled) -> str:
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    why = "killed: still running past its deadline" if signalled == "killed" else f"exit {rc}"
    return f"failed ({why}): {lines[-1][-300:] if lines else 'no output'}"


# -- summaries and the report -------------------------------------------------------------
def median_time(times: list[float | None]) -> float | None:
    """Median over seeds; a seed that missed (None) counts as slower than every seed that reached."""
    if not times:
        return None
    m = statistics.median([math.inf if t is None else t for t in times])
    return m if math.isfinite(m) else None


def _median_known(values) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _quartile(times: list[float | None], q: float) -> float | None:
    """Quartile over seeds with misses counted as slower than every hit (None when it lands on a miss)."""
    if not times:
        return None
    v = sorted(math.inf if t is None else t for t in times)
    x = statistics.quantiles(v, n=4, method="inclusive")[int(q * 4) - 1] if len(v) > 1 else v[0]
    return x if math.isfinite(x) else None


def summarize_env(env_id: str, runs: dict[str, list[dict]]) -> dict:
    """Per method: medians (with and without evaluation time), quartiles, seeds reached, env steps/s."""
    methods = {}
    for m, rs in runs.items():
        times = [r["time_s"] for r in rs]
        methods[m] = {"median_s": median_time(times), "q25_s": _quartile(times, 0.25), "q75_s": _quartile(times, 0.75),
                      "train_median_s": median_time([r.get("train_s") for r in rs]),
                      "reached": sum(r["reached"] for r in rs), "seeds": [r["seed"] for r in rs],
                      "env_steps_per_s": _median_known(r.get("env_steps_per_s") for r in rs), "runs": rs}
    known = {m: v["train_median_s"] for m, v in methods.items() if v["train_median_s"] is not None}
    return {"threshold": THRESHOLDS[env_id], "methods": methods,
            "fastest_without_eval": min(known, key=known.get) if known else None}


def build_report(results: dict[str, dict], budget: float, threads: int, notes: list[str] = (),
                 tuning_seeds=TUNING_SEEDS) -> Report:
    """The report from per-env summaries (:func:`summarize_env`); curves go in the JSON only."""
    rep = Report("rl", QUESTION, COLUMNS)
    nan = lambda v: math.nan if v is None else v
    for env_id, r in results.items():
        for m, v in r["methods"].items():
            rep.rows.append([env_id, m, r["threshold"], len(v["seeds"]), v["reached"], nan(v["median_s"]),
                             nan(v["q25_s"]), nan(v["q75_s"]), nan(v["train_median_s"]), nan(v["env_steps_per_s"])])
    ppo_versions = next((run["versions"] for r in results.values() for run in r["methods"].get("ppo", {}).get("runs", [])
                         if "versions" in run), None)
    rep.summary = {"fastest_without_eval": {e: r["fastest_without_eval"] for e, r in results.items()},
                   "budget_s": budget, "threads": threads, "tuning_seeds": list(tuning_seeds),
                   "eval_episodes": EVAL_EPISODES, "eval_every_env_steps": EVAL_EVERY_ENV_STEPS,
                   "ppo_versions": ppo_versions, "environment": environment()}
    rep.details = {"envs": results}
    failed = sorted({f"{m} {e} seed {run['seed']}: {run['status']}" for e, r in results.items()
                     for m, v in r["methods"].items() for run in v["runs"] if run["status"] != "ok"})
    rep.notes += [f"median_s: median over seeds of the wall clock to the threshold within {budget:g} s, incl. the "
                  "method's evaluations; train_median_s: the same without them; q25/q75: quartiles; n/a when the "
                  "seed there missed",
                  f"every method: the same evaluator ({EVAL_EPISODES} episodes, the project's batched env, the run "
                  f"seed's fixed starts) at the first step at or past every {EVAL_EVERY_ENV_STEPS} env steps",
                  f"ES settings tuned on seeds {list(tuning_seeds)} (not reported); PPO: rl-zoo's tuned settings",
                  "env steps/s: training env steps per second of training time"]
    rep.notes += failed[:10] + list(notes)
    return rep


def mean_curve(curves: list[list[list[float]]], grid: list[float]) -> list[float | None]:
    """Mean over seeds, at each grid time, of each seed's last return at or before it (None until all have one).

    A run keeps its last value after it ends: it stopped at the threshold or at the budget.
    """
    out = []
    for t in grid:
        vals = [next((p[-1] for p in reversed(c) if p[0] <= t), None) for c in curves]
        out.append(None if not vals or None in vals else sum(vals) / len(vals))
    return out


LABELS = {"es": ("EGGROLL (hyperscalees)", "C0"), "openes": ("OpenES full rank (hyperscalees)", "C2"),
          "ppo": ("PPO (SB3, rl-zoo)", "C1")}


def plot_curves(results: dict[str, dict], path: Path) -> str:
    """Eval return against wall clock, every seed of every method, one panel per env; returns a note."""
    try:
        plt = pyplot()
    except ImportError as e:
        return f"no plot: {e}"
    fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 4), squeeze=False)
    for ax, (env_id, r) in zip(axes[0], results.items()):
        for m, v in r["methods"].items():
            label, color = LABELS.get(m, (m, None))
            curves = [[[p[0], p[-1]] for p in run["curve"]] for run in v["runs"] if run["curve"]]
            for c in curves:  # a return holds until the next evaluation: steps, as mean_curve reads them
                ax.plot([p[0] for p in c], [p[1] for p in c], color=color, alpha=0.3, lw=0.8, marker=".",
                        drawstyle="steps-post")
            if not curves:
                ax.plot([], [], color=color, label=f"{label}: no evaluations")
            else:
                end = max(c[-1][0] for c in curves)
                grid = [end * i / 300 for i in range(301)]
                pts = [(t, y) for t, y in zip(grid, mean_curve(curves, grid)) if y is not None]
                ax.plot([t for t, _ in pts], [y for _, y in pts], color=color, lw=2,
                        label=f"{label}, mean of {len(curves)}")
            if v["median_s"] is not None:
                ax.axvline(v["median_s"], color=color, ls=":", lw=1)
        ax.axhline(r["threshold"], color="grey", ls="--", lw=1, label=f"target {r['threshold']:g}")
        ax.set(xlabel="wall clock incl. evaluations (s)", ylabel="mean eval return", title=env_id)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = save_figure(fig, path)
    return f"plot: {path} (thin: one seed; thick: mean over seeds; dotted: median time to target)"


def run(quick: bool = False, device: str = "cpu", log=print, seeds=None, envs=None, budget=None, plot=None,
        threads: int = 1, methods=None, tuning_seeds=None, runs_dir=None) -> Report:
    if device != "cpu":
        raise BenchSetupError("rl_vs_ppo measures on the CPU only (all methods run small MLP policies)")
    c = configs(quick)
    seeds, envs, budget = tuple(seeds or c["seeds"]), tuple(envs or c["envs"]), float(budget or c["budget"])
    methods = tuple(methods or METHODS)
    tuning = tuple(TUNING_SEEDS if tuning_seeds is None else tuning_seeds)
    overlap = sorted(set(seeds) & set(tuning))
    if overlap:
        raise BenchSetupError(f"seeds {overlap} are tuning seeds (--tuning-seeds {' '.join(map(str, tuning))}): "
                              "report seeds the settings were not tuned on")
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise BenchSetupError(f"unknown method(s) {bad}; choose from {list(METHODS)}")
    if "ppo" in methods:
        script, python = anchor_script(), ensure_ppo_venv(log)
    sides = {"es": lambda e, s: run_es(e, s, budget, threads, STRATEGY["es"]),
             "openes": lambda e, s: run_es(e, s, budget, threads, STRATEGY["openes"]),
             "ppo": lambda e, s: run_ppo(python, script, e, s, budget, threads)}
    results = {}
    for env_id in envs:
        runs = {m: [] for m in methods}
        for i, seed in enumerate(seeds):
            order = methods[i % len(methods):] + methods[:i % len(methods)]  # rotate who goes first
            for m in order:
                load_before = os.getloadavg()[0]  # read before the run starts (the run's own load is not in it)
                log(f"  {env_id} seed {seed}: {m} (budget {budget:g} s, load {load_before:.2f})")
                rec = {**sides[m](env_id, seed), "load_before": load_before}
                runs[m].append(rec)
                if runs_dir is not None:
                    path = Path(runs_dir) / f"{env_id}_{m}_seed{seed}.json"
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(json.dumps({"env": env_id, "method": m, "budget_s": budget, "threads": threads,
                                                "load_after": list(os.getloadavg()), **rec}) + "\n")
                t = rec["time_s"]
                log(f"    {rec['status']}; to {THRESHOLDS[env_id]:g}: "
                    + ("not reached" if t is None else f"{t:.1f} s ({rec.get('train_s') or math.nan:.1f} s training)"))
        results[env_id] = summarize_env(env_id, runs)
    notes = [plot_curves(results, plot)] if plot else []
    if runs_dir is not None:
        notes.append(f"every run's record: {runs_dir}/ENV_METHOD_seedS.json")
    return build_report(results, budget, threads, notes, tuning)


def main(argv=None) -> int:
    p = study_cli.parser("rl_vs_ppo.py", __doc__)
    p.add_argument("--seeds", type=study_cli.seed, nargs="+", default=None, metavar="S",
                   help="seeds to report (default: 100 ... 109; with --quick: 100); never a tuning seed")
    p.add_argument("--tuning-seeds", type=study_cli.seed, nargs="+", default=None, metavar="S",
                   help="the seeds the ES settings were tuned on, refused as --seeds (default: 0 1 2 3 4)")
    p.add_argument("--methods", nargs="+", default=None, choices=METHODS, metavar="M",
                   help="es (EGGROLL) | openes (full rank) | ppo (needs the PPO venv) (default: all three)")
    p.add_argument("--envs", nargs="+", default=None, choices=tuple(THRESHOLDS), metavar="ENV",
                   help=f"{' | '.join(THRESHOLDS)} (default: both; with --quick: CartPole-v1)")
    p.add_argument("--budget", type=study_cli.positive_float, default=None, metavar="SECONDS",
                   help="wall-clock budget of every run, ES and PPO alike (default 300; --quick 60)")
    p.add_argument("--plot", type=Path, default=None, metavar="FILE",
                   help="draw eval return vs wall clock of every method and seed to this PNG (needs matplotlib)")
    p.add_argument("--runs-dir", type=Path, default=None, metavar="DIR",
                   help="save every run's record (curve, times, status, load) as DIR/ENV_METHOD_seedS.json")
    return study_cli.main(p, run, argv, child_threads=True)


if __name__ == "__main__":
    raise SystemExit(main())
