"""Question: on the baselines workload, how much faster is a step of ours than each peer's?

Workload (shared/research/baselines.md §2): MLP 64-256-256-10 (``torch.manual_seed(0)``),
one fixed batch X (32x64), targets Y (32x10) from a seed-0 generator, every member sees
the same 32 inputs, fitness -MSE, population 1024, rank 1, sigma 0.05, 20 generations;
the metric is the median s/gen over generations 3-20.

Peers (``eggroll-trainer``, ``torcheggroll``, ``x-evolution``) are PyPI packages. They are
*never* our dependencies: each is installed into its own throw-away virtualenv under
``HS_PEERS_DIR`` (default /tmp/hs_peers) and driven through its public API in a
subprocess. A peer that cannot be installed or run is reported with its error.

Ours runs in our own interpreter (twice: before and after the peers, pooled, to damp
load drift), interleaved per generation with plain inference of the same 32,768 tokens
and with a minimal plain-PyTorch batched EGGROLL step (the baselines' anchor).

A dev tool, not library code, so it lives outside the installed package. Run it from a
source checkout (the saved output is ``bench/results/cpu/peers.txt``):

    .venv/bin/python bench/peers.py [--quick] [--json] [--device cpu|cuda] [--threads N] [--out FILE]
"""
from __future__ import annotations

import functools
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from hyperscalees.benchmarks.base import Report, environment, in_subprocess
from hyperscalees.cli.allocator import keep_freed_memory_env
from hyperscalees.nn.evaluate import evaluate
from hyperscalees.nn import EGGROLL
from peer_drivers import DRIVERS, minimal_step  # bench/ is on sys.path: this script's directory

BENCH_DIR = Path(__file__).resolve().parent

QUESTION = "s/gen of ours vs the PyPI EGGROLL peers on the baselines workload (MLP, pop 1024)"
COLUMNS = ["contender", "status", "s_per_gen", "min", "max", "over_ours", "ours_speedup", "note"]
PEERS = {
    "torcheggroll": dict(venv="venv_te", package="torcheggroll", min_python=(3, 8)),
    "eggroll-trainer": dict(venv="venv_et", package="eggroll-trainer", min_python=(3, 12)),
    "x-evolution": dict(venv="venv_xe", package="x-evolution", min_python=(3, 9)),
}


def configs(quick: bool) -> dict:
    if quick:
        return dict(population=16, gens=4, skip=2, chunk=8, install=False, timeout=300)
    return dict(population=1024, gens=20, skip=2, chunk=128, install=True, timeout=1800)


def peers_dir() -> Path:
    return Path(os.environ.get("HS_PEERS_DIR", "/tmp/hs_peers"))


def child_env() -> dict[str, str]:
    """Environment for our probe's fresh interpreter: the allocator settings, and bench/ importable.

    The probe is ``peers:ours_probe``; this file is a script, not part of the package, so
    the child finds it through ``PYTHONPATH`` (run as a script, ``__name__`` is ``__main__``).
    """
    path = [str(BENCH_DIR)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**keep_freed_memory_env(), "PYTHONPATH": os.pathsep.join(path)}


# -- our side ----------------------------------------------------------------------------
def ours_probe(population: int, gens: int, chunk: int, device: str = "cpu") -> dict:
    """Per-generation seconds of ours (chunked and whole), plain inference and the minimal step."""
    from torch import nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    model = model.to(device)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(32, 64, generator=g).to(device), torch.randn(32, 10, generator=g).to(device)
    xt = x.repeat(population, 1)
    es = EGGROLL(model, population=population, sigma=0.05, rank=1, lr=0.01, optimizer="sgd", seed=0)
    plain = {k: v.detach().clone() for k, v in model.state_dict().items()}
    ref = minimal_step(plain, population, sigma=0.05, lr=0.05, seed=0)

    def fitness(m, lo, hi, step=0):
        out = m(xt[lo * 32:hi * 32]).view(hi - lo, 32, 10)
        return -(out - y).pow(2).mean(dim=(1, 2))

    def infer(c):
        with torch.inference_mode():
            return torch.cat([fitness(model, lo, min(population, lo + c)) for lo in range(0, population, c)])

    fns = {"ours": lambda: es.tell(evaluate(es, fitness, chunk)),
           "ours_unchunked": lambda: es.tell(evaluate(es, fitness)),
           "inference": lambda: infer(population),
           "inference_chunked": lambda: infer(chunk),
           "minimal_reference": lambda: ref(xt.view(population, 32, 64), y)}
    times = {k: [] for k in fns}
    for _ in range(gens):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    with torch.inference_mode():
        mse = float(-fitness(model, 0, 2).mean())
    return {"times": times, "mse_end": mse}


# -- peers -------------------------------------------------------------------------------
def _python_for(min_python: tuple[int, int]) -> str | None:
    """An interpreter new enough: ours, python3.X on PATH, or a pyenv install."""
    if sys.version_info[:2] >= min_python:
        return sys.executable
    cands = []
    home = Path.home() / ".pyenv" / "versions"
    if home.is_dir():
        cands += [str(p / "bin" / "python") for p in sorted(home.iterdir())
                  if p.name.count(".") >= 1 and p.name.split(".")[0].isdigit() and p.name.split(".")[1].isdigit()
                  and tuple(map(int, p.name.split(".")[:2])) >= min_python]
    cands += [shutil.which(f"python{min_python[0]}.{v}") for v in range(min_python[1], min_python[1] + 4)]
    return next((c for c in cands if c and Path(c).exists() and _works(c, min_python)), None)


def _works(python: str, min_python: tuple[int, int]) -> bool:
    """A pyenv shim exists even when its version is not selected: ask the interpreter itself."""
    try:
        p = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True,
                           text=True, timeout=60)
        return p.returncode == 0 and tuple(map(int, p.stdout.split())) >= min_python
    except (OSError, ValueError, subprocess.SubprocessError):
        return False


def ensure_venv(name: str, install: bool, log=print) -> tuple[Path | None, str]:
    """Path to the peer venv's python, installing it once; (None, why) if impossible."""
    spec = PEERS[name]
    venv = peers_dir() / spec["venv"]
    py = venv / "bin" / "python"
    marker = venv / ".hs_installed"
    if marker.exists() and py.exists():
        return py, "ok"
    if not install:
        return None, f"venv {venv} not installed (quick mode never installs)"
    base = _python_for(spec["min_python"])
    if base is None:
        return None, f"needs Python >= {'.'.join(map(str, spec['min_python']))}; none found"
    torch_pin = "torch==" + torch.__version__.split("+")[0]
    log(f"  installing {spec['package']} into {venv} (throw-away venv, {torch_pin}) ...")
    peers_dir().mkdir(parents=True, exist_ok=True)
    steps = [[base, "-m", "venv", str(venv)], [str(py), "-m", "pip", "install", "-q", torch_pin, spec["package"]]]
    for cmd in steps:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        if p.returncode != 0:
            return None, f"install failed: {' '.join(cmd[-2:])}: {(p.stderr or p.stdout).strip()[-400:]}"
    marker.write_text(time.strftime("%Y-%m-%dT%H:%M:%S"))
    return py, "ok"


def run_peer(name: str, py: Path, population: int, gens: int, timeout: float) -> dict:
    script = peers_dir() / f"drive_{PEERS[name]['venv']}.py"
    script.write_text(DRIVERS[name])
    p = subprocess.run([str(py), str(script), "--pop", str(population), "--gens", str(gens)],
                       capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads()), **keep_freed_memory_env()})
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        raise RuntimeError((p.stderr or p.stdout).strip()[-600:])
    return json.loads(lines[-1])


def run(quick: bool = False, device: str = "cpu", log=print, peers=tuple(PEERS), isolate: bool = True) -> Report:
    """``isolate``: our side runs in fresh interpreters too, like the peers."""
    c = configs(quick)
    rep = Report("peers", QUESTION, COLUMNS)
    kw = dict(population=c["population"], gens=c["gens"], chunk=c["chunk"], device=str(device))
    probe = ((lambda: in_subprocess("peers:ours_probe", kw, env=child_env())) if isolate
             else (lambda: ours_probe(**kw)))
    first = probe()
    results, status = {}, {}
    for name in peers:
        py, why = ensure_venv(name, c["install"], log)
        if py is None:
            status[name] = why
            continue
        try:
            log(f"  running {name} ...")
            results[name] = run_peer(name, py, c["population"], c["gens"], c["timeout"])
            status[name] = "ok"
        except Exception as exc:  # a peer failing is a result, not a crash
            status[name] = f"failed: {str(exc)[-400:]}"
    second = probe()
    s = c["skip"]
    med = lambda ts: (statistics.median(ts), min(ts), max(ts))
    ours_times = {k: first["times"][k][s:] + second["times"][k][s:] for k in first["times"]}
    ours = med(ours_times["ours"])[0]
    labels = {"ours": f"hyperscalees EGGROLL (chunk {c['chunk']})", "ours_unchunked": "hyperscalees EGGROLL (one chunk)",
              "inference": "plain inference, same tokens", "inference_chunked": f"plain inference (chunk {c['chunk']})",
              "minimal_reference": "minimal batched EGGROLL (plain torch)"}
    for k, label in labels.items():
        m, lo, hi = med(ours_times[k])
        rep.rows.append([label, "ok", m, lo, hi, m / ours, ours / m if k.startswith("inference") else m / ours,
                         "2 runs pooled, interleaved per generation"])
    speedups = {}
    for name in peers:
        if name not in results:
            rep.rows.append([name, "could not run", math.nan, math.nan, math.nan, math.nan, math.nan, status[name]])
            continue
        r = results[name]
        m, lo, hi = med(r["times"][s:])
        speedups[name] = m / ours
        rep.rows.append([f"{name} {r.get('version', '')}".strip(), "ok", m, lo, hi, m / ours, m / ours,
                         r.get("note", "")])
    inf = med(ours_times["inference"])[0]
    rep.summary = {"ours_s_per_gen": ours, "ours_over_inference": ours / inf,
                   "ours_over_inference_chunked": ours / med(ours_times["inference_chunked"])[0],
                   "minimal_reference_over_inference": med(ours_times["minimal_reference"])[0] / inf,
                   "speedup": speedups, "peer_status": status, "population": c["population"],
                   "generations": c["gens"], "environment": environment()}
    rep.notes += [
        "over_ours = s/gen divided by ours (chunked); ours_speedup = how many times faster ours is "
        "(for inference rows: inference time / ours)",
        f"median over generations {s + 1}-{c['gens']}; peers run one after another in their own venvs and "
        "processes, ours before and after them (pooled), so load drift between processes is not cancelled",
        "peers use their own shaping/update rules (z-score SGD, centered-rank Nesterov); this compares cost "
        "per generation at equal population and sigma, not sample efficiency",
        "every process (ours and each peer's) runs with the same glibc malloc settings "
        "(MALLOC_MMAP_THRESHOLD_/TRIM_THRESHOLD_/TOP_PAD_, as cli/allocator.py sets for the CLI)",
    ]
    return rep


def main(argv: list[str] | None = None) -> int:
    import argparse

    from hyperscalees.cli.allocator import keep_freed_memory
    from hyperscalees.cli.bench import add_flags, measure

    parser = argparse.ArgumentParser(prog="bench/peers.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_flags(parser)
    parser.add_argument("--only-ours", action="store_true",
                        help="measure our rows only (no peer venvs): our step against inference, before/after a change")
    args = parser.parse_args(argv)
    keep_freed_memory()  # as the hyperscalees CLI does for its own process
    return measure(functools.partial(run, peers=() if args.only_ours else tuple(PEERS)), args)


if __name__ == "__main__":
    raise SystemExit(main())
