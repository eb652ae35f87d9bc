"""Question: does a SIGKILL at a random instant ever leave a run that cannot be resumed, or resume inexactly?

Run:  .venv/bin/python bench/kill_resume.py [--kills 50] [--model xor|big|both] [--targeted] [--seed 0]
                                            [--out FILE]

For each model a chain of real ``hyperscalees train --checkpoint-every 1`` processes is killed
with SIGKILL at a random instant (uniform over a window that starts at the first checkpoint
the process commits), then restarted with ``--resume`` from whatever is on disk. After every
kill the run directory must load (``load_checkpoint``) and must not have gone back past a
step already seen committed. When a chain reaches its last step without being killed, its
files are compared with an uninterrupted run: model, strategy and task state bit for bit,
and every metrics row apart from wall time.

With ``--targeted`` the kill comes instead a uniform 0 to one-write-time after a temporary
file of a save appears, so most kills land inside a write (how the issue was measured).
``big`` is a 1→3072→3072→1 MLP (9.4 M parameters) whose checkpoint write takes a few hundred
ms; the write time and its share of a step-plus-write are measured in process and printed.

The processes are forked from a multiprocessing fork server that has imported torch and this
library once, so a kill costs a fraction of a second rather than an interpreter start. At
exit the resource tracker reports "leaked semaphore objects", one per killed process (tqdm's
lock): expected after SIGKILL, and harmless. Not part of the test suite (minutes of run time);
tests/engine/test_engine_kill.py kills at each step of the commit protocol instead.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from hyperscalees.nn.evaluate import evaluate
from hyperscalees.engine import build, load_checkpoint, make_config, read_rows, save_checkpoint
from hyperscalees.engine.checkpoint import STEP_FILE, committed_files
from hyperscalees.engine.files import TMP_PATTERN

MODELS = {
    # name: (task, flags, steps of a chain, kill window in seconds after the process's first commit)
    "xor": ("xor", ["--population", "64", "--seed", "7"], 150, 1.0),
    "big": ("poly", ["--population", "2", "--points", "2", "--hidden", "3072", "--seed", "7"], 24, 2.5),
}


PRELOAD = ["hyperscalees.cli.main", "torch._dynamo", "matplotlib.pyplot"]  # what a fresh process spends seconds on


def train_argv(model: str, directory: Path, resume: bool) -> list[str]:
    task, flags, steps, _ = MODELS[model]
    where = ["--resume", str(directory)] if resume else ["--out", str(directory), "--overwrite"]
    return ["train", task, *flags, "--steps", str(steps), "--checkpoint-every", "1", "--eval-every", "5", *where,
            "--json"]


def cli(argv: list[str], log_path: str) -> None:
    """Body of a forked process: ``hyperscalees *argv``, its output into ``log_path``."""
    with open(log_path, "w") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        from hyperscalees.cli.main import main
        code = main(argv)
    sys.exit(code)


def start(ctx, argv: list[str], work: Path):
    proc = ctx.Process(target=cli, args=(argv, str(work / "child.log")))
    proc.start()
    return proc


def pointer_mtime(directory: Path) -> int | None:
    try:
        return (directory / "checkpoint.json").stat().st_mtime_ns
    except FileNotFoundError:
        return None


def committed_step(directory: Path) -> int | None:
    try:
        return json.loads((directory / "checkpoint.json").read_text())["step"]
    except (FileNotFoundError, ValueError, KeyError):
        return None


def same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def identical_runs(a: Path, b: Path) -> bool:
    ca, cb = load_checkpoint(a), load_checkpoint(b)
    rows = [[{k: v for k, v in r.items() if k != "time"} for r in read_rows(d / "metrics.jsonl")] for d in (a, b)]
    return (ca.step == cb.step and same(ca.model, cb.model) and same(ca.strategy, cb.strategy)
            and same(ca.task, cb.task) and rows[0] == rows[1])


def write_timing(model: str, work: Path) -> tuple[float, float]:
    """(median ms of one checkpoint write, share of a --checkpoint-every 1 loop spent writing), in process."""
    task_name, flags, _, _ = MODELS[model]
    es_keys = {"--population": "population", "--seed": "seed"}
    es = {es_keys[k]: int(v) for k, v in zip(flags[::2], flags[1::2]) if k in es_keys}
    options = {k[2:]: int(v) for k, v in zip(flags[::2], flags[1::2]) if k not in es_keys}
    cfg = make_config(task_name, es=es, options=options)
    task, _, es_ = build(cfg)
    steps, saves = [], []
    with torch.no_grad():
        for _ in range(8):
            t0 = time.perf_counter()
            es_.tell(evaluate(es_, lambda m, lo, hi, step: task.fitness(m, lo, hi, step=step)))
            t1 = time.perf_counter()
            save_checkpoint(work / "timing", es_, cfg.to_dict())
            steps.append(t1 - t0)
            saves.append(time.perf_counter() - t1)
    shutil.rmtree(work / "timing")
    return 1000 * statistics.median(saves), sum(saves) / (sum(saves) + sum(steps))


def where_killed(directory: Path) -> str:
    """What the kill interrupted, read from the files it left."""
    names = {p.name for p in directory.iterdir()}
    if any(TMP_PATTERN.match(n) for n in names):
        return "writing a file"
    keep = committed_files(directory) or set()
    if any(STEP_FILE.match(n) and n not in keep for n in names):
        return "between files and commit, or deleting old files"
    return "outside a checkpoint write"


def wait_for_a_write(directory: Path, proc, timeout: float = 30.0) -> bool:
    """Block until a save's temporary file exists in ``directory`` (False if the process ends first)."""
    t0 = time.monotonic()
    while proc.is_alive() and time.monotonic() - t0 < timeout:
        with contextlib.suppress(FileNotFoundError):
            if any(TMP_PATTERN.match(name) for name in os.listdir(directory)):
                return True
        time.sleep(0.0005)
    return False


def measure(ctx, model: str, kills: int, rng: random.Random, work: Path, log, targeted: bool = False) -> dict:
    window = MODELS[model][3]
    reference = work / f"{model}-reference"
    proc = start(ctx, train_argv(model, reference, resume=False), work)
    proc.join()
    if proc.exitcode != 0:
        raise RuntimeError(f"the reference run failed: {(work / 'child.log').read_text()}")
    save_ms, share = write_timing(model, work)
    res = {"model": model, "mode": "targeted" if targeted else "random", "save_ms": round(save_ms, 1),
           "write_share": round(share, 2), "kills": 0,
           "unresumable": 0, "lost_commits": 0, "chains_finished": 0, "chains_identical": 0, "where": {},
           "errors": []}
    log(f"{model}: a checkpoint write takes {res['save_ms']} ms (median of 8), {share:.0%} of a step + write")
    run_dir = work / f"{model}-run"
    shutil.rmtree(run_dir, ignore_errors=True)
    while True:
        seen_before = pointer_mtime(run_dir)
        proc = start(ctx, train_argv(model, run_dir, resume=committed_step(run_dir) is not None), work)
        # enough kills, or nothing left but the final save: let the chain run to its end
        finishing = res["kills"] >= kills or committed_step(run_dir) == MODELS[model][2]
        while not finishing and proc.is_alive() and pointer_mtime(run_dir) == seen_before:
            time.sleep(0.002)
        if not finishing and proc.is_alive():
            before = committed_step(run_dir)
            if targeted:
                wait_for_a_write(run_dir, proc)
            time.sleep(rng.uniform(0, save_ms / 1000 if targeted else window))
            if proc.is_alive():
                os.kill(proc.pid, signal.SIGKILL)
                proc.join()
                res["kills"] += 1
                where = where_killed(run_dir)
                res["where"][where] = res["where"].get(where, 0) + 1
                try:
                    after = load_checkpoint(run_dir).step
                except (ValueError, FileNotFoundError, RuntimeError) as e:
                    res["unresumable"] += 1
                    res["errors"].append(str(e))
                    log(f"  kill {res['kills']}: UNRESUMABLE: {e}")
                    shutil.rmtree(run_dir)
                    continue
                if before is not None and after < before:
                    res["lost_commits"] += 1
                log(f"  kill {res['kills']}: {where}; committed step {after}; "
                    f"files {sorted(p.name for p in run_dir.iterdir())}")
                continue
        proc.join()
        if proc.exitcode != 0:
            raise RuntimeError(f"{model}: a resumed run failed ({proc.exitcode}): {(work / 'child.log').read_text()}")
        res["chains_finished"] += 1
        identical = identical_runs(reference, run_dir)
        res["chains_identical"] += identical
        log(f"  chain {res['chains_finished']} finished; identical to the uninterrupted run: {identical}")
        shutil.rmtree(run_dir)
        if res["kills"] >= kills:
            return res


def table(results: list[dict]) -> str:
    lines = ["| model | kill instants | write (ms) | share of loop writing | kills | unresumable | lost commits "
             "| chains finished | bit-identical |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['model']} | {r['mode']} | {r['save_ms']} | {r['write_share']:.0%} | {r['kills']} "
                     f"| {r['unresumable']} | {r['lost_commits']} | {r['chains_finished']} | {r['chains_identical']} |")
    lines.append("")
    for r in results:
        lines.append(f"{r['model']} ({r['mode']}): kills by what they interrupted: {r['where']}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=50, help="SIGKILLs per model (default: 50)")
    ap.add_argument("--model", choices=("xor", "big", "both"), default="both", help="which run to kill")
    ap.add_argument("--seed", type=int, default=0, help="seed of the kill instants")
    ap.add_argument("--targeted", action="store_true", help="kill within one write time of a save's first file")
    ap.add_argument("--out", type=Path, default=None, help="also write the table and JSON to this file")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)
    models = ["xor", "big"] if args.model == "both" else [args.model]
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    with tempfile.TemporaryDirectory(prefix="kill_resume_") as work:
        results = [measure(ctx, m, args.kills, rng, Path(work), log, args.targeted) for m in models]
    text = table(results)
    line = json.dumps({"bench": "kill_resume", "torch": torch.__version__, "cpu_count": os.cpu_count(),
                       "results": results})
    print(text)
    print(line)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n" + line + "\n")
    return 0 if all(r["unresumable"] == 0 and r["lost_commits"] == 0
                    and r["chains_identical"] == r["chains_finished"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
