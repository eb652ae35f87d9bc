"""Question: how does a distributed ES step scale from 1 to 10,000 workers, and what stops it?

A small pure model of one step at W workers, calibrated on costs measured here:

- evaluation: each worker runs ceil(P / 2W) antithetic pairs at ``member_s`` a member; the part
  beyond P·member_s/W (members do not divide evenly, or there are fewer pairs than workers) is
  ``granularity``;
- coordinator: ``chunk_s`` of driver CPU per chunk result and per update sent (queue, task
  submission, decode) plus ``byte_s`` per result byte; the share that the evaluation does not
  hide (at least the last round of chunks) is on the step;
- wire: a round trip of ``latency_s`` per chunk a worker runs, every result byte into and the
  shaped vector out to each worker through the driver's link of ``bandwidth`` bytes/s;
- shape: the driver's shaping; replay: one replica's update replay (every worker replays the
  whole update, in parallel with the driver since the update is sent before the driver's own).

T(W) is their sum; efficiency = T(1) / (W·T(W)); the bottleneck at W is the largest phase.
Costs: the coordinator's per chunk and per byte from the coordinator core fed by simulated
workers (``benchmarks.distributed``), per member and replay from in-process steps at one
thread (digits, the egg LM task ``lm``, RL). SmolLM2-135M is too big to step here: its replay is
the measured replay rate of ``lm`` (seconds per multiply-add of (A⊙f)Bᵀ) times its own P·r·Σmn,
its per-member cost a measured completion (``PER_COMPLETION``); the replay rate is measured on
its MLP matrix. Without ``--quick`` the model is
checked against digits on 1 and 2 Ray workers (per-member cost from the workers' own timing, no
fitted constant); what the 1-worker step has beyond its prediction is taken as Ray's cost per chunk. Run: ``hyperscalees bench scale [--quick] [--json] [--plot PNG]``.
"""
from __future__ import annotations

import math
import os
import tempfile
import time
from dataclasses import dataclass, replace

import torch

from ..distributed import LocalBackend, wire
from . import scale_threads
from .base import Report, environment
from .distributed import coordinator_step

QUESTION = "predicted step time, efficiency and bottleneck of distributed ES at 1 to 10,000 workers"
COLUMNS = ["workload", "workers", "step_s", "efficiency", "bottleneck"]
WORKERS = (1, 2, 4, 10, 32, 100, 316, 1000, 3162, 10000)
LATENCY_S = 50e-6        # stated: one-way latency inside one data centre
BANDWIDTH = 1.25e9       # stated: 10 Gb/s, the driver's link
# SmolLM2-135M's evolved matrices (llm.evolving: every block matrix, no embedding): 30 layers of
# q, o 576x576; k, v 576x192; gate, up 576x1536; down 1536x576.
SMOLLM2_MN = 30 * (2 * 576 * 576 + 2 * 576 * 192 + 3 * 576 * 1536)
# A measured SmolLM2-135M completion: 35-38 s per ES step of 128 completions of 48 new tokens, one
# CPU thread (docs/results/archive.md, llm_demo2_step_cost); scaled linearly in tokens.
PER_COMPLETION = (36.5 / 128, 48)
COUNTDOWN = dict(population=1536, rank=1, tokens=256)  # the seeds' regime (stated)
PHASES = ("evaluation", "granularity", "coordinator", "wire", "shape", "replay")
# SmolLM2 with the lifts, all built: (label, group size, population, threads per worker, replay shared by a group)
WHAT_IF = (("flat, P=16384", 1, 16384, 1, False), ("groups of 8, P=1536", 8, COUNTDOWN["population"], 1, False),
           ("groups of 8, P=16384", 8, 16384, 1, False), ("8-thread workers (one a node), P=16384", 1, 16384, 8, False),
           ("groups of 8 sharing the replay, P=1536", 8, COUNTDOWN["population"], 1, True),
           ("groups of 8 sharing the replay, P=16384", 8, 16384, 1, True),
           ("groups of 16 sharing the replay, P=16384", 16, 16384, 1, True))


@dataclass(frozen=True)
class Costs:
    """What one step costs, in seconds and bytes; the model's only input."""
    population: int
    member_s: float
    replay_s: float = 0.0
    shape_s: float = 0.0
    chunk_s: float = 0.0
    byte_s: float = 0.0
    result_bytes: float = 4.0     # per member
    update_bytes: float = 0.0     # the shaped vector, to each worker
    latency_s: float = 0.0
    bandwidth: float = math.inf
    chunks_per_worker: int = 2
    pair: int = 2
    group_size: int = 1           # > 1: a coordinator per group of workers (RayConfig.group_size), see :func:`phases`
    threads: int = 1              # torch threads per worker (RayConfig.worker_threads): workers / threads processes
    eval_serial: float = 0.0      # Amdahl's serial fraction of a member's evaluation over a worker's threads
    replay_serial: float = 0.0    # ... and of the update replay (see :func:`thread_speedup`)
    shared_replay: bool = False   # a group's workers share its node's weights, each replaying 1/group_size of it

    def __post_init__(self):
        if self.threads < 1 or not (0 <= self.eval_serial <= 1 and 0 <= self.replay_serial <= 1):
            raise ValueError(f"threads must be >= 1 and the serial fractions in [0, 1], got {self.threads}, "
                             f"{self.eval_serial} and {self.replay_serial}")
        if self.population < self.pair or self.member_s < 0:
            raise ValueError(f"population must be >= {self.pair} and member_s >= 0, got {self.population} and "
                             f"{self.member_s}")


def thread_speedup(threads: int, serial: float) -> float:
    """Amdahl: how much faster ``threads`` threads run what one thread does, ``serial`` of it unparallel."""
    return 1.0 / (serial + (1.0 - serial) / threads)


def phases(c: Costs, workers: int) -> dict[str, float]:
    """Seconds of each phase of one step at ``workers`` cores (their sum is the step).

    A worker is a process of ``threads`` threads (``RayConfig.worker_threads``), so ``workers / threads``
    of them: it evaluates and replays :func:`thread_speedup` times faster than one thread, and replays
    each update once for all its cores, where one-thread workers replay it once per core.

    ``group_size`` > 1 prices the group coordinators (``RayConfig(group_size=k)``, ``distributed/ray_groups.py``):
    the driver exchanges one call a round and one update with each group; each group's coordinator hands out
    its own workers' chunks, the groups in parallel; one more hop of latency. With ``shared_replay`` a group's
    workers share one copy of the weights (``RayConfig.shared_replay``) and each replays a part: the replay
    divides by the group's size (parts are whole matrices; SmolLM2's 210 split within 1%)."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if c.group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {c.group_size}")
    threads = min(c.threads, workers)
    workers = -(-workers // threads)                         # from here on, workers are processes
    fast = thread_speedup(threads, c.eval_serial)
    pairs = -(-c.population // c.pair)
    per_worker = -(-pairs // workers)                       # pairs the busiest worker runs
    chunks = min(pairs, c.chunks_per_worker * workers)
    rounds = -(-chunks // min(workers, pairs))               # chunks the busiest worker runs
    useful = c.population * c.member_s / (workers * fast)    # threads below perfect show here
    evaluation = per_worker * c.pair * c.member_s / fast
    calls = chunks + workers                                 # chunk results in, updates out: the driver's
    hops = 1
    if c.group_size > 1:
        groups = -(-workers // c.group_size)
        calls = (rounds + 1) * groups + -(-chunks // groups) + min(c.group_size, workers)  # driver's, then a group's
        hops = 2
    coordinator = calls * c.chunk_s + c.population * c.result_bytes * c.byte_s
    exposed = max(coordinator - evaluation, coordinator / rounds)   # the last round is never hidden
    wire_s = hops * (2 * rounds + 1) * c.latency_s + \
        (c.population * c.result_bytes + workers * c.update_bytes) / c.bandwidth
    return {"evaluation": useful, "granularity": evaluation - useful, "coordinator": exposed, "wire": wire_s,
            "shape": c.shape_s, "replay": c.replay_s / thread_speedup(threads, c.replay_serial) /
            (min(c.group_size, workers) if c.shared_replay else 1)}


def step_time(c: Costs, workers: int) -> float:
    return sum(phases(c, workers).values())


def efficiency(c: Costs, workers: int) -> float:
    """T(1) / (W·T(W)): 1 when W workers are W times faster than one."""
    return step_time(c, 1) / (workers * step_time(c, workers))


def bottleneck(c: Costs, workers: int) -> str:
    """The largest phase of the step at ``workers`` ("evaluation": compute-bound, scaling works)."""
    p = phases(c, workers)
    return max(PHASES, key=lambda k: p[k])


def predict(c: Costs, workers=WORKERS) -> dict:
    return {"step_s": {w: step_time(c, w) for w in workers}, "efficiency": {w: efficiency(c, w) for w in workers},
            "bottleneck": {w: bottleneck(c, w) for w in workers}}


def what_if(c: Costs, group_size: int, population: int | None = None, workers=WORKERS,
            threads: int = 1, shared: bool = False) -> dict[int, float]:
    """Efficiency at each core count with groups of ``group_size`` (see :func:`phases`; ``shared``: sharing
    their replay), ``population`` members (replay and update scaled with it) and workers of ``threads``
    threads, against one core as it is."""
    scale = (population or c.population) / c.population
    base = replace(c, population=population or c.population, replay_s=c.replay_s * scale,
                   update_bytes=c.update_bytes * scale)
    lifted = replace(base, group_size=group_size, threads=threads, shared_replay=shared)
    t1 = step_time(base, 1)
    return {w: t1 / (w * step_time(lifted, w)) for w in workers}


# -- calibration -------------------------------------------------------------------------------
def coordinator_costs(quick: bool) -> tuple[float, float]:
    """(CPU seconds per chunk result, per result byte) of the coordinator core (simulated workers)."""
    n, members = (64, 16) if quick else (1024, 64)
    cpu = sorted(coordinator_step(n, members, 4, 0.2, s)[0] for s in range(3))[1]
    big = wire.encode(wire.RESULT, 0, 0, torch.randn(1 << 18))
    reps = 3 if quick else 10
    t0 = time.perf_counter()
    for _ in range(reps):
        wire.decode(big, wire.RESULT, 0, 0, 1 << 18)
    per_byte = (time.perf_counter() - t0) / reps / len(big)
    return max(0.0, cpu / n - members * 4 * per_byte), per_byte


def lowrank_macs(es) -> int:
    """Multiply-adds of one replay's (A⊙f)Bᵀ: P·r·Σ m·n over the low-rank matrices."""
    strategy = es.strategy
    mn = sum(strategy.params[n].shape[0] * strategy.params[n].shape[1] for n in strategy.lowrank
             if strategy.params[n].dim() == 2)
    return es.population * es.config.rank * mn


def measure_task(name: str, steps: int, **es) -> dict:
    """Per-member, replay and shaping seconds of task ``name`` in-process on one thread (median steps)."""
    from ..engine import make_config
    from ..engine.recipe import TaskRecipe
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        backend = LocalBackend(TaskRecipe(make_config(name, es={"seed": 0, **es}).to_dict()))
        backend.step()                                   # warm-up
        per = []
        for _ in range(steps):
            backend.reset_breakdown()
            backend.step()
            per.append(backend.breakdown()["driver"])
    finally:
        torch.set_num_threads(threads)
    mid = lambda k: sorted(p[k] for p in per)[len(per) // 2] / 1000
    es_ = backend.es
    return {"population": es_.population, "member_s": mid("evaluate") / es_.population, "replay_s": mid("update"),
            "shape_s": mid("shape"), "macs": lowrank_macs(es_)}


def replay_rate(quick: bool, replay_s: float | None = None) -> float:
    """Seconds per multiply-add of one replay, measured on SmolLM2's MLP matrix (576 x 1536) at one
    thread (``replay_s``: that replay's seconds, if already timed): what its P·r·Σmn is priced at (the
    small tasks' matrices are too small to reach the rate)."""
    seconds = scale_threads.replay_seconds(quick, 1) if replay_s is None else replay_s
    return seconds / (scale_threads.REPLAY_POPULATION[quick] * 576 * 1536)


def task_costs(m: dict, chunk_s: float, byte_s: float, **network) -> Costs:
    p = m["population"]
    return Costs(p, m["member_s"], m["replay_s"], m["shape_s"], chunk_s, byte_s, result_bytes=4.0,
                 update_bytes=wire.HEADER + 4 * p, **network)


def smollm2_costs(replay_s_per_mac: float, chunk_s: float, byte_s: float, threads: dict | None = None,
                  **network) -> Costs:
    """SmolLM2-135M on Countdown from measured rates (too big to step here): see the module docstring;
    ``threads``: :func:`scale_threads.measure`'s serial fractions (none: threads buy nothing)."""
    serial = {k: (threads or {}).get(k, {}).get("serial", 1.0) for k in ("evaluate", "replay")}
    p, r, tokens = COUNTDOWN["population"], COUNTDOWN["rank"], COUNTDOWN["tokens"]
    member_s = PER_COMPLETION[0] * tokens / PER_COMPLETION[1]
    return Costs(p, member_s, replay_s_per_mac * p * r * SMOLLM2_MN, 0.0, chunk_s, byte_s, result_bytes=4.0,
                 update_bytes=wire.HEADER + p / 5 + 4, eval_serial=serial["evaluate"], replay_serial=serial["replay"],
                 **network)   # pair signs: ternary on the wire


def calibrate(quick: bool, log) -> tuple[dict[str, Costs], dict]:
    """The three workloads' costs (and digits', for the Ray check) and what was measured."""
    chunk_s, byte_s = coordinator_costs(quick)
    log(f"  coordinator: {chunk_s * 1e6:.1f} us/chunk, {byte_s * 1e9:.2f} ns/byte")
    steps = 1 if quick else 3
    measured = {"digits": measure_task("digits", steps, **({"population": 256} if quick else {})),
                "lm": measure_task("lm", steps, **({"population": 32} if quick else {})),
                "rl": measure_task("rl", steps)}
    for k, m in measured.items():
        log(f"  {k}: P={m['population']}, {m['member_s'] * 1000:.2f} ms/member, replay {m['replay_s'] * 1000:.2f} ms")
    net = dict(latency_s=LATENCY_S, bandwidth=BANDWIDTH)
    threads = scale_threads.measure(quick)
    rate = replay_rate(quick, threads["replay"].get("one_s"))
    log(f"  threads: serial fraction at {threads['threads']} threads, evaluation {threads['evaluate']['serial']:.2f}, "
        f"replay {threads['replay']['serial']:.2f}")
    costs = {"smollm2-countdown": smollm2_costs(rate, chunk_s, byte_s, threads, **net),
             "egg-lm": task_costs(measured["lm"], chunk_s, byte_s, **net),
             "rl": task_costs(measured["rl"], chunk_s, byte_s, **net),
             "digits": task_costs(measured["digits"], chunk_s, byte_s, **net)}
    return costs, {"chunk_s": chunk_s, "byte_s": byte_s, "replay_s_per_mac": rate, "tasks": measured,
                   "threads": threads}


def ray_chunk_costs(measured_1: float, predicted_1: float, coordinator_cpu_s: float, chunks: int) -> dict:
    """Ray's own cost per chunk, split by who pays it, from one worker's step (``measured_1`` seconds
    against the model's ``predicted_1`` without Ray) and the driver's CPU in it (``coordinator_cpu_s``,
    every thread of the driver process): ``chunk_s``, the driver's CPU per chunk, is serial at any
    number of workers; the rest of the excess, ``latency_s`` per chunk (a round trip through Ray's task
    machinery on both sides), runs in parallel on many workers and is paid once per round of chunks.
    With one worker the two cannot be told apart by time alone, which is why the driver's CPU is read."""
    excess = max(0.0, measured_1 - predicted_1) / (chunks + 1)   # the chunks and the update sent
    cpu = coordinator_cpu_s / (chunks + 1)
    return {"chunk_s": cpu, "latency_s": max(0.0, excess - cpu), "excess_per_chunk_s": excess}


def check_on_ray(digits: Costs, log) -> dict:
    """Digits on 1 and 2 loopback Ray workers against the model (no latency, no bandwidth limit): the
    per-member cost is the 1-worker run's own worker-side evaluation, the coordinator's the core's;
    both steps are predicted, nothing is fitted. What the 1-worker step has beyond its prediction, per
    chunk, is Ray's own cost per chunk, split by :func:`ray_chunk_costs` into the driver's CPU
    (``ray_chunk_s``, serial at scale) and a round trip (``ray_latency_s``, parallel across workers);
    ``predicted_with_ray_s`` predicts the 2-worker step from them."""
    from .distributed import ray_runs
    runs = ray_runs(log, names=("digits",))["digits"]
    measured = {1: runs["ray_1"][0], 2: runs["ray_2"][0]}
    worker = runs["ray_1"][1].get("workers", {})
    chunks = -(-digits.population // 512)                  # ray_runs' digits chunk: 512 members
    member_s = worker.get("evaluate", digits.member_s * 1000 * digits.population) / 1000 / digits.population
    model = replace(digits, member_s=member_s, latency_s=0.0, bandwidth=math.inf,
                    replay_s=max(digits.replay_s, worker.get("replay", 0.0) / 1000))
    predicted = {w: step_time(replace(model, chunks_per_worker=max(1, chunks // w)), w) for w in (1, 2)}
    ratio = {w: predicted[w] / measured[w] for w in (1, 2)}
    cpu_s = runs["ray_1"][1].get("driver", {}).get("coordinator_cpu", 0.0) / 1000
    ray = ray_chunk_costs(measured[1], predicted[1], cpu_s, chunks)
    with_ray = replace(model, chunk_s=max(model.chunk_s, ray["chunk_s"]), latency_s=ray["latency_s"] / 2)
    two = step_time(replace(with_ray, chunks_per_worker=max(1, chunks // 2)), 2)
    return {"measured_s": measured, "predicted_s": predicted, "ratio": ratio, "member_s": member_s,
            "ray_chunk_s": ray["chunk_s"], "ray_latency_s": ray["latency_s"],
            "ray_excess_per_chunk_s": ray["excess_per_chunk_s"],
            "predicted_with_ray_s": {2: two}, "ratio_with_ray": {2: two / measured[2]},
            "within_15pct": all(abs(r - 1) <= 0.15 for r in ratio.values()),
            "breakdown_ms": {k: v[1] for k, v in runs.items()}}


def draw(predictions: dict, path, what_ifs: dict | None = None) -> None:
    from ..engine.plotting import pyplot, save_figure
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, p in predictions.items():
        ax.plot(list(p["efficiency"]), list(p["efficiency"].values()), marker=".", label=name)
    for label, eff in (what_ifs or {}).items():
        ax.plot([int(w) for w in eff], list(eff.values()), linestyle="--", label=f"smollm2 if {label}")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("workers")
    ax.set_ylabel("predicted efficiency T(1) / (W T(W))")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=80)


def run(quick: bool = False, device: str = "cpu", log=print, plot=None) -> Report:
    rep = Report("scale", QUESTION, COLUMNS)
    load0 = os.getloadavg()[0]
    costs, measured = calibrate(quick, log)
    if not quick:   # Ray's cost per chunk: the driver's CPU (serial) and a round trip (parallel across workers)
        cal = rep.summary["calibration"] = check_on_ray(costs["digits"], log)
        chunk_s = max(measured["chunk_s"], cal["ray_chunk_s"])
        costs = {k: replace(c, chunk_s=chunk_s, latency_s=c.latency_s + cal["ray_latency_s"] / 2)
                 for k, c in costs.items()}
    workloads = {k: v for k, v in costs.items() if k != "digits"}
    predictions = {name: predict(c) for name, c in workloads.items()}
    for name, p in predictions.items():
        for w in WORKERS:
            rep.rows.append([name, w, p["step_s"][w], p["efficiency"][w], p["bottleneck"][w]])
    rep.summary["efficiency_by_workers"] = {n: {str(w): e for w, e in p["efficiency"].items()}
                                            for n, p in predictions.items()}
    rep.summary["bottleneck_by_workers"] = {n: {str(w): b for w, b in p["bottleneck"].items()}
                                            for n, p in predictions.items()}
    llm = workloads["smollm2-countdown"]
    rep.summary["what_if_smollm2"] = {label: {str(w): e for w, e in what_if(llm, k, p, threads=t, shared=sh).items()}
                                      for label, k, p, t, sh in WHAT_IF}
    rep.details["costs"] = {n: vars(c) for n, c in costs.items()}
    rep.details["phases_s"] = {n: {str(w): phases(c, w) for w in WORKERS} for n, c in workloads.items()}
    rep.details["measured"] = measured
    path = plot or os.path.join(tempfile.mkdtemp(prefix="hs-scale"), "scale.png")
    draw(predictions, path, rep.summary["what_if_smollm2"])
    rep.summary["plot"] = str(path)
    rep.summary["load_average"] = [load0, os.getloadavg()[0]]
    rep.notes.append(f"stated network: {LATENCY_S * 1e6:g} us one-way latency, {BANDWIDTH * 8 / 1e9:g} Gb/s at the "
                     "driver; every worker one CPU thread like the measurements (a faster device shrinks "
                     "evaluation and replay alike, and makes the fixed coordinator and wire costs weigh more)")
    t = measured["threads"]
    rep.notes.append("what_if_smollm2: SmolLM2 with group coordinators (--group-size 8: the driver's calls per "
                     "group, not per chunk), a larger population, and workers of 8 threads, one a node "
                     "(--worker-threads 8: one replay per node), and groups of 8 sharing one copy of the weights, each "
                     "worker replaying an eighth (--shared-replay), priced by the same costs; efficiency against one core; "
                     f"a worker's threads priced by Amdahl's law from serial fractions measured at {t['threads']} "
                     f"threads (evaluation {t['evaluate']['serial']:.2f}, replay {t['replay']['serial']:.2f}) and "
                     "assumed to hold at 8")
    rep.notes.append(f"smollm2-countdown: P={COUNTDOWN['population']}, rank {COUNTDOWN['rank']}, "
                     f"{COUNTDOWN['tokens']} new tokens; replay = s/MAC measured on a 576x1536 matrix x P*r*{SMOLLM2_MN:,} MACs; "
                     "a completion from a measured SmolLM2 step (docs/results/archive.md), not stepped here")
    rep.details["environment"] = environment()
    return rep
