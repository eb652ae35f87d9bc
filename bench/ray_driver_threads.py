"""The driver's CPU per step with its replay at one torch thread (``RayConfig.driver_threads=1``, the
default) against at the process's two (``None``), side by side (issue 41).

    python bench/ray_driver_threads.py [--rounds 3] [--steps 6] [--out FILE]

Digits on 2 Ray workers, the driver process at 2 torch threads, chunks of 512 (4 a step) and 128 (16 a
step), rounds interleaved, medians reported. ``coordinator_cpu`` is the driver's CPU while it hands out
and collects a step's chunks; the replay's OpenMP threads, when it runs on two, spin on into it. Both
settings must end with the same weights bit for bit (the update's bits do not depend on threads).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    from hyperscalees.benchmarks.distributed import timed_steps, workloads
    from hyperscalees.distributed.ray import RayBackend, RayConfig, start_ray, stop_ray
    recipe, _ = workloads(("digits",))["digits"]
    start_ray(RayConfig(workers=2, temp_dir=tempfile.mkdtemp(prefix="hsr", dir="/tmp")))
    torch.set_num_threads(2)
    load0, res, finals = os.getloadavg(), {}, {}
    try:
        for rnd in range(a.rounds):
            for chunk in (512, 128):
                for threads in (1, None):
                    b = RayBackend(recipe, RayConfig(workers=2, driver_threads=threads), chunk=chunk)
                    s, br = timed_steps(b, a.steps, a.warmup)
                    finals[(chunk, threads)] = {n: v.clone() for n, v in b.model.state_dict().items()}
                    key = f"chunk {chunk} driver_threads={threads}"
                    res.setdefault(key, []).append((1000 * s, br["driver"]["coordinator_cpu"]))
                    print(json.dumps({"round": rnd, "run": key, "step_ms": 1000 * s,
                                      "coordinator_cpu_ms": br["driver"]["coordinator_cpu"]}), flush=True)
    finally:
        stop_ray()
    same = all(all(torch.equal(finals[(c, None)][n], finals[(c, 1)][n]) for n in finals[(c, 1)]) for c in (512, 128))
    table = {k: {"step_ms": statistics.median(x[0] for x in v), "coordinator_cpu_ms": statistics.median(x[1] for x in v)}
             for k, v in res.items()}
    summary = {"median_over_rounds": table, "same_weights": same, "torch_threads": 2, "rounds": a.rounds,
               "load_average": [load0[0], os.getloadavg()[0]], "cpus": os.cpu_count(), "date": time.strftime("%F %T")}
    text = "\n".join(f"{k:32s} coordinator CPU {t['coordinator_cpu_ms']:6.2f} ms/step  step {t['step_ms']:6.1f} ms"
                     for k, t in table.items()) + f"\nsame weights: {same}\n" + json.dumps(summary)
    print(text)
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
