"""The driver's CPU per step, flat against group coordinators, at the same 8 workers (issue 41).

    python bench/ray_groups_cost.py [--rounds 3] [--steps 6] [--out FILE]

Digits (2,048 members) on a local Ray of 2 CPUs: 8 workers reserving a quarter CPU each, handed their
chunks by the driver (flat: 16 chunks a step) or by group coordinators of 2, 4 and 8 workers (the driver
hands out 8, 4 and 2). Rounds interleaved, medians reported; ``coordinator_cpu`` is the driver process's
CPU while it hands out and collects a step's chunks (``backend.breakdown()``), ``step_ms`` the wall
clock of a step (on 2 cores shared by 8 workers, the groups' coordinators and the driver: a check that
nothing got slower, not a speed-up). Every configuration must end with the same weights bit for bit.
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

CONFIGS = {"flat": 1, "groups of 2": 2, "groups of 4": 4, "groups of 8": 8}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    from hyperscalees.benchmarks.distributed import workloads
    from hyperscalees.distributed.ray import RayBackend, RayConfig, start_ray, stop_ray
    torch.set_num_threads(1)
    recipe, _ = workloads(("digits",))["digits"]
    start_ray(RayConfig(workers=2, temp_dir=tempfile.mkdtemp(prefix="hsr", dir="/tmp")))
    load0, rows, finals = os.getloadavg(), {k: [] for k in CONFIGS}, {}
    try:
        for rnd in range(a.rounds):
            for name, k in CONFIGS.items():
                b = RayBackend(recipe, RayConfig(workers=8, group_size=k, cpus_per_worker=0.25))
                times = []
                with b:
                    for i in range(a.warmup + a.steps):
                        if i == a.warmup:
                            b.reset_breakdown()
                        t0 = time.perf_counter()
                        b.step()
                        times.append(time.perf_counter() - t0)
                    br, rep = b.breakdown(), b.report()
                    finals[name] = {n: v.clone() for n, v in b.model.state_dict().items()}
                row = {"round": rnd, "config": name, "group_size": k, "driver_chunks_per_step":
                       rep["assigned"] / (a.warmup + a.steps), "step_ms": 1000 * statistics.median(times[a.warmup:]),
                       "coordinator_cpu_ms": br["driver"]["coordinator_cpu"], "wait_ms": br["driver"].get("wait"),
                       "wire_ms": br["driver"].get("wire")}
                rows[name].append(row)
                print(json.dumps(row), flush=True)
    finally:
        stop_ray()
    ref = finals["flat"]
    same = {n: all(torch.equal(w[key], ref[key]) for key in ref) for n, w in finals.items()}
    table = {n: {"driver_chunks_per_step": r[0]["driver_chunks_per_step"],
                 "coordinator_cpu_ms": statistics.median(x["coordinator_cpu_ms"] for x in r),
                 "step_ms": statistics.median(x["step_ms"] for x in r)} for n, r in rows.items()}
    summary = {"median_over_rounds": table, "same_weights_as_flat": same, "rounds": a.rounds, "steps": a.steps,
               "load_average": [load0[0], os.getloadavg()[0]], "cpus": os.cpu_count(), "date": time.strftime("%F %T")}
    lines = [f"{n:12s} driver chunks/step {t['driver_chunks_per_step']:5.1f}  coordinator CPU {t['coordinator_cpu_ms']:6.2f}"
             f" ms/step  step {t['step_ms']:7.1f} ms  same weights {same[n]}" for n, t in table.items()]
    text = "\n".join(lines) + "\n" + json.dumps(summary)
    print(text)
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0 if all(same.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
