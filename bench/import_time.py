"""Question: what does ``import hyperscalees`` cost, in modules and seconds, at two commits side by side?

Each run is a fresh interpreter that imports torch first, then times ``import hyperscalees`` alone
(torch's own import is the same for every commit). The two source trees alternate, so load drift
hits both alike. A dev tool: run it from a source checkout.

    .venv/bin/python bench/import_time.py BEFORE_SRC AFTER_SRC [--runs N] [--out FILE]
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys

from before_after import commit_of, record, save, two_trees  # bench/ is on sys.path: this script's directory

PROBE = ("import torch, time, sys; t = time.perf_counter(); import hyperscalees; dt = time.perf_counter() - t; "
         "mods = sorted(m for m in sys.modules if m.startswith('hyperscalees')); "
         "print(dt, len(mods), len(sys.modules), sorted({m.split('.')[1] for m in mods if '.' in m}))")


def main() -> None:
    a = two_trees(__doc__.splitlines()[0], "runs", 10)
    load0 = os.getloadavg()
    rows: dict[str, list] = {"before": [], "after": []}
    for _ in range(a.runs):
        for name, src in (("before", a.before), ("after", a.after)):
            out = subprocess.run([sys.executable, "-c", PROBE], env={**os.environ, "PYTHONPATH": src},
                                 capture_output=True, text=True, check=True).stdout.split(" ", 3)
            rows[name].append((float(out[0]), int(out[1]), int(out[2]), out[3].strip()))
    result = record(load0, runs=a.runs)
    for name, src in (("before", a.before), ("after", a.after)):
        r = rows[name]
        result[name] = {"commit": commit_of(src), "median_s": round(statistics.median(x[0] for x in r), 4),
                        "min_s": round(min(x[0] for x in r), 4), "hyperscalees_modules": r[0][1],
                        "all_modules": r[0][2], "rooms": r[0][3]}
    save(result, a.out)


if __name__ == "__main__":
    main()
