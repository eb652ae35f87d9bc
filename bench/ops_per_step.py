"""Torch ops, kernel-launching ops and host syncs per ES step: device-independent proxies of a GPU's
launches per step, measurable on any machine.

    PYTHONPATH=src python bench/ops_per_step.py                                       # this machine's path
    HYPERSCALEES_NOISE_KERNEL=interpret PYTHONPATH=src python bench/ops_per_step.py   # the GPU noise path

The counter is loaded from this checkout by file path, so the same probe runs against an older
checkout put first on PYTHONPATH (how bench/results/cpu/README.md compares with the parent commit).
"""
import importlib.util
from pathlib import Path

import torch
from torch import nn

import hyperscalees as hs
from hyperscalees.models import TinyLM, mlp

_spec = importlib.util.spec_from_file_location(
    "dispatch", Path(__file__).resolve().parents[1] / "src/hyperscalees/benchmarks/dispatch.py")
dispatch = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dispatch)

P, T = 64, 4


def case(name):
    """(model, fitness_fn) of one probe: population 64, member-major inputs."""
    torch.manual_seed(0)
    if name == "tiny_lm":
        model = TinyLM(vocab=64, d=64, layers=1, max_len=8)
        ids = torch.randint(0, 64, (P, 8))
        return model, lambda m, lo, hi, step: -m(ids[lo:hi]).pow(2).mean(dim=(1, 2))
    model = nn.Linear(256, 256, bias=False) if name == "linear" else mlp([64, 256, 256, 10], "tanh")
    x = torch.randn(P * T, model.in_features if name == "linear" else 64)
    return model, lambda m, lo, hi, step: -m(x[lo * T:hi * T]).pow(2).view(hi - lo, -1).mean(dim=1)


def main():
    for name in ("linear", "mlp", "tiny_lm"):
        model, fitness = case(name)
        es = hs.EGGROLL(model, population=P, sigma=0.05, rank=1, lr=0.01, optimizer="adam")
        es.tell(hs.evaluate(es, fitness))                     # first step: lazy set-up
        with dispatch.DispatchCounter() as counter:
            es.tell(hs.evaluate(es, fitness))
        kernels = getattr(counter, "kernel_ops", "-")
        print(f"{name}: ops/step {counter.ops}, kernel ops/step {kernels}, host syncs/step {counter.syncs}")


if __name__ == "__main__":
    main()
