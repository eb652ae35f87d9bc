"""Question: how close does one EGGROLL step come to the cost of inference on a GPU (the paper's App. E)?

Run:  hyperscalees bench gpu [--quick] [--json] [--device cuda|cpu] [--dtype bf16|fp16|fp32] [--repeats R]

Dimensions: d width, T tokens per member, N members (even), K = N/2 antithetic pairs, r = 1
rank. Every configuration evaluates N·T = 16,384 tokens per step (512 with ``--quick``).

Configurations: one d×d ``nn.Linear`` (no bias) for d in {1024, 4096, 8192} and T in {1, 16, 64},
N = 16384 // T; plus one ``TinyLM`` row (4 blocks at width 512, vocab 4096, T = 64, N = 256,
token ids in). Parameters in bf16 on CUDA by default. ``--quick``: d in {64, 128}, T in {1, 16}
and a one-block LM of width 32, float32: sizes for a CPU and the test suite.

Timed interleaved in one process (``base.side_by_side``), median of the repeats after warm-up:

- ``inference``: ``F.linear(x, W)`` (the LM: its plain forward) on all N·T tokens, x (N·T, d);
- ``forward``: ``with es.perturbed(): layer(x)``, x member-major (member i owns rows i·T..(i+1)·T),
  noise draw included. It runs on a twin facade over the same layer with ``noise_cache_mib=0``, so
  every call draws its noise as a step's first forward does; the step's own facade would serve a
  repeated forward of the same step from its cache;
- ``step``: the perturbed forward + a fitness (the L2 norm of each member's outputs: one reduction
  that reads them all) + ``es.tell`` (shaping, the estimate (A⊙f)Bᵀ, Adam, the bf16 copy-back);
- the floor, what no implementation of the step can skip, its three parts each timed alone:
  inference + ``torch.mm`` of the update's shapes in the parameter dtype, (rows, K·r) @ (K·r, cols)
  per low-rank parameter and (1, K) @ (K, n) per full-rank one + one ``torch.optim.Adam`` step
  (fused on CUDA) over fp32 master copies of the parameters with a random gradient. The library's
  own update GEMM rounds its operands to the parameter dtype on CUDA too (``update_precision="auto"``),
  so the two GEMMs are alike.

Ratios: ``forward_over_inference`` = t_inference / t_forward and ``step_over_inference`` =
t_inference / t_step (throughput relative to inference, 1.0 = ES is free); ``step_over_floor`` =
t_step / t_floor (1.0 = nothing beyond the floor). Counts of one whole step: ``ops_per_step``,
``kernel_ops_per_step`` (ops that launch a kernel on a GPU) and ``syncs_per_step`` from
:class:`~.dispatch.DispatchCounter` (any device), ``launches_per_step``
the kernels in ``torch.profiler``'s CUDA trace (memcpy/memset not counted; None on CPU).

Peak memory, ``peak_mem_ratio`` = step / inference: each side is built afresh with only what it
needs (the model and inputs; for the step also the facade, its fp32 masters and Adam moments) and
measured on its second call, so lazily made state counts as in every step after the first. On
CUDA: ``max_memory_allocated`` above the level before the build (exact; the CUDA context is not
counted). On CPU: peak RSS of one fresh subprocess that probes every configuration in turn, with
glibc's mmap threshold fixed (``base.EXACT_RSS_ENV``); the interpreter and torch (a few hundred
MiB) are included, so small configurations read close to 1. With ``--quick`` on CPU the probes run
in this process instead: its tensors are far below torch's own RSS, so a fresh process would cost
seconds of start-up and read about 1 all the same.
"""
from __future__ import annotations

import gc
from dataclasses import asdict, dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..models import TinyLM
from ..nn.graph import GraphedStep
from ..nn.module_es import EGGROLL
from .base import MIB, EXACT_RSS_ENV, Report, Timing, environment, in_subprocess, peak_rss_mib, reset_peak_rss, \
    side_by_side
from .dispatch import DispatchCounter

QUESTION = "one ES step vs inference of the same N·T tokens, and vs the floor (inference + update GEMM + Adam)"
COLUMNS = ["config", "N", "T", "infer_ms", "forward_ms", "step_ms", "floor_ms", "fwd_over_inf", "step_over_inf",
           "step_over_floor", "graphed_over_floor", "mem_ratio", "ops", "kernel_ops", "syncs", "launches"]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
SIGMA, LR = 0.01, 1e-3
TIMED = ("inference", "forward", "step", "graphed_step", "update_gemm", "adam")


@dataclass(frozen=True)
class Case:
    """One configuration: ``kind`` 'linear' (a d×d Linear) or 'lm' (TinyLM), N members of T tokens."""
    kind: str
    width: int          # d
    tokens: int         # T, tokens per member
    population: int     # N, even
    layers: int = 0     # TinyLM only
    vocab: int = 0      # TinyLM only

    @property
    def pairs(self) -> int:
        return self.population // 2

    @property
    def label(self) -> str:
        return f"linear d={self.width}" if self.kind == "linear" else f"lm d={self.width} L={self.layers}"


@dataclass(frozen=True)
class Plan:
    cases: tuple[Case, ...]
    warmup: int
    repeats: int


def plan(quick: bool, repeats: int | None = None) -> Plan:
    """The configurations (see the module docstring) and how often each is timed."""
    tokens = 512 if quick else 16384
    widths, ts = ((64, 128), (1, 16)) if quick else ((1024, 4096, 8192), (1, 16, 64))
    lm = (Case("lm", 32, 16, tokens // 16, layers=1, vocab=64) if quick
          else Case("lm", 512, 64, tokens // 64, layers=4, vocab=4096))
    cases = tuple(Case("linear", d, t, tokens // t) for d in widths for t in ts) + (lm,)
    warmup, default_repeats = (1, 3) if quick else (3, 10)
    return Plan(cases, warmup, repeats or default_repeats)


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def default_dtype(device: str) -> str:
    return "bf16" if torch.device(device).type == "cuda" else "fp32"


# -- one configuration's pieces ----------------------------------------------------------
@dataclass
class Setup:
    """A configuration on a device: the model and its member-major inputs."""
    case: Case
    model: nn.Module
    inputs: Tensor      # linear: x (N·T, d); lm: token ids (N, T)


def build(case: Case, device, dtype: torch.dtype, seed: int = 0) -> Setup:
    torch.manual_seed(seed)
    n, t, d = case.population, case.tokens, case.width
    if case.kind == "linear":
        model = nn.Linear(d, d, bias=False, device=device, dtype=dtype)
        inputs = torch.randn(n * t, d, device=device, dtype=dtype)  # (N·T, d), member-major
    elif case.kind == "lm":
        model = TinyLM(case.vocab, d, case.layers, t).to(device=device, dtype=dtype)
        inputs = torch.randint(0, case.vocab, (n, t), device=device)  # (N, T): one sequence per member
    else:
        raise ValueError(f"unknown kind {case.kind!r}; choose 'linear' or 'lm'")
    return Setup(case, model, inputs)


def inference(s: Setup) -> Callable[[], Tensor]:
    """The plain forward on all N·T tokens, no ES machinery."""
    x = s.inputs
    if s.case.kind == "linear":
        w = s.model.weight

        def run():
            with torch.no_grad():
                return F.linear(x, w)
        return run

    def run_model():
        with torch.no_grad():
            return s.model(x)
    return run_model


def facade(s: Setup, **kw) -> EGGROLL:
    return EGGROLL(s.model, population=s.case.population, sigma=SIGMA, rank=1, lr=LR, optimizer="adam", seed=0, **kw)


def perturbed_forward(es: EGGROLL, s: Setup) -> Callable[[], Tensor]:
    def run():
        with es.perturbed():
            return s.model(s.inputs)
    return run


def fitness(out: Tensor, population: int) -> Tensor:
    """(N,) float32: the L2 norm of each member's outputs, one reduction over them all."""
    return torch.linalg.vector_norm(out.reshape(population, -1), dim=1).float()


def es_step(es: EGGROLL, s: Setup) -> Callable[[], object]:
    """One whole step: perturbed forward, fitness, tell."""
    forward = perturbed_forward(es, s)
    return lambda: es.tell(fitness(forward(), s.case.population))


def graphed_step(es: EGGROLL, s: Setup) -> tuple[Callable[[], object], GraphedStep]:
    """The same step as :func:`es_step` through :class:`GraphedStep`: one CUDA graph replay where
    it can capture (its inputs already sit at a fixed address), the eager step otherwise. Called
    past its warm-up and capture here, so the timed calls are replays."""
    step = GraphedStep(es, lambda m, lo, hi: fitness(m(s.inputs), s.case.population))
    for _ in range(step.warmup + 1):
        step()
    return step, step


def trainable(es: EGGROLL) -> dict[str, Tensor]:
    params = dict(es.model.named_parameters())
    return {n: params[n] for n in es.strategy.trainable}


def update_gemm(es: EGGROLL, pairs: int, rank: int = 1) -> Callable[[], None]:
    """``torch.mm`` of the update's shapes for every parameter, in the parameter's dtype.

    Low-rank (rows, cols): (rows, K·r) @ (K·r, cols), the (A⊙f)Bᵀ of EGGROLL. Full-rank with n
    entries: (1, K) @ (K, n), the weighted sum of K dense draws.
    """
    operands = []
    for name, p in trainable(es).items():
        shape = es.specs[name].shape
        if name in es.strategy.lowrank:
            rows, cols = shape
            dims = ((rows, pairs * rank), (pairs * rank, cols))
        else:
            dims = ((1, pairs), (pairs, p.numel()))
        operands.append(tuple(torch.randn(*d, device=p.device, dtype=p.dtype) for d in dims))

    def run():
        for a, b in operands:
            torch.mm(a, b)
    return run


def adam_step(params: list[Tensor]) -> Callable[[], None]:
    """One ``torch.optim.Adam`` step over fp32 master copies of ``params`` with a random gradient."""
    masters = [p.detach().float().clone() for p in params]
    for m in masters:
        m.grad = torch.randn_like(m)
    cuda = masters[0].device.type == "cuda"
    opt = torch.optim.Adam(masters, lr=LR, fused=True if cuda else None)  # torch's default on CPU
    return opt.step


def kernels(run: Callable[[], object]) -> int | None:
    """CUDA kernels one call of ``run`` launches, from the profiler's device trace (None: no trace)."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    n = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
            and not e.name.startswith(("Memcpy", "Memset")))
    return n or None  # a step always launches kernels: 0 means the profiler saw no device (no CUPTI)


def measure_case(case: Case, device: str, dtype: torch.dtype, warmup: int, repeats: int) -> dict:
    """Timings (interleaved) and counts of one configuration; everything it builds is freed on return."""
    s = build(case, device, dtype)
    es = facade(s)
    twin = facade(s, noise_cache_mib=0)  # every forward draws afresh: see the module docstring
    graphed, runner = graphed_step(facade(s), s)
    fns = {"inference": inference(s), "forward": perturbed_forward(twin, s), "step": es_step(es, s),
           "graphed_step": graphed, "update_gemm": update_gemm(es, case.pairs),
           "adam": adam_step(list(trainable(es).values()))}
    t = side_by_side({k: fns[k] for k in TIMED}, warmup, repeats, device)
    with DispatchCounter() as c:
        fns["step"]()
    launches = kernels(fns["step"]) if torch.device(device).type == "cuda" else None
    return {"timings": t, "ops": c.ops, "kernel_ops": c.kernel_ops, "syncs": c.syncs, "sync_ops": dict(c.sync_ops),
            "launches": launches, "graph": "captured" if runner.captured else runner.reason}


# -- peak memory -------------------------------------------------------------------------
def memory_probe(case: dict, device: str, dtype: str, which: str) -> float:
    """MiB at the peak of the second call of ``which`` ('inference' or 'step'), built afresh."""
    c, cuda = Case(**case), torch.device(device).type == "cuda"
    gc.collect()
    if cuda:
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
    s = build(c, device, DTYPES[dtype])
    run = inference(s) if which == "inference" else es_step(facade(s), s)
    run()  # warm: Adam's moments and the like exist from here on, as in every later step
    if not cuda:
        reset_peak_rss()
        run()
        return peak_rss_mib()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    run()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / MIB


def memory_probes(cases: list[dict], device: str, dtype: str) -> list[dict]:
    """Inference and step peaks (MiB) of each configuration, one after another in this process.

    The first configuration runs once unmeasured before: one-time set-up (lazy imports, the
    cuBLAS workspace) would otherwise land in whichever probe came first.
    """
    gc.collect()
    gc.freeze()  # each probe's collection then scans only what the probes made, not all of torch (~0.1 s)
    try:
        for which in ("inference", "step"):
            memory_probe(cases[0], device, dtype, which)
        return [{"inference_mib": memory_probe(c, device, dtype, "inference"),
                 "step_mib": memory_probe(c, device, dtype, "step")} for c in cases]
    finally:
        gc.unfreeze()


def peak_memory(cases: tuple[Case, ...], device: str, dtype: str, isolate: bool = True) -> list[dict]:
    """Probes of every configuration; on CPU with ``isolate`` in a fresh subprocess (see the module docstring)."""
    kw = dict(cases=[asdict(c) for c in cases], device=device, dtype=dtype)
    if torch.device(device).type == "cpu" and isolate:
        return in_subprocess(f"{__name__}:memory_probes", kw, env=EXACT_RSS_ENV)
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()
    return memory_probes(**kw)


# -- report ------------------------------------------------------------------------------
def record(case: Case, m: dict, mem: dict) -> dict:
    """One configuration's JSON record: seconds, ratios, peaks, counts."""
    t: dict[str, Timing] = m["timings"]
    sec = {k: t[k].median for k in TIMED}
    floor = sec["inference"] + sec["update_gemm"] + sec["adam"]
    return {"label": case.label, **asdict(case), "tokens_per_step": case.population * case.tokens,
            **{f"{k}_s": v for k, v in sec.items()}, "floor_s": floor,
            "forward_over_inference": sec["inference"] / sec["forward"],
            "step_over_inference": sec["inference"] / sec["step"], "step_over_floor": sec["step"] / floor,
            "graphed_step_over_inference": sec["inference"] / sec["graphed_step"],
            "graphed_step_over_floor": sec["graphed_step"] / floor, "graph": m["graph"],
            "inference_peak_mib": mem["inference_mib"], "step_peak_mib": mem["step_mib"],
            "peak_mem_ratio": mem["step_mib"] / mem["inference_mib"],
            "ops_per_step": m["ops"], "kernel_ops_per_step": m["kernel_ops"], "syncs_per_step": m["syncs"],
            "sync_ops": m["sync_ops"],
            "launches_per_step": m["launches"], "timings": t}


def row(r: dict) -> list:
    ms = lambda k: r[k] * 1e3
    return [r["label"], r["population"], r["tokens"], ms("inference_s"), ms("forward_s"), ms("step_s"), ms("floor_s"),
            r["forward_over_inference"], r["step_over_inference"], r["step_over_floor"], r["graphed_step_over_floor"],
            r["peak_mem_ratio"], r["ops_per_step"], r["kernel_ops_per_step"], r["syncs_per_step"],
            "n/a" if r["launches_per_step"] is None else r["launches_per_step"]]


def summarize(records: list[dict], device: str, dtype: str) -> dict:
    name = torch.cuda.get_device_name(torch.device(device)) if torch.device(device).type == "cuda" else "cpu"
    return {"step_over_inference_worst": min(r["step_over_inference"] for r in records),
            "forward_over_inference_worst": min(r["forward_over_inference"] for r in records),
            "step_over_floor_worst": max(r["step_over_floor"] for r in records),
            "graphed_step_over_inference_worst": min(r["graphed_step_over_inference"] for r in records),
            "graphed_step_over_floor_worst": max(r["graphed_step_over_floor"] for r in records),
            "graphs": sorted({r["graph"] for r in records}),
            "peak_mem_ratio": max(r["peak_mem_ratio"] for r in records),
            "ops_per_step_max": max(r["ops_per_step"] for r in records),
            "kernel_ops_per_step_max": max(r["kernel_ops_per_step"] for r in records),
            "syncs_per_step_max": max(r["syncs_per_step"] for r in records),
            "launches_per_step_max": max((r["launches_per_step"] for r in records
                                          if r["launches_per_step"] is not None), default=None),
            "device": device, "device_name": name, "dtype": dtype, "torch": torch.__version__}


def run(quick: bool = False, device: str | None = None, log=print, dtype: str | None = None,
        repeats: int | None = None) -> Report:
    device = device or default_device()
    dtype = dtype or default_dtype(device)
    p = plan(quick, repeats)
    measured = []
    for case in p.cases:
        measured.append(measure_case(case, device, DTYPES[dtype], p.warmup, p.repeats))
        t = measured[-1]["timings"]
        log(f"  {case.label} N={case.population} T={case.tokens}: "
            f"step/inf={t['inference'].median / t['step'].median:.3f}")
    mem = peak_memory(p.cases, device, dtype, isolate=not quick)
    records = [record(c, m, k) for c, m, k in zip(p.cases, measured, mem)]
    rep = Report("gpu", QUESTION, COLUMNS, rows=[row(r) for r in records])
    rep.summary = {**summarize(records, device, dtype), "environment": environment()}
    rep.details = {"configs": records}
    rep.notes += [
        f"{dtype} parameters on {device}; medians of {p.repeats} interleaved repeats after {p.warmup} warm-up rounds",
        "fwd_over_inf, step_over_inf = t_inference / t (1.0 = free); step_over_floor = t_step / t_floor, floor = "
        "inference + mm of the update's shapes (parameter dtype) + one Adam step on fp32 masters, each timed alone",
        "forward: a twin facade with noise_cache_mib=0, so each call draws its noise like a step's first forward",
        "mem_ratio: peak of a step / peak of inference, each built alone; " + (
            "CUDA allocator, above the pre-build level" if torch.device(device).type == "cuda"
            else f"process peak RSS{'' if quick else ' of a fresh subprocess'} (torch included: small sizes read ~1)"),
        "ops, syncs: DispatchCounter over one whole step; launches: CUDA kernels in torch.profiler (n/a on CPU)",
    ]
    return rep
