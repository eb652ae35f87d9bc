"""Question: what does distributing a run cost: bytes on the wire, coordinator time, and speed-up?

Three measurements, one table:

- ``wire``: bytes per population member per step, measured on real ``wire.encode`` output:
  results (workers -> coordinator, all chunks of a step) and the shaped update
  (coordinator -> each worker), for float32, float16 and ternary payloads.
- ``coordinator``: the coordinator core alone (``ChunkQueue`` + decoding every result +
  concatenating + encoding the shaped vector), fed by simulated workers: threads that sleep
  ``chunk_ms`` per chunk and answer with pre-encoded messages. The coordinator thread's CPU
  time per step (``time.thread_time``) is its overhead; chunks / that time is how many chunk
  results per second it could absorb.
- ``ray`` (not with ``--quick``): ms per step of two workloads (digits, ~100 ms steps; population
  generation of a tiny random-weight Llama, >= 1 s steps) in-process and on 1 and 2 Ray worker
  actors (a local loopback Ray), side by side in this process, each step broken down by phase
  (driver: evaluate, wait, wire, shape, replay, hash; workers: evaluate, wire, replay, hash).
  On a shared machine this is noisy; the load average is reported with it.

Run: ``hyperscalees bench distributed [--quick] [--json]``.
"""
from __future__ import annotations

import os
import queue
import tempfile
import threading
import time

import torch

from ..distributed import LocalBackend, wire
from ..distributed.coordinator import ChunkQueue, ChunkTimes, split
from .base import Report, environment

QUESTION = "bytes per member on the wire, coordinator overhead per step, speed-up on 1 vs 2 Ray workers"
COLUMNS = ["part", "config", "value", "unit"]


def configs(quick: bool) -> dict:
    if quick:
        return dict(populations=(512,), chunks=(8, 64), chunk_members=16, sim_workers=4, chunk_ms=0.5, steps=3,
                    ray=False)
    return dict(populations=(512, 8192, 65536), chunks=(8, 64, 512, 4096), chunk_members=64, sim_workers=8,
                chunk_ms=1.0, steps=10, ray=True)


def wire_bytes(population: int, chunks: int) -> dict[str, tuple[float, float]]:
    """{encoding: (result bytes per member, update bytes per member per worker)}."""
    chunk = population // chunks
    signs = torch.tensor([0.5, -0.5]).repeat(population // 2)
    out = {}
    for name, enc in (("float32", wire.F32), ("float16", wire.F16), ("ternary", wire.TERNARY)):
        results = sum(len(wire.encode(wire.RESULT, 0, c.lo, signs[c.lo:c.hi], enc))
                      for c in split(population, chunk))
        update = len(wire.encode(wire.SHAPED, 0, 0, signs, enc))
        out[name] = (results / population, update / population)
    return out


def coordinator_step(n_chunks: int, members: int, workers: int, chunk_ms: float, step: int) -> tuple[float, float]:
    """(coordinator CPU seconds, wall seconds) of one step fed by sleeping worker threads."""
    chunks = split(n_chunks * members, members)
    messages = {c.index: wire.encode(wire.RESULT, step, c.lo, torch.randn(members)) for c in chunks}
    inbox: queue.Queue = queue.Queue()
    outboxes = [queue.Queue() for _ in range(workers)]

    def worker(w: int) -> None:
        while (c := outboxes[w].get()) is not None:
            time.sleep(chunk_ms / 1000)
            inbox.put((w, c, messages[c.index]))

    threads = [threading.Thread(target=worker, args=(w,), daemon=True) for w in range(workers)]
    for t in threads:
        t.start()
    q = ChunkQueue(step, chunks, ChunkTimes(straggler_timeout=60.0))
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    idle = set(range(workers))
    while not q.done:
        for w in sorted(idle):
            c = q.assign(w)
            if c is None:
                break
            idle.discard(w)
            outboxes[w].put(c)
        w, c, data = inbox.get()
        idle.add(w)
        q.complete(c.index, w, wire.decode(data, wire.RESULT, step, c.lo, c.count).values)
    shaped = torch.cat(q.results())
    wire.encode(wire.SHAPED, step, 0, shaped)
    cpu, wall = time.thread_time() - cpu0, time.perf_counter() - wall0
    for box in outboxes:
        box.put(None)
    for t in threads:
        t.join()
    return cpu, wall


def letter_a(prompt: str, completion: str) -> float:
    """The LLM workload's reward: any number will do, the benchmark times the step, not learning."""
    return completion.count("a") - 0.1 * len(completion)


class LLMRecipe:
    """Population generation of a tiny random-weight Llama (``llm.shapes``): a step of about a second
    or more, importable by Ray workers (it lives in the package)."""

    def __init__(self, population: int = 64, tokens: int = 32, hidden: int = 128, layers: int = 2):
        self.population, self.tokens, self.hidden, self.layers = population, tokens, hidden, layers

    def __call__(self):
        from .. import EGGROLL, llm
        from ..llm.shapes import random_causal_lm
        model, tok = random_causal_lm("llama", hidden=self.hidden, layers=self.layers, vocab=256)
        es = EGGROLL(model, population=self.population, sigma=0.05, lr=0.02, es_map=llm.evolving(model),
                     group_fitness="per_group")
        return es, llm.RewardFitness(tok, self.prompts, letter_a, llm.Sampling(max_new_tokens=self.tokens))

    @staticmethod
    def prompts(step: int) -> list[str]:
        return ["12+3=", "ab"] if step % 2 else ["hello", "7*6="]


class ReplayFitness:
    """Minus the mean square of the output for one fixed input: one cheap forward per member."""

    def __init__(self, width: int):
        self.x = torch.randn(1, width, generator=torch.Generator().manual_seed(0))

    def __call__(self, model, lo: int, hi: int, step: int):
        return -model(self.x.expand(hi - lo, -1)).pow(2).mean(dim=1)


class ReplayRecipe:
    """A step whose update replay costs about what its evaluation does: SmolLM2's MLP matrices (576 x 1536 and
    back) at 1,536 members, rank 1, one input each. In this regime every worker's replay of the whole update is
    what ``bench scale`` finds caps a thousand workers, and what a group sharing its weights splits."""

    def __init__(self, population: int = 1536, width: int = 576, hidden: int = 1536):
        self.population, self.width, self.hidden = population, width, hidden

    def __call__(self):
        from .. import EGGROLL
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(self.width, self.hidden, bias=False), torch.nn.Tanh(),
                                    torch.nn.Linear(self.hidden, self.width, bias=False))
        return EGGROLL(model, population=self.population, sigma=0.01, lr=0.01, seed=0), ReplayFitness(self.width)


WORKLOAD_RUNS = {"replay": ("local_1thread", "ray_2", "ray_group2", "ray_group2_shared")}  # default: every run


def workloads(names=("digits", "llm", "replay")) -> dict:
    """name -> (recipe, chunk): digits (~100 ms steps), LLM population generation (>= 1 s steps), and a step
    as much replay as evaluation (``replay``)."""
    from ..engine import make_config
    from ..engine.recipe import TaskRecipe
    made = {}
    if "digits" in names:
        made["digits"] = (TaskRecipe(make_config("digits", es={"seed": 0}).to_dict()), 512)
    if "llm" in names:
        made["llm"] = (LLMRecipe(), 16)
    if "replay" in names:
        made["replay"] = (ReplayRecipe(), 384)
    return made


def timed_steps(backend, steps: int, warmup: int) -> tuple[float, dict]:
    """(median seconds per step after ``warmup``, the backend's breakdown over the timed steps)."""
    times = []
    try:
        for i in range(warmup + steps):
            if i == warmup:
                backend.reset_breakdown()
            t0 = time.perf_counter()
            backend.step()
            if i >= warmup:
                times.append(time.perf_counter() - t0)
    finally:
        backend.close()
    return sorted(times)[len(times) // 2], backend.breakdown()


def ray_runs(log, names=("digits", "llm", "replay"), steps: int = 6, warmup: int = 2) -> dict:
    """{workload: {run: (s/step, breakdown)}}: in-process with 1 thread (each Ray worker has one) and
    with torch's threads, on 1 and 2 Ray workers, and on 2 with the driver replaying the update
    before sending it (the order before the cut) beside the overlapped order; a group of 2 with and
    without sharing its weights (``WORKLOAD_RUNS``: the runs of a workload, if not all)."""
    from ..distributed.ray import RayBackend, RayConfig, start_ray, stop_ray
    start_ray(RayConfig(workers=2, temp_dir=tempfile.mkdtemp(prefix="hsr", dir="/tmp")))
    threads, out = torch.get_num_threads(), {}
    two = min(threads, 2)   # the local Ray holds 2 CPUs: a worker of 2 threads against in-process at 2
    runs = {"local_1thread": lambda r, c: LocalBackend(r, chunk=c), "local": lambda r, c: LocalBackend(r, chunk=c),
            "ray_1": lambda r, c: RayBackend(r, workers=1, chunk=c),
            "ray_2": lambda r, c: RayBackend(r, workers=2, chunk=c),
            "ray_2_replay_first": lambda r, c: RayBackend(r, workers=2, chunk=c),
            "ray_1_in_flight_2": lambda r, c: RayBackend(r, workers=1, chunk=c, in_flight=2),
            "ray_2_in_flight_2": lambda r, c: RayBackend(r, workers=2, chunk=c, in_flight=2),
            "local_2threads": lambda r, c: LocalBackend(r, chunk=c),
            "ray_1_2threads": lambda r, c: RayBackend(r, workers=1, chunk=c, worker_threads=two, cpus_per_worker=two),
            "ray_group2": lambda r, c: RayBackend(r, workers=2, group_size=2, chunk=c),
            "ray_group2_shared": lambda r, c: RayBackend(r, workers=2, group_size=2, shared_replay=True, chunk=c)}
    try:
        for name, (recipe, chunk) in workloads(names).items():
            out[name] = {}
            for run_name, make in ((k, v) for k, v in runs.items() if k in WORKLOAD_RUNS.get(name, runs)):
                torch.set_num_threads({"local_1thread": 1, "local_2threads": two}.get(run_name, threads))
                backend = make(recipe, chunk)
                backend.overlap_replay = run_name != "ray_2_replay_first"
                out[name][run_name] = timed_steps(backend, steps, warmup)
                log(f"  {name} {run_name}: {out[name][run_name][0] * 1000:.0f} ms/step")
    finally:
        torch.set_num_threads(threads)
        stop_ray()
    return out


def breakdown_rows(rep: Report, runs: dict) -> None:
    """One row per workload, run and phase (driver and worker side), ms per step."""
    for name, by_run in runs.items():
        for run_name, (seconds, parts) in by_run.items():
            rep.rows.append(["ray", f"{name} {run_name}", seconds * 1000, "ms/step"])
            for side, phases in parts.items():
                for phase, ms in phases.items():
                    rep.rows.append(["breakdown", f"{name} {run_name} {side} {phase}", ms, "ms/step"])


def run(quick: bool = False, device: str = "cpu", log=print) -> Report:
    c = configs(quick)
    rep = Report("distributed", QUESTION, COLUMNS)
    worst_ternary = 0.0
    for p in c["populations"]:
        chunks = max(2, p // 4096) if p >= 8192 else 4
        for name, (res, upd) in wire_bytes(p, chunks).items():
            rep.rows.append(["wire", f"{name}, P={p}, {chunks} chunks", res, "result bytes/member"])
            rep.rows.append(["wire", f"{name}, P={p}", upd, "update bytes/member/worker"])
            if name == "ternary" and p == max(c["populations"]):
                worst_ternary = max(res, upd)
    rates, sustained = [], []
    for n in c["chunks"]:
        cpus, walls = zip(*(coordinator_step(n, c["chunk_members"], c["sim_workers"], c["chunk_ms"], s)
                            for s in range(c["steps"])))
        cpu, wall = sorted(cpus)[len(cpus) // 2], sorted(walls)[len(walls) // 2]
        rates.append(n / cpu)
        rep.rows.append(["coordinator", f"{n} chunks x {c['chunk_members']} members", cpu * 1000, "ms CPU/step"])
        rep.rows.append(["coordinator", f"{n} chunks, {c['sim_workers']} workers sleeping {c['chunk_ms']} ms",
                         wall * 1000, "ms wall/step"])
        rep.rows.append(["coordinator", f"{n} chunks", n / cpu, "chunk results/s (CPU-bound)"])
        rep.rows.append(["coordinator", f"{n} chunks, {c['sim_workers']} sleeping workers", n / wall,
                         "chunk results/s (sustained, wall)"])
        sustained.append(n / wall)
    rep.summary["ternary_bytes_per_member"] = worst_ternary
    rep.summary["coordinator_min_results_per_s"] = min(rates)
    rep.summary["coordinator_sustained_results_per_s"] = max(sustained)
    if c["ray"]:
        load0 = os.getloadavg()[0]
        runs = ray_runs(log)
        breakdown_rows(rep, runs)
        t = {k: v[0] for k, v in runs["digits"].items()}
        rep.summary.update(local_ms_per_step=t["local"] * 1000, ray1_ms_per_step=t["ray_1"] * 1000,
                           ray2_ms_per_step=t["ray_2"] * 1000, speedup_2_over_1=t["ray_1"] / t["ray_2"],
                           load_average=[load0, os.getloadavg()[0]])
        for w in runs:  # a group of 2 sharing its weights (each replays half) against one that does not
            rep.summary[f"{w}_group2_over_group2_shared"] = runs[w]["ray_group2"][0] / runs[w]["ray_group2_shared"][0]
        for w in (w for w in runs if w != "replay"):  # the acceptance's ratios: 1 worker against in-process, 2 against 1
            rep.summary[f"{w}_ray1_over_local_1thread"] = {
                f"ray_1{k}": runs[w][f"ray_1{k}"][0] / runs[w]["local_1thread"][0] for k in ("", "_in_flight_2")}
            rep.summary[f"{w}_speedup_2_over_1"] = {
                f"in_flight_{n}": runs[w][f"ray_1{k}"][0] / runs[w][f"ray_2{k}"][0] for n, k in ((1, ""), (2, "_in_flight_2"))}
            rep.summary[f"{w}_ray1_2threads_over_local_2threads"] = runs[w]["ray_1_2threads"][0] / runs[w]["local_2threads"][0]
        rep.details["ray"] = {w: {r: {"ms_per_step": v[0] * 1000, "breakdown_ms": v[1]} for r, v in by.items()}
                              for w, by in runs.items()}
        rep.notes.append("ray: digits (population 2048, chunk 512) and LLM population generation (tiny random "
                         "Llama, 64 members x 2 prompts x 32 tokens, chunk 16), median of 6 steps after 2; "
                         "local_1thread has one torch thread, as each Ray worker; ray_2_replay_first: the driver "
                         "replays the update before sending it (the order before the cut); *_in_flight_2: each "
                         "worker's next chunk queued behind its running one (in_flight=2); ray_1_2threads: one worker of 2 "
                         "threads (worker_threads=2) against local_2threads, in-process at 2; ray_group2(_shared): a "
                         "group of 2 workers (group_size=2), sharing one copy of the weights and each replaying half "
                         "(shared_replay), on every workload and on replay (SmolLM2's MLP matrices 576x1536x576, "
                         "1,536 members, one input each: as much replay as evaluation); every process shares "
                         f"this machine's {os.cpu_count()} cores (load average before/after in load_average)")
    rep.notes.append(f"simulated workers: threads sleeping {c['chunk_ms']} ms per chunk; coordinator CPU is "
                     "time.thread_time of its thread (queue, decode, concatenation, shaped encode)")
    rep.details["environment"] = environment()
    return rep
