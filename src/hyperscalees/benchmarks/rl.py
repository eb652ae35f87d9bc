"""Question: does ES reach an RL target in less wall clock than PPO on this machine?

Targets: CartPole-v1 mean eval return >= 475, Pendulum-v1 >= -200. For every env and seed
(default 0..4) two runs, one after the other (never side by side; the side that goes first
alternates with the seed), each under the same wall-clock budget:

- ES: ``hyperscalees train rl --env ENV --seed S --json --time-budget B --out DIR`` in a
  subprocess (:func:`es_invocation`). Its ``metrics.jsonl`` gives ``time`` and, on evaluation
  steps, ``eval_return``; once a row reaches the threshold the run is sent SIGTERM (it saves
  and exits), as PPO stops at its threshold.
- PPO: stable-baselines3 with the rl-baselines3-zoo tuned hyperparameters and the protocol of
  shared/research/baselines.md §3 (20 deterministic eval episodes every 10k env steps), run by
  ``bench/ppo_anchor.py`` (source checkout) inside a throw-away venv built once under
  ``~/.cache/hyperscalees/bench-venvs/ppo`` (``HYPERSCALEES_CACHE`` moves it). PPO is never a
  dependency of hyperscalees.

Reported per env: the median over seeds of the wall clock to the threshold for each side (a
seed that misses counts as slower than every seed that reached, so the median is None when
half or more miss), seeds reached, env steps/s, and the curves; ``--plot FILE`` draws mean
eval return against wall clock for both. Both clocks include each side's own evaluations;
PPO's time without them is reported too. PPO's clock starts at ``learn()`` (after building the
model, about 1 s); ES's at the start of the engine run (before building the model).

    hyperscalees bench rl [--quick] [--json] [--seeds 0 1 2 3 4] [--envs CartPole-v1 Pendulum-v1]
                          [--budget SECONDS] [--threads N] [--plot FILE] [--out FILE]
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

from ..engine.files import BadFileError
from ..engine.metrics import JSONL_FILE, read_rows
from ..noise.native import cache_dir
from .base import BenchSetupError, Report, environment

QUESTION = "wall clock to an RL target: ES vs PPO (stable-baselines3, rl-zoo tuned), same budget, median over seeds"
THRESHOLDS = {"CartPole-v1": 475.0, "Pendulum-v1": -200.0}
PPO_PACKAGES = ("torch==2.13.0", "stable-baselines3", "gymnasium[mujoco]==1.4.0")  # mujoco: HalfCheetah-v5
READY_FILE = ".hyperscalees-ready"  # written last: a venv without it is a broken install and is rebuilt
ES_EVAL_EVERY = 5     # ES steps between evaluations (the ES side may tune this)
ES_MAX_STEPS = 1_000_000  # the wall-clock budget ends an ES run, not the task's default step count
# Per-env ES settings, the counterpart of PPO's rl-zoo tuned ones, from a sweep on Pendulum-v1 (bench/results/cpu/README.md,
# "Notes on the runs", ES vs PPO): OpenAI ES's per-pair episode starts, one episode per member, 256 pairs,
# a large Adam step that decays. Anything not listed runs the rl task's defaults.
ES_FLAGS = {"Pendulum-v1": ["--starts", "pair", "--episodes", "1", "--population", "512", "--sigma", "0.1",
                            "--lr", "0.25", "--lr-decay", "0.99", "--rank", "8"]}
STARTUP_SLACK_S = 300  # past the budget before a run is killed: interpreter, imports, env and model set-up
STOP_GRACE_S = 60      # for an ES run to save and exit after its SIGTERM
POLL_S = 0.5
COLUMNS = ["env", "threshold", "seeds", "es_reached", "es_median_s", "ppo_reached", "ppo_median_s",
           "ppo_train_median_s", "es_env_steps_per_s", "ppo_env_steps_per_s"]


def configs(quick: bool) -> dict:
    if quick:
        return dict(seeds=(0,), envs=("CartPole-v1",), budget=60.0)
    return dict(seeds=(0, 1, 2, 3, 4), envs=tuple(THRESHOLDS), budget=300.0)


# -- the ES side ---------------------------------------------------------------------------
def es_invocation(env_id: str, seed: int, budget: float, out_dir: Path, threads: int) -> tuple[list[str], dict]:
    """Command line and extra environment of one ES run: the one place to adjust the ES flags.

    The run must write ``out_dir/metrics.jsonl``: one JSON object per ES step with ``step`` and
    ``time`` (seconds since the run started) and, on evaluation steps, ``eval_return`` (mean
    return of the unperturbed policy over its evaluation episodes). An ``env_steps`` field
    (cumulative env steps) makes env steps/s appear in the report.
    """
    argv = [sys.executable, "-m", "hyperscalees.cli.main", "train", "rl", "--env", env_id, "--seed", str(seed),
            "--json", "--time-budget", f"{budget:g}", "--steps", str(ES_MAX_STEPS), "--eval-every", str(ES_EVAL_EVERY),
            "--out", str(out_dir),
            *ES_FLAGS.get(env_id, [])]
    return argv, {"OMP_NUM_THREADS": str(threads)}  # the same intra-op thread count as PPO


def read_es_curve(path: Path) -> list[list[float]]:
    """[time, eval_return] of every evaluation row of a ``metrics.jsonl`` (a torn last line is dropped)."""
    return [[float(r["time"]), float(r["eval_return"])] for r in read_rows(path)
            if r.get("eval_return") is not None and r.get("time") is not None]


def time_to_threshold(curve: list[list[float]], threshold: float, budget: float = math.inf) -> float | None:
    """Time of the first point whose return (last entry) reaches ``threshold`` within ``budget``."""
    for point in curve:
        if point[0] > budget:
            return None
        if point[-1] >= threshold:
            return point[0]
    return None


def run_es(env_id: str, seed: int, budget: float, threads: int) -> dict:
    """One ES run in a subprocess, stopped with SIGTERM once its metrics reach the threshold."""
    threshold = THRESHOLDS[env_id]
    with tempfile.TemporaryDirectory(prefix="hs_bench_rl_") as tmp:
        out = Path(tmp) / "run"
        argv, extra = es_invocation(env_id, seed, budget, out, threads)
        src = str(Path(__file__).resolve().parents[2])  # the hyperscalees this process runs
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
    last = rows[-1] if rows else {}
    steps_per_s = (last["env_steps"] / last["time"] if isinstance(last.get("env_steps"), (int, float))
                   and last.get("time") else None)
    return {"seed": seed, "status": status, "reached": time_s is not None, "time_s": time_s,
            "env_steps_per_s": steps_per_s, "es_steps": len(rows), "summary": _last_json(out_text), "curve": curve}


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
    log(f"bench rl: building the PPO venv {path} ({' '.join(PPO_PACKAGES)}); once, a minute or more")
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
                "bench rl installs stable-baselines3 from the package index: is this machine offline? pip's own "
                "settings (PIP_INDEX_URL, PIP_FIND_LINKS) apply; HYPERSCALEES_CACHE moves the venv")
    (path / READY_FILE).write_text(" ".join(PPO_PACKAGES) + "\n")
    return venv_python(path)


def anchor_script() -> Path:
    path = Path(__file__).resolve().parents[3] / "bench" / "ppo_anchor.py"
    if not path.exists():
        raise BenchSetupError(f"bench rl runs PPO with bench/ppo_anchor.py, which ships with the source checkout "
                              f"only (not found at {path}); run it from a clone of the repository")
    return path


def run_ppo(python: Path, script: Path, env_id: str, seed: int, budget: float, threads: int) -> dict:
    """One PPO run of ``ppo_anchor.py`` in the PPO venv: its JSON line, plus status and time_s."""
    cmd = [str(python), str(script), "--env", env_id, "--seed", str(seed), "--threshold", repr(THRESHOLDS[env_id]),
           "--max-seconds", f"{budget:g}", "--threads", str(threads)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # only the venv's packages
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=budget + STARTUP_SLACK_S, env=env)
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired:
        rc, out, err = None, "", f"killed after {budget + STARTUP_SLACK_S:g} s"
    rec = _last_json(out)
    if rc != 0 or rec is None:
        return {"seed": seed, "status": _failure(rc, err, None), "reached": False, "time_s": None,
                "train_s": None, "env_steps_per_s": None, "curve": []}
    time_s = time_to_threshold(rec["curve"], THRESHOLDS[env_id], budget)
    return {**rec, "status": "ok", "reached": time_s is not None, "time_s": time_s,
            "train_s": rec["train_s"] if time_s is not None else None}


def _failure(rc, text: str, signalled) -> str:
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    why = "killed: still running past its deadline" if signalled == "killed" else f"exit {rc}"
    return f"failed ({why}): {lines[-1][-300:] if lines else 'no output'}"


def _last_json(text: str) -> dict | None:
    for line in reversed((text or "").strip().splitlines()):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        return obj if isinstance(obj, dict) else None
    return None


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


def summarize_env(env_id: str, es_runs: list[dict], ppo_runs: list[dict]) -> dict:
    es_s, ppo_s = median_time([r["time_s"] for r in es_runs]), median_time([r["time_s"] for r in ppo_runs])
    if es_s is None and ppo_s is None:
        faster = None  # neither reached: no verdict
    else:
        faster = ppo_s is None or (es_s is not None and es_s < ppo_s)
    return {"threshold": THRESHOLDS[env_id], "seeds": [r["seed"] for r in es_runs],
            "es_median_s": es_s, "ppo_median_s": ppo_s,
            "ppo_train_median_s": median_time([r.get("train_s") for r in ppo_runs]),
            "es_reached": sum(r["reached"] for r in es_runs), "ppo_reached": sum(r["reached"] for r in ppo_runs),
            "es_env_steps_per_s": _median_known(r["env_steps_per_s"] for r in es_runs),
            "ppo_env_steps_per_s": _median_known(r["env_steps_per_s"] for r in ppo_runs),
            "es_faster": faster, "es_runs": es_runs, "ppo_runs": ppo_runs}


def build_report(results: dict[str, dict], budget: float, threads: int, notes: list[str] = ()) -> Report:
    """The report from per-env summaries (:func:`summarize_env`); curves go in the JSON only."""
    rep = Report("rl", QUESTION, COLUMNS)
    nan = lambda v: math.nan if v is None else v
    for env_id, r in results.items():
        rep.rows.append([env_id, r["threshold"], len(r["seeds"]), r["es_reached"], nan(r["es_median_s"]),
                         r["ppo_reached"], nan(r["ppo_median_s"]), nan(r["ppo_train_median_s"]),
                         nan(r["es_env_steps_per_s"]), nan(r["ppo_env_steps_per_s"])])
    ppo_versions = next((run["versions"] for r in results.values() for run in r["ppo_runs"] if "versions" in run), None)
    rep.summary = {"es_faster": {e: r["es_faster"] for e, r in results.items()}, "budget_s": budget,
                   "threads": threads, "ppo_versions": ppo_versions, "environment": environment()}
    rep.details = {"envs": results}
    failed = sorted({f"{side} {e} seed {run['seed']}: {run['status']}" for e, r in results.items()
                     for side in ("es", "ppo") for run in r[f"{side}_runs"] if run["status"] != "ok"})
    rep.notes += [f"*_median_s: median over seeds of the wall clock to the threshold within {budget:g} s, incl. "
                  "each side's evaluations; n/a when half or more of the seeds missed",
                  "ppo_train_median_s: the same without PPO's evaluations; env steps/s: training steps per "
                  "second (PPO: train-only time)"]
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


def plot_curves(results: dict[str, dict], path: Path) -> str:
    """Mean eval return against wall clock, ES and PPO, one panel per env; returns a note for the report."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot (pip install 'hyperscalees[plot]')"
    fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 4), squeeze=False)
    for ax, (env_id, r) in zip(axes[0], results.items()):
        for side, label, color in (("es", "ES (hyperscalees)", "C0"), ("ppo", "PPO (SB3, rl-zoo)", "C1")):
            curves = [[[p[0], p[-1]] for p in run["curve"]] for run in r[f"{side}_runs"] if run["curve"]]
            for c in curves:  # a return holds until the next evaluation: steps, as mean_curve reads them
                ax.plot([p[0] for p in c], [p[1] for p in c], color=color, alpha=0.3, lw=0.8, marker=".",
                        drawstyle="steps-post")
            if not curves:
                ax.plot([], [], color=color, label=f"{label}: no evaluations")
            else:
                end = max(c[-1][0] for c in curves)
                grid = [end * i / 300 for i in range(301)]
                pts = [(t, v) for t, v in zip(grid, mean_curve(curves, grid)) if v is not None]
                ax.plot([t for t, _ in pts], [v for _, v in pts], color=color, lw=2,
                        label=f"{label}, mean of {len(curves)}")
            if r[f"{side}_median_s"] is not None:
                ax.axvline(r[f"{side}_median_s"], color=color, ls=":", lw=1)
        ax.axhline(r["threshold"], color="grey", ls="--", lw=1, label=f"target {r['threshold']:g}")
        ax.set(xlabel="wall clock (s)", ylabel="mean eval return", title=env_id)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return f"plot: {path} (thin: one seed; thick: mean over seeds; dotted: median time to target)"


def run(quick: bool = False, device: str = "cpu", log=print, seeds=None, envs=None, budget=None, plot=None,
        threads: int = 1) -> Report:
    if device != "cpu":
        raise BenchSetupError("bench rl measures on the CPU only (both sides run small MLP policies)")
    c = configs(quick)
    seeds, envs, budget = tuple(seeds or c["seeds"]), tuple(envs or c["envs"]), float(budget or c["budget"])
    script = anchor_script()
    python = ensure_ppo_venv(log)
    results = {}
    for env_id in envs:
        es_runs, ppo_runs = [], []
        for i, seed in enumerate(seeds):
            sides = [("es", lambda: run_es(env_id, seed, budget, threads), es_runs),
                     ("ppo", lambda: run_ppo(python, script, env_id, seed, budget, threads), ppo_runs)]
            for side, fn, runs in (sides if i % 2 == 0 else sides[::-1]):  # alternate who goes first
                log(f"  {env_id} seed {seed}: {side} (budget {budget:g} s, load {os.getloadavg()[0]:.2f})")
                runs.append(fn())
                t = runs[-1]["time_s"]
                log(f"    {runs[-1]['status']}; to {THRESHOLDS[env_id]:g}: "
                    + ("not reached" if t is None else f"{t:.1f} s"))
        results[env_id] = summarize_env(env_id, es_runs, ppo_runs)
    notes = [plot_curves(results, plot)] if plot else []
    return build_report(results, budget, threads, notes)
