"""Question: what does ``import hyperscalees`` cost, in modules and seconds, at two commits side by side?

Each run is a fresh interpreter that imports torch first, then times ``import hyperscalees`` alone
(torch's own import is the same for every commit). The two source trees alternate, so load drift
hits both alike. A dev tool: run it from a source checkout.

    .venv/bin/python bench/import_time.py BEFORE_SRC AFTER_SRC [--runs N] [--out FILE]
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

PROBE = ("import torch, time, sys; t = time.perf_counter(); import hyperscalees; dt = time.perf_counter() - t; "
         "mods = sorted(m for m in sys.modules if m.startswith('hyperscalees')); "
         "print(dt, len(mods), len(sys.modules), sorted({m.split('.')[1] for m in mods if '.' in m}))")


def commit_of(src: str) -> str:
    out = subprocess.run(["git", "-C", src, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--out")
    a = p.parse_args()
    load0 = os.getloadavg()
    rows: dict[str, list] = {"before": [], "after": []}
    for _ in range(a.runs):
        for name, src in (("before", a.before), ("after", a.after)):
            out = subprocess.run([sys.executable, "-c", PROBE], env={**os.environ, "PYTHONPATH": src},
                                 capture_output=True, text=True, check=True).stdout.split(" ", 3)
            rows[name].append((float(out[0]), int(out[1]), int(out[2]), out[3].strip()))
    result = {"command": " ".join([os.path.basename(sys.executable), *sys.argv]),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "machine": f"{platform.node()} {os.cpu_count()} cores", "load": [load0, os.getloadavg()], "runs": a.runs}
    for name, src in (("before", a.before), ("after", a.after)):
        r = rows[name]
        result[name] = {"commit": commit_of(src), "median_s": round(statistics.median(x[0] for x in r), 4),
                        "min_s": round(min(x[0] for x in r), 4), "hyperscalees_modules": r[0][1],
                        "all_modules": r[0][2], "rooms": r[0][3]}
    text = json.dumps(result, indent=1)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
