"""Rebuild the `python bench/rl_vs_ppo.py` report (table, JSON, plot) from the run records of `--runs-dir`.

Usage:
    PYTHONPATH=src python bench/rl_report.py RUNS_DIR [--plot OUT.png] [--out OUT] [--note TEXT ...]

`rl_vs_ppo.py --runs-dir DIR` saves every run as DIR/ENV_METHOD_seedS.json. Runs of one protocol taken in
several invocations (e.g. CartPole in one, Pendulum in another, a method's extra seeds in a third)
land in the same folder; this reads them all back and reports them as one `rl_vs_ppo.py` run would
(:func:`rl_vs_ppo.summarize_env` and :func:`build_report`, nothing recomputed
differently). Every record must share one budget and thread count. `environment` in the output is
this process's torch and machine, with the runs' thread count and the range of the records' 1-minute
`load_before` (`load_avg_1m_runs`: min, max; rl_vs_ppo.py reads it as each run returns, so it is the load
at the end of each run).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import rl_vs_ppo as rl


def load_runs(runs_dir: Path) -> tuple[dict, float, int]:
    """{env: {method: [record, ...] by seed}}, the budget and the thread count of the records."""
    found: dict[str, dict[str, list[dict]]] = {}
    budgets, threads = set(), set()
    for f in sorted(runs_dir.glob("*.json")):
        rec = json.loads(f.read_text())
        budgets.add(rec["budget_s"])
        threads.add(rec["threads"])
        found.setdefault(rec["env"], {}).setdefault(rec["method"], []).append(rec)
    if len(budgets) != 1 or len(threads) != 1:
        raise SystemExit(f"{runs_dir}: runs of different budgets {sorted(budgets)} or threads {sorted(threads)}")
    envs = {e: {m: sorted(found[e][m], key=lambda r: r["seed"]) for m in rl.METHODS if m in found[e]}
            for e in rl.THRESHOLDS if e in found}
    return envs, budgets.pop(), threads.pop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs_dir", type=Path)
    ap.add_argument("--plot", type=Path, default=None, help="draw eval return vs wall clock to this PNG")
    ap.add_argument("--out", type=Path, default=None, help="also write the table and JSON line here")
    ap.add_argument("--note", nargs="*", default=[], help="extra note lines for the report")
    args = ap.parse_args(argv)
    envs, budget, threads = load_runs(args.runs_dir)
    results = {e: rl.summarize_env(e, runs) for e, runs in envs.items()}
    notes = [rl.plot_curves(results, args.plot)] if args.plot else []
    notes += [f"every run's record: {args.runs_dir}/ENV_METHOD_seedS.json", *args.note]
    report = rl.build_report(results, budget, threads, notes)
    loads = [r["load_before"] for e in envs.values() for rs in e.values() for r in rs if "load_before" in r]
    env = {k: v for k, v in report.summary["environment"].items() if not k.startswith("load")}
    report.summary["environment"] = {**env, "threads": threads,
                                     "load_avg_1m_runs": [round(min(loads), 2), round(max(loads), 2)] if loads else None}
    text = report.table() + "\n" + report.to_json() + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
