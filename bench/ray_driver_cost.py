"""Driver CPU per step of RayBackend as a function of chunks per step (digits, 1 and 2 workers).
Fits coordinator_cpu = a + b * chunks: b is the per-chunk driver CPU, a the per-step part."""
import json
import os
import tempfile

import numpy as np
import torch

from hyperscalees.benchmarks.distributed import workloads, timed_steps
from hyperscalees.distributed.ray import RayBackend, RayConfig, start_ray, stop_ray

torch.set_num_threads(1)
recipe, _ = workloads(("digits",))["digits"]
start_ray(RayConfig(workers=2, temp_dir=tempfile.mkdtemp(prefix="hsr", dir="/tmp")))
out = []
try:
    for workers in (1, 2):
        for chunk in (1024, 256, 64, 16):
            b = RayBackend(recipe, workers=workers, chunk=chunk)
            s, br = timed_steps(b, 4, 2)
            d = br.get("driver", {})
            row = dict(workers=workers, chunk=chunk, chunks=2048 // chunk, step_ms=s * 1000,
                       cpu_ms=d.get("coordinator_cpu"), wait_ms=d.get("wait"), wire_ms=d.get("wire"),
                       update_ms=d.get("update"), replay_ms=d.get("replay"), worker_eval_ms=br.get("workers", {}).get("evaluate"))
            out.append(row); print(json.dumps(row), flush=True)
finally:
    stop_ray()
for w in (1, 2):
    rows = [r for r in out if r["workers"] == w]
    x = np.array([r["chunks"] for r in rows], float); y = np.array([r["cpu_ms"] for r in rows], float)
    b, a = np.polyfit(x, y, 1)
    print(f"workers {w}: coordinator_cpu = {a:.2f} ms/step + {b:.3f} ms/chunk; load {os.getloadavg()}")
