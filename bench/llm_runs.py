"""One ES run and one GRPO run of the LLM studies, their scoring, and the tuning over them.

``bench/llm_vs_grpo.py`` compares the two; ``bench/llm_signal.py`` reads the task settings the
same way. Each run is a child process with its own thread count and a wall-clock budget:

- ``es``: ``python bench/es_run.py train llm ...`` (``hyperscalees train llm`` with transformers,
  the model's class and CUDA started before the engine's clock, as GRPO's clock starts after its
  own imports and model loading);
- ``grpo``: ``python bench/grpo_run.py ...`` (TRL's ``GRPOTrainer``; the ``grpo`` extra).

Both are scored here, after the run and outside its clock, by the one evaluator
(``tasks/problems/evaluate.py``). :func:`run_grid` runs every setting of each method's grid
(``llm_tuning``) on the tuning seeds and lets :func:`llm_tuning.tune` choose.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import hyperscalees
from hyperscalees.benchmarks.base import BenchSetupError
from hyperscalees.benchmarks.run_store import RunStore
from hyperscalees.benchmarks.training_curves import json_object as _json_object  # re-used by the studies
from llm_tuning import GRIDS, tune
from study_cli import last_json

HERE = Path(__file__).resolve().parent  # bench/: the runners' scripts

ES_MAX_STEPS = 1_000_000  # ES stops on its budget, never on a step count
# GRPO's step cap (grpo_run --max-steps; its data set holds prompts x this), set from the budget so that the
# budget ends the run: 20 steps a second is faster than any CPU step here. A cap of 1,000 (grpo_run's
# default) ended 4-prompt Countdown runs at ~360 s of a 600 s budget. TRL decays the learning rate linearly
# to 0 at the cap, so at the cap's rate a run that stops on its budget keeps >= 80% of it for steps >= 0.25 s.
GRPO_MAX_STEPS_PER_S = 20
# train llm's own closing evaluation, inside its clock: never the reported score (that is scored here, outside
# both clocks), so it is kept small -- a pooled held-out set of ~2,000 problems would eat ES's budget
ES_RUN_EVAL_PROMPTS = 16
STARTUP_SLACK_S = 600  # past the budget before a run is killed: imports, model, evaluations, export


def _env(threads: int) -> dict:
    src = str(Path(hyperscalees.__file__).resolve().parents[1])  # the hyperscalees this process runs
    path = os.pathsep.join([src] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}


def _failure(rc, text: str) -> str:
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    return f"failed (exit {rc}): {lines[-1][-300:] if lines else 'no output'}"


def _call(argv: list[str], timeout: float, threads: int) -> tuple[int | None, str, str]:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=_env(threads))
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return None, "", f"killed after {timeout:g} s"


# ES settings handed to train llm as they are (llm_tuning.SETTING_KEYS checks them): what evolves and the protocol
PASSED_AS_FLAGS = ("subspace", "adapters", "train_problems", "evolve", "shaping", "group_fitness", "preset",
                   "strategy", "chunk", "subspace_cache_mib", "noise_cache_mib")


def es_invocation(model: str, seed: int, budget: float, out_dir: Path, c: dict, tuned: dict | None = None) -> list[str]:
    """The ES command line: the one place to adjust ES's flags. ``tuned``: lr, sigma, population and
    optionally optimizer, prompts and temperature (``llm_tuning.ES_GRID``); population and prompts
    default to the benchmark's, lr, sigma, optimizer and temperature (greedy) to train llm's."""
    tuned = tuned or {}
    argv = [sys.executable, str(HERE / "es_run.py"), "train", "llm", "--model", model, "--task", c["task"],
            "--task-options", json.dumps(c["task_options"]), "--seed", str(seed),
            "--prompts", str(tuned.get("prompts", c["prompts"])),
            "--max-new-tokens", str(c["max_new_tokens"]),
            "--eval-prompts", str(min(c["eval_prompts"], ES_RUN_EVAL_PROMPTS)),
            "--population", str(tuned.get("population", c["population"])), "--time-budget", f"{budget:g}",
            "--steps", str(ES_MAX_STEPS), "--eval-every", str(ES_MAX_STEPS), "--no-eval-at-start",
            "--json", "--out", str(out_dir)]
    argv += [a for k in ("lr", "sigma", "temperature") if k in tuned for a in (f"--{k}", f"{tuned[k]:g}")]
    argv += ["--optimizer", tuned["optimizer"]] if "optimizer" in tuned else []
    argv += [a for k in PASSED_AS_FLAGS if k in tuned for a in (f"--{k.replace('_', '-')}", str(tuned[k]))]
    argv += ["--snapshot-minutes", f"{c['snapshot_s'] / 60:g}"] if c.get("snapshot_s") else []
    return argv + _device_flag(c)


def _device_flag(c: dict) -> list[str]:
    """Both runners take ``--device``, always given: train llm's default is cuda where there is one, so a
    CPU comparison on a GPU machine would otherwise train ES on the GPU and GRPO on the CPU."""
    return ["--device", c.get("device", "cpu")]


def concurrently(calls: list[Callable[[], dict]]) -> list[dict]:
    """Start every zero-argument call at once and return their results in order: a thread each, since
    every call only waits on its own subprocess (``--side-by-side``)."""
    if not calls:
        return []
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return [f.result() for f in [pool.submit(call) for call in calls]]


def check_side_by_side(methods, threads: int, cpus: int | None = None, device: str = "cpu") -> None:
    """``--side-by-side`` needs both methods, and a core for each run's threads (else they would share
    cores, and a timing then says more about the scheduler than about the method), and the CPU: on
    one GPU the two runs would share it."""
    if device != "cpu":
        raise BenchSetupError(f"--side-by-side runs one method per CPU core; on --device {device} both runs "
                              "would share the one GPU: leave it out (runs then go one at a time)")
    cpus = cpus or os.cpu_count() or 1
    if len(methods) < 2:
        raise BenchSetupError(f"--side-by-side runs the methods at the same time: it needs two, got {list(methods)}")
    if len(methods) * threads > cpus:
        raise BenchSetupError(f"--side-by-side needs {len(methods)} runs x {threads} threads = "
                              f"{len(methods) * threads} CPUs, this machine has {cpus}")


def run_es(model: str, seed: int, budget: float, threads: int, c: dict, tuned: dict | None = None,
           validate: bool = False) -> dict:
    """One ES run; ``validate``: also score the exported model on the validation problems (tuning)."""
    from hyperscalees.engine.metrics import JSONL_FILE, read_rows
    with tempfile.TemporaryDirectory(prefix="hs_bench_llm_") as tmp:
        argv = es_invocation(model, seed, budget, Path(tmp) / "run", c, tuned)
        rc, out, err = _call(argv, budget + STARTUP_SLACK_S, threads)
        summary = last_json(out)
        try:
            rows = read_rows(Path(tmp) / "run" / JSONL_FILE)
        except Exception:  # noqa: BLE001 - a failed run may leave no or a torn file; reported as failed
            rows = []
        ok = rc == 0 and summary is not None and bool(rows)
        if ok:  # scored here, outside the clock, as GRPO's: the run's own last evaluation may meet the deadline
            after = before_accuracy(summary["paths"]["export"], c)
            val = validation_accuracy(summary["paths"]["export"], c) if validate else None
            held_curve = score_snapshots(Path(tmp) / "run", c)
    if not ok:
        return {"method": "es", "seed": seed, "status": _failure(rc, err), "after": None, "curve": []}
    tuned = tuned or {}
    population, prompts = int(tuned.get("population", c["population"])), int(tuned.get("prompts", c["prompts"]))
    steps, train_s = int(rows[-1]["step"]), float(rows[-1]["time"])
    generations = steps * population * prompts
    rec = {"method": "es", "seed": seed, "status": "ok", "after": after, "steps": steps,
           "stopped": summary.get("stopped"), "train_s": train_s, "generations": generations,
           "generations_per_s": generations / train_s if train_s > 0 else None,
           "curve": [[float(r["time"]), float(r["fitness_mean"])] for r in rows], "argv": argv[2:],
           "held_out_curve": with_end(held_curve, [train_s, after["accuracy"], after["formatted"], steps]),
           "settings": {**tuned, "population": population, "prompts": prompts,
                        "max_new_tokens": c["max_new_tokens"], "eval_prompts": c["eval_prompts"],
                        "budget_s": budget, "threads": threads}}
    return {**rec, "validation": val} if validate else rec


def grpo_invocation(model: str, seed: int, budget: float, c: dict, threads: int,
                    tuned: dict | None = None) -> list[str]:
    """The GRPO command line (``bench/grpo_run.py``); ``tuned``: learning_rate, generations and
    optionally prompts (``llm_tuning.GRPO_GRID``)."""
    tuned = tuned or {}
    argv = [sys.executable, str(HERE / "grpo_run.py"), "--model", model, "--task", c["task"],
            "--task-options", json.dumps(c["task_options"]), "--seed", str(seed),
            "--prompts", str(tuned.get("prompts", c["prompts"])),
            "--generations", str(tuned.get("generations", c["generations"])),
            "--max-new-tokens", str(c["max_new_tokens"]), "--eval-prompts", str(grpo_run_eval_prompts(c)),
            "--budget", f"{budget:g}", "--threads", str(threads), "--max-steps", str(grpo_max_steps(budget))]
    argv += ["--learning-rate", f"{tuned['learning_rate']:g}"] if "learning_rate" in tuned else []
    return argv + _device_flag(c)


def scored_here(c: dict) -> bool:
    """Whether this process scores every run's model itself (``--held-out pooled``, snapshots), so a
    GRPO child's own closing evaluation is never the score."""
    return c.get("held_out") == "pooled" or bool(c.get("snapshot_s"))


def grpo_run_eval_prompts(c: dict) -> int:
    """The problems ``grpo_run.py`` scores after its run: the score itself, or, when the study scores
    here, a few only (as ES's own closing evaluation), so a large model's child is not killed for
    outliving :data:`STARTUP_SLACK_S` while it scores problems nobody reads."""
    return min(c["eval_prompts"], ES_RUN_EVAL_PROMPTS) if scored_here(c) else c["eval_prompts"]


def grpo_max_steps(budget: float) -> int:
    """GRPO's step cap for a run of ``budget`` seconds: one its budget reaches first (see
    :data:`GRPO_MAX_STEPS_PER_S`), so both methods stop on the clock."""
    return max(1, math.ceil(budget * GRPO_MAX_STEPS_PER_S))


def stopped_early(rec: dict) -> str | None:
    """Why a finished run did not stop on its budget (equal wall clock broken), or None."""
    stopped = rec.get("stopped")
    if rec.get("status") != "ok" or stopped in (None, "budget", "time_budget"):
        return None
    return (f"{rec['method']} seed {rec['seed']} stopped by {stopped} after {rec.get('train_s')} s of its "
            f"{rec.get('settings', {}).get('budget_s')} s budget: not equal wall clock")


def run_grpo(model: str, seed: int, budget: float, threads: int, c: dict, tuned: dict | None = None,
             validate: bool = False) -> dict:
    """One GRPO run; ``validate``: also save the trained model and score it on the validation problems."""
    here, snaps = scored_here(c), c.get("snapshot_s")
    with tempfile.TemporaryDirectory(prefix="hs_bench_llm_grpo_") as tmp:
        argv = grpo_invocation(model, seed, budget, c, threads, tuned)
        argv += ["--snapshot-every", f"{snaps:g}", "--snapshot-dir", str(Path(tmp) / "run")] if snaps else []
        saved = str(Path(tmp) / "model")
        rc, out, err = _call(argv + (["--save", saved] if validate or here else []),
                             budget + STARTUP_SLACK_S, threads)
        rec = last_json(out)
        ok = rc == 0 and rec is not None
        val = validation_accuracy(saved, c) if ok and validate else None
        if ok and here:  # the parent scores, as ES's: the child scored a few test problems only
            rec = {**rec, "after": before_accuracy(saved, c), "after_in_run": rec["after"]}
            rec["held_out_curve"] = with_end(score_snapshots(Path(tmp) / "run", c), [
                rec["train_s"], rec["after"]["accuracy"], rec["after"]["formatted"], rec["steps"]])
    if not ok:
        return {"method": "grpo", "seed": seed, "status": _failure(rc, err), "after": None, "curve": []}
    rec = {**rec, "status": "ok", "argv": argv[2:]}
    return {**rec, "validation": val} if validate else rec


def split_accuracy(model: str, c: dict, split: str = "test") -> dict:
    """A model folder's metrics on the first ``c["eval_prompts"]`` problems of ``split``: greedy, on
    ``c``'s device, the one evaluator of every score here. The splits are the same for every seed
    (the task is built with seed 0: a seed picks training problems only)."""
    import torch
    from hyperscalees import llm
    from hyperscalees.tasks.problems import PROBLEM_SETS
    from hyperscalees.tasks.problems.evaluate import held_out
    torch.manual_seed(0)
    m, tok = llm.load_causal_lm(model, device=c.get("device", "cpu"))
    task = PROBLEM_SETS[c["task"]](seed=0, options=c["task_options"])
    return held_out(task, m, tok, llm.Sampling(max_new_tokens=c["max_new_tokens"], stop=("</answer>",)),
                    c["eval_prompts"], split=split)


def pooled_accuracy(model: str, c: dict) -> dict:
    """A model folder's metrics on every distinct validation and test problem, pooled (``--held-out
    pooled``: the issue-40 pre-registrations' held-out set), with ``problems`` the count."""
    from hyperscalees.tasks.problems import PROBLEM_SETS
    task = PROBLEM_SETS[c["task"]](seed=0, options=c["task_options"])
    sizes = {split: task.distinct_size(split) for split in ("validation", "test")}
    parts = {split: split_accuracy(model, {**c, "eval_prompts": n}, split) for split, n in sizes.items()}
    total = sum(sizes.values())
    return {**{k: sum(parts[s][k] * sizes[s] for s in sizes) / total for k in ("accuracy", "formatted", "reward")},
            "problems": total}


def before_accuracy(model: str, c: dict) -> dict:
    """A model folder's held-out metrics (the first E test problems, or ``--held-out pooled``): the
    starting model's, and every run's result's."""
    return pooled_accuracy(model, c) if c.get("held_out") == "pooled" else split_accuracy(model, c, "test")


def with_end(curve: list[list], end: list) -> list[list]:
    """The held-out curve closed by the run's end (``[seconds, accuracy, formatted, step]``); a snapshot
    of the last step is that same model, so it gives way to the end point."""
    return [p for p in curve if p[3] != end[3]] + [end]


def score_snapshots(run_dir: Path, c: dict) -> list[list]:
    """``[[seconds, accuracy, formatted, step], ...]``: every snapshot a run wrote (``--snapshot-minutes``,
    ``grpo_run --snapshot-every``), scored like the end (:func:`before_accuracy`), outside the clock."""
    from hyperscalees.engine.snapshots import read_snapshots
    out = []
    for snap in read_snapshots(run_dir):
        m = before_accuracy(snap["path"]["export"], c)
        out.append([snap["time"], m["accuracy"], m["formatted"], snap["step"]])
    return out


def with_task(c: dict, task: str | None, task_options) -> dict:
    """``c`` with another task (its own default options unless given) or options (JSON text or a
    dict), checked by building the task."""
    if task is not None:
        c = {**c, "task": task, "task_options": {}}
    if task_options is not None:
        c = {**c, "task_options": json.loads(task_options) if isinstance(task_options, str) else dict(task_options)}
    try:
        from hyperscalees.tasks.problems import PROBLEM_SETS
        PROBLEM_SETS[c["task"]](seed=0, options=c["task_options"]).problem("test", 0)
    except (KeyError, ValueError, TypeError) as e:  # JSONDecodeError is a ValueError
        raise BenchSetupError(f"task {c['task']!r} with options {c['task_options']}: {e}") from None
    return c



def validation_accuracy(model: str, c: dict) -> dict:
    """A model folder's metrics on the first E distinct problems of the task's validation split (never a
    training or test problem): what ``--tune`` chooses by."""
    return split_accuracy(model, c, "validation")


def run_grid(sides: dict, model: str, methods, seeds, budget: float, threads: int, c: dict, quick: bool,
             log, side_by_side: bool = False, grids: dict | None = None, store=None, key_of=None) -> dict:
    """:func:`tune` over real runs (``sides[method]``: :func:`run_es` / :func:`run_grpo`): every setting
    trained on every tuning seed, scored by :func:`validation_accuracy`; ``quick``: two settings each.
    ``side_by_side``: each method's i-th setting runs beside the others' i-th on the same seed, started
    together (:func:`concurrently`), before :func:`tune` reads the scores. ``grids``: each method's grid
    instead of ``llm_tuning.GRIDS`` (``--grid``: a pre-registration's own). ``store``
    (:class:`~hyperscalees.benchmarks.run_store.RunStore`) with ``key_of(method, seed, settings)``: each
    finished cell (each finished pair, side by side) is saved as ``tuning/METHOD_seedS_settingI`` and read
    back instead of trained when the study runs again (a study spanning sessions)."""
    grids = {m: (grids or GRIDS)[m][:2] if quick else (grids or GRIDS)[m] for m in methods}
    log(f"llm_vs_grpo: tuning on seeds {list(seeds)}: {sum(map(len, grids.values()))} settings x "
        f"{len(seeds)} seeds x {budget:g} s" + (", side by side" if side_by_side else ""))

    store = store or RunStore(None)
    key_of = key_of or (lambda m, seed, settings: {})
    name = lambda m, seed, i: f"tuning/{m}_seed{seed}_setting{i}"  # noqa: E731

    def trained(m, seed, settings):
        rec = sides[m](model, seed, budget, threads, c, settings, validate=True)
        if stopped_early(rec):
            log(f"llm_vs_grpo: tuning {settings}: {stopped_early(rec)}")
        return rec

    def score(rec):
        return rec["validation"]["accuracy"] if rec["status"] == "ok" else None

    records = {}  # (method, seed, setting index) -> the run's record, saved or just trained
    for i in range(max(map(len, grids.values()))):
        for seed in seeds:
            cell = [m for m in methods if i < len(grids[m])]
            keys = {m: key_of(m, seed, dict(grids[m][i])) for m in cell}
            saved = {m: store.load(name(m, seed, i), keys[m]) for m in cell}
            if all(r is not None for r in saved.values()):
                log(f"llm_vs_grpo: tuning {cell} setting {i} seed {seed}: read back from {store.folder}")
                records.update({(m, seed, i): saved[m] for m in cell})
                continue
            # side by side a pair runs together (and again whole), else one cell at a time, each kept when done
            for group in ([cell] if side_by_side else [[m] for m in cell]):
                if not side_by_side and saved[group[0]] is not None:
                    records[(group[0], seed, i)] = saved[group[0]]
                    continue
                done = concurrently([lambda m=m: trained(m, seed, dict(grids[m][i])) for m in group])
                for m, rec in zip(group, done):
                    store.save(name(m, seed, i), keys[m], rec)
                    records[(m, seed, i)] = rec
    # tune() passes a copy of the grid's entry: its index finds the cell
    train = lambda m, seed, settings: score(records[(m, seed, grids[m].index(settings))])  # noqa: E731
    tuning = tune(grids, seeds, train, log=log)
    log(f"llm_vs_grpo: chosen {({m: t['chosen'] for m, t in tuning.items()})}")
    return tuning
