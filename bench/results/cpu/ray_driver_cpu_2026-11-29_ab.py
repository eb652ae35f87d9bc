"""Side by side, one process: the driver's CPU per step with the heap frozen or not, and with 1 or 2 torch threads in the
driver; digits on 2 workers, chunks 512 (4/step) and 128 (16/step); rounds interleaved."""
import json, os, tempfile, torch
from hyperscalees.benchmarks.distributed import workloads, timed_steps
from hyperscalees.distributed.ray import RayBackend, RayConfig, start_ray, stop_ray
recipe, _ = workloads(("digits",))["digits"]
start_ray(RayConfig(workers=2, temp_dir=tempfile.mkdtemp(prefix="hsr", dir="/tmp")))
res = {}
try:
    for rnd in range(3):
        for chunk in (512, 128):
            for freeze in (True, False):
                for threads in (1, 2):
                    torch.set_num_threads(threads)
                    b = RayBackend(recipe, workers=2, chunk=chunk); b.freeze_heap = freeze
                    s, br = timed_steps(b, 6, 2)
                    k = f"chunk{chunk} freeze={freeze} threads={threads}"
                    res.setdefault(k, []).append((s * 1000, br["driver"]["coordinator_cpu"]))
                    print(rnd, k, round(s * 1000, 1), round(br["driver"]["coordinator_cpu"], 2), flush=True)
finally:
    stop_ray()
for k, v in res.items():
    st = sorted(x[0] for x in v); cpu = sorted(x[1] for x in v)
    print(f"{k}: step median {st[1]:.1f} ms, coordinator_cpu median {cpu[1]:.2f} ms (of {len(v)})")
print("load", os.getloadavg())
