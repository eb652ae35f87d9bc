"""Driver scripts for the peer packages, and the minimal batched EGGROLL anchor.

Each driver is a standalone script run by the peer's own venv interpreter (never
imported here: the peers are not our dependencies). It builds the baselines workload
(MLP 64-256-256-10 with ``torch.manual_seed(0)``; X 32x64, Y 32x10 from a seed-0
generator; fitness -MSE), drives the peer through its public API for ``--gens``
generations and prints one JSON line: per-generation seconds, version, MSE before/after.
Used by ``bench/peers.py``; not part of the installed package.
"""
from __future__ import annotations

import torch

_COMMON = '''
import argparse, json, os, time
import torch
from torch import nn
from importlib.metadata import version
ap = argparse.ArgumentParser()
ap.add_argument("--pop", type=int, default=1024)
ap.add_argument("--gens", type=int, default=20)
args = ap.parse_args()
torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
g = torch.Generator().manual_seed(0)
X, Y = torch.randn(32, 64, generator=g), torch.randn(32, 10, generator=g)
def mse_of(m):
    with torch.no_grad():
        return float(((m(X) - Y) ** 2).mean())
mse0 = mse_of(model)
times = []
'''

_END = '''
print(json.dumps({"times": times, "version": version(PKG), "mse0": mse0, "mse_end": mse_of(model), "note": NOTE}))
'''

TORCHEGGROLL = _COMMON + '''
from torcheggroll import TorchEggrollES
PKG, NOTE = "torcheggroll", "vmap over stacked dense (pop, *shape) weights; z-score fitness"
es = TorchEggrollES(model, pop_size=args.pop, sigma=0.05, lr=0.01, rank=1, antithetic=True, normalize_fitness=True)
loss = lambda out, y: ((out - y) ** 2).mean()
for _ in range(args.gens):
    t0 = time.perf_counter()
    es.step(X, loss, Y)
    times.append(time.perf_counter() - t0)
''' + _END

EGGROLL_TRAINER = _COMMON + '''
from eggroll_trainer import EGGROLLTrainer
PKG, NOTE = "eggroll-trainer", "members one by one in Python; noise_reuse=2 (antithetic); z-score fitness"
fit = lambda m: -float(((m(X) - Y) ** 2).mean())
tr = EGGROLLTrainer(model.parameters(), model=model, fitness_fn=fit, population_size=args.pop, learning_rate=0.01,
                    sigma=0.05, rank=1, noise_reuse=2, seed=0)
for _ in range(args.gens):
    t0 = time.perf_counter()
    tr.step()
    times.append(time.perf_counter() - t0)
''' + _END

X_EVOLUTION = _COMMON + '''
from x_evolution import EvoStrategy
PKG, NOTE = "x-evolution", "pop/2 mirrored seeds; members sequential; centered rank + its default SGD"
stamps = [time.perf_counter()]
def on_generation(*_):
    stamps.append(time.perf_counter())
env = lambda m: -((m(X) - Y) ** 2).mean()
evo = EvoStrategy(model, environment=env, num_generations=args.gens, noise_population_size=args.pop // 2,
                  mirror_sampling=True, noise_scale=0.05, noise_low_rank=1, learning_rate=0.01,
                  fitness_to_weighted_factor="centered_rank", cpu=True, verbose=False, on_generation=on_generation)
stamps[0] = time.perf_counter()
evo()
times = [b - a for a, b in zip(stamps, stamps[1:])]
''' + _END

DRIVERS = {"torcheggroll": TORCHEGGROLL, "eggroll-trainer": EGGROLL_TRAINER, "x-evolution": X_EVOLUTION}


def minimal_step(state: dict, population: int, sigma: float, lr: float, seed: int = 0):
    """The baselines' anchor: one batched EGGROLL generation in plain torch, on its own weights.

    Per layer: antithetic rank-1 factors and bias noise drawn with ``torch.randn``; shared
    base GEMM, then the rank-1 term with ``baddbmm`` and the bias noise; centered-rank
    fitness; update Σ f_i A_i B_iᵀ as one einsum. Returns ``step(x (P, B, in), y)``.
    """
    layers = [(state[f"{i}.weight"].clone(), state[f"{i}.bias"].clone()) for i in (0, 2, 4)]
    gen = torch.Generator().manual_seed(seed)
    half = population // 2

    def noise():
        out = []
        for w, _ in layers:
            a = torch.randn(half, w.shape[0], 1, generator=gen)
            b = torch.randn(half, w.shape[1], 1, generator=gen)
            e = torch.randn(half, w.shape[0], generator=gen)
            out.append((torch.cat([a, -a]), torch.cat([b, b]), torch.cat([e, -e])))
        return out

    def step(x, y):
        with torch.inference_mode():
            eps = noise()
            h = x
            for i, ((w, bias), (a, b, e)) in enumerate(zip(layers, eps)):
                p, m, d = h.shape
                base = torch.addmm(bias, h.reshape(p * m, d), w.T).view(p, m, -1)
                out = torch.baddbmm(base, torch.bmm(h, b), a.transpose(1, 2), alpha=sigma) + sigma * e.unsqueeze(1)
                h = torch.relu(out) if i < len(layers) - 1 else out
            f = -((h - y) ** 2).mean(dim=(1, 2))
            ranks = torch.argsort(torch.argsort(f)).float()
            f = ranks / (f.numel() - 1) - 0.5
            for (w, bias), (a, b, e) in zip(layers, eps):
                w.add_(torch.einsum("por,pir->oi", a * f.view(-1, 1, 1), b), alpha=lr / (population * sigma))
                bias.add_(f @ e, alpha=lr / (population * sigma))
        return f

    return step
