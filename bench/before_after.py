"""Question: is a commit's ES step any slower than its parent's? Two source trees, side by side.

For each configuration of ``bench throughput`` named below, a fresh interpreter per tree times
plain inference and one full EGGROLL step (``benchmarks.base``: the same workload, chunks and
timing loop as ``hyperscalees bench throughput``), then the other tree, round after round, so
load drift hits both alike. Reported: each tree's median ES tokens/s, ES/inference, and the
after/before ratio of the ES step time. A dev tool: run from a source checkout.

    .venv/bin/python bench/before_after.py BEFORE_SRC AFTER_SRC [--rounds N] [--out FILE]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys

CONFIGS = [("mlp", 256, 16, 1024), ("mlp", 1024, 16, 1024), ("lm", 256, 16, 1024), ("lm", 512, 64, 256),
           ("mlp", 512, 1, 4096)]
PROBE = r"""
import json, sys, torch
from hyperscalees.benchmarks.base import chunked_inference, es_step, make_workload, side_by_side
from hyperscalees.nn import EGGROLL
kind, width, seq, pop = json.loads(sys.argv[1])
chunk = min(pop, max(2, 4096 // seq) - max(2, 4096 // seq) % 2)
work = make_workload(kind, width, seq, pop)
es = EGGROLL(work.model, population=pop, sigma=0.01, rank=1, lr=1e-3, optimizer="adam", seed=0)
t = side_by_side({"inference": chunked_inference(work, pop, chunk), "eggroll": es_step(es, work, chunk)}, 2, 7)
print(json.dumps({k: v.median for k, v in t.items()}))
"""


def commit_of(src: str) -> str:
    out = subprocess.run(["git", "-C", src, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def two_trees(description: str, repeats: str, default: int) -> argparse.Namespace:
    """The command line every before/after script takes: two source trees, a repeat count, --out."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument(f"--{repeats}", type=int, default=default)
    p.add_argument("--out")
    return p.parse_args()


def record(load0, **fields) -> dict:
    """What every saved before/after result starts with: command, date, machine, load at start and end."""
    return {"command": " ".join([os.path.basename(sys.executable), *sys.argv]),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": f"{platform.node()} {os.cpu_count()} cores", "load": [load0, os.getloadavg()], **fields}


def save(result: dict, out: str | None) -> None:
    text = json.dumps(result, indent=1)
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")


def main() -> None:
    a = two_trees(__doc__.splitlines()[0], "rounds", 3)
    load0 = os.getloadavg()
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    samples = {(c, side): [] for c in CONFIGS for side in ("before", "after")}
    for _ in range(a.rounds):
        for c in CONFIGS:
            for side, src in (("before", a.before), ("after", a.after)):
                out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(c)], capture_output=True, text=True,
                                     env={**env, "PYTHONPATH": src}, check=True).stdout
                samples[(c, side)].append(json.loads(out.strip().splitlines()[-1]))
    rows = []
    for c in CONFIGS:
        kind, width, seq, pop = c
        row = {"config": f"{kind} d={width} T={seq} N={pop}"}
        for side in ("before", "after"):
            s = samples[(c, side)]
            es = statistics.median(x["eggroll"] for x in s)
            inf = statistics.median(x["inference"] for x in s)
            row[f"{side}_es_tok_s"] = round(pop * seq / es)
            row[f"{side}_es_over_inference"] = round(inf / es, 3)
        row["after_over_before_step_time"] = round(row["before_es_tok_s"] / row["after_es_tok_s"], 3)
        rows.append(row)
    save(record(load0, threads=env["OMP_NUM_THREADS"], before_commit=commit_of(a.before),
                after_commit=commit_of(a.after), rows=rows), a.out)


if __name__ == "__main__":
    main()
