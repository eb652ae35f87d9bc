"""Shared measuring tools: side-by-side timing, peak memory, reference models, reports.

Every figure a benchmark reports is a ratio or a per-member cost measured in one
process, after warm-up, as the median of several repeats. The contenders of one
comparison run *interleaved* (A, B, A, B, ...) so that load from other processes on a
shared machine hits all of them alike; absolute seconds are printed but are noisy.

Peak memory: on CUDA, torch's allocator statistics. On CPU, tracemalloc cannot see
torch's allocations, so a configuration runs in a fresh subprocess that resets the
kernel's high-water mark after setup (``/proc/self/clear_refs``) and reads ``VmHWM``
after one step: peak RSS of the process, and its growth above the post-setup floor.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..nn.evaluate import evaluate
from ..models import TinyLM, mlp
from ..noise import native

MIB = 1024 * 1024


class BenchSetupError(RuntimeError):
    """A benchmark cannot set up what it measures (a venv it builds, a file it needs); the message says why."""


# -- timing ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Timing:
    """Seconds per call: median (what is reported), min and max of the repeats."""
    median: float
    min: float
    max: float
    repeats: int


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def side_by_side(fns: dict[str, Callable[[], object]], warmup: int = 1, repeats: int = 5,
                 device="cpu") -> dict[str, Timing]:
    """Time each callable ``repeats`` times, round-robin, after ``warmup`` rounds."""
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for rnd in range(warmup + repeats):
        for name, fn in fns.items():
            _sync(device)
            t0 = time.perf_counter()
            fn()
            _sync(device)
            if rnd >= warmup:
                samples[name].append(time.perf_counter() - t0)
    return {k: Timing(statistics.median(v), min(v), max(v), len(v)) for k, v in samples.items()}


# -- memory ------------------------------------------------------------------------------
def _status_kib(field_name: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def reset_peak_rss() -> bool:
    """Set the kernel's RSS high-water mark to the current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def current_rss_mib() -> float:
    kib = _status_kib("VmRSS")
    return kib / 1024 if kib is not None else math.nan


def peak_rss_mib() -> float:
    kib = _status_kib("VmHWM")
    if kib is None:  # not Linux: ru_maxrss is the lifetime peak (KiB on Linux, bytes on macOS)
        import resource
        r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return r / (MIB if sys.platform == "darwin" else 1024)
    return kib / 1024


def measure_peak(run: Callable[[], object], device="cpu") -> dict[str, float]:
    """Peak memory of one call of ``run``: process peak and growth above the floor, MiB."""
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize()
        floor = torch.cuda.memory_allocated() / MIB
        torch.cuda.reset_peak_memory_stats()
        run()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() / MIB
        return {"peak_mib": peak, "floor_mib": floor, "working_mib": peak - floor, "exact_reset": True}
    floor = current_rss_mib()
    exact = reset_peak_rss()
    run()
    peak = peak_rss_mib()
    return {"peak_mib": peak, "floor_mib": floor, "working_mib": peak - floor, "exact_reset": exact}


# For memory probes: glibc serves every allocation >= 256 KiB by mmap and unmaps it on
# free (a fixed threshold also turns off glibc's adaptive one), so peak RSS follows the
# live tensors instead of heap fragmentation. Applied alike to inference and ES probes.
EXACT_RSS_ENV = {"MALLOC_MMAP_THRESHOLD_": str(256 << 10), "MALLOC_TRIM_THRESHOLD_": str(256 << 10)}


def in_subprocess(target: str, kwargs: dict, timeout: float = 1800, env: dict | None = None) -> dict:
    """Run ``module:function(**kwargs)`` in a fresh interpreter; it returns a JSON-able dict.

    Used for peak memory on CPU, where freed-but-retained heap from one configuration
    would otherwise hide the next one's peak. ``env`` adds environment variables.
    """
    code = ("import json, sys, importlib; m, f = sys.argv[1].split(':'); "
            "out = getattr(importlib.import_module(m), f)(**json.loads(sys.argv[2])); "
            "print('\\n' + json.dumps(out))")
    proc = subprocess.run([sys.executable, "-c", code, target, json.dumps(kwargs)], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        raise RuntimeError(f"{target} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


@dataclass
class Workload:
    """A model, per-member data (member-major) and a fitness: ``fitness(model, lo, hi)``."""
    model: nn.Module
    fitness: Callable[[nn.Module, int, int], Tensor]
    tokens_per_member: int
    description: str


def make_workload(kind: str, width: int, seq: int, population: int, device="cpu", layers: int = 1,
                  vocab: int = 256, seed: int = 0) -> Workload:
    """``lm``: TinyLM on random tokens, fitness -CE; ``mlp``: width-d MLP, ``seq`` rows per member, -MSE."""
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    if kind == "lm":
        model = TinyLM(vocab, width, layers, max(seq, 1)).to(device)
        x = torch.randint(0, vocab, (population, seq), generator=g).to(device)
        y = torch.randint(0, vocab, (population, seq), generator=g).to(device)

        def fitness(m, lo, hi, step=0):
            logits = m(x[lo:hi])
            ce = F.cross_entropy(logits.reshape(-1, vocab), y[lo:hi].reshape(-1), reduction="none")
            return -ce.view(hi - lo, seq).mean(dim=1)
        desc = f"TinyLM d={width} layers={layers} vocab={vocab}"
    elif kind == "mlp":
        model = mlp([width, width, width, 10], "relu").to(device)
        x = torch.randn(population * seq, width, generator=g).to(device)
        y = torch.randn(population * seq, 10, generator=g).to(device)

        def fitness(m, lo, hi, step=0):
            out = m(x[lo * seq:hi * seq])
            return -(out - y[lo * seq:hi * seq]).pow(2).view(hi - lo, -1).mean(dim=1)
        desc = f"MLP {width}-{width}-{width}-10"
    else:
        raise ValueError(f"unknown workload kind {kind!r}; choose 'lm' or 'mlp'")
    return Workload(model, fitness, seq, desc)


def chunked_inference(work: Workload, population: int, chunk: int) -> Callable[[], Tensor]:
    """Plain inference with unperturbed weights, same members, chunks and fitness as ES."""
    def run():
        with torch.no_grad():
            return torch.cat([work.fitness(work.model, lo, min(population, lo + chunk))
                              for lo in range(0, population, chunk)])
    return run


def es_step(es, work: Workload, chunk: int) -> Callable[[], object]:
    """One full ES step: noise + population forward (chunked) + shaping + update."""
    def run():
        return es.tell(evaluate(es, work.fitness, chunk))
    return run


def backprop_step(work: Workload, population: int, chunk: int) -> Callable[[], object]:
    """One backprop training step of the same model on the same batch (loss = -fitness, Adam): the same
    member chunks as the ES step, gradients accumulated, so at any time one chunk's activations are stored
    for the backward pass (the ES step holds one chunk's forward, without them)."""
    opt = torch.optim.Adam(work.model.parameters(), lr=1e-3)

    def run():
        opt.zero_grad(set_to_none=True)
        for lo in range(0, population, chunk):
            hi = min(population, lo + chunk)
            (-work.fitness(work.model, lo, hi).sum() / population).backward()
        opt.step()
    return run


# -- reports -----------------------------------------------------------------------------
@dataclass
class Report:
    """A benchmark's answer: the question, a table, headline numbers, notes (and JSON-only details)."""
    name: str
    question: str
    columns: list[str]
    rows: list[list] = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    details: dict = field(default_factory=dict)  # JSON only: per-configuration records too long for the table

    def to_dict(self) -> dict:
        return _clean({"bench": self.name, "question": self.question, **self.summary, **self.details,
                       "rows": [dict(zip(self.columns, r)) for r in self.rows], "notes": self.notes})

    def to_json(self) -> str:
        """One line of strict JSON (non-finite numbers become null)."""
        return json.dumps(self.to_dict(), allow_nan=False)

    def table(self) -> str:
        cells = [[_fmt(c) for c in r] for r in self.rows]
        widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(self.columns)]
        line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"
        out = [f"# {self.name}: {self.question}", line(self.columns),
               "| " + " | ".join("-" * w for w in widths) + " |"]
        out += [line(r) for r in cells]
        out += [""] + [f"{k}: {_fmt(v)}" for k, v in self.summary.items()]
        out += [f"note: {n}" for n in self.notes]
        return "\n".join(out)


def _fmt(v) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "n/a"
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def _clean(v):
    if isinstance(v, Timing):
        return _clean(asdict(v))
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if v is None or isinstance(v, (bool, int, str)):
        return v
    return str(v)


def environment() -> dict:
    return {"torch": torch.__version__, "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
            "python": sys.version.split()[0], "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
            "native_noise_kernel": native.available()}
