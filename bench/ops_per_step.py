"""Torch ops, kernel-launching ops and host syncs per ES step: the device-independent proxies of
launches per step. Usage: `PYTHONPATH=src python bench/ops_per_step.py`; prefix
`HYPERSCALEES_NOISE_KERNEL=interpret` for the GPU noise path (the Triton kernel, interpreted)."""
import importlib.util
from pathlib import Path

import torch
from torch import nn
# The counter is loaded from this checkout by path, so the same probe runs against an older
# checkout put first on PYTHONPATH (how the README compares with the parent commit).
spec = importlib.util.spec_from_file_location(
    "dispatch", Path(__file__).resolve().parents[1] / "src/hyperscalees/benchmarks/dispatch.py")
d = importlib.util.module_from_spec(spec); spec.loader.exec_module(d)
import hyperscalees as hs
from hyperscalees.models import TinyLM, mlp
def case(name):
    torch.manual_seed(0)
    if name == "linear":
        model = nn.Linear(256, 256, bias=False); x = torch.randn(64 * 4, 256)
        fit = lambda m, lo, hi: -m(x[lo*4:hi*4]).pow(2).view(hi-lo, -1).mean(1)
    elif name == "mlp":
        model = mlp([64, 256, 256, 10], "tanh"); x = torch.randn(64 * 4, 64)
        fit = lambda m, lo, hi: -m(x[lo*4:hi*4]).pow(2).view(hi-lo, -1).mean(1)
    else:
        model = TinyLM(vocab=64, d=64, layers=1, max_len=8); ids = torch.randint(0, 64, (64, 8))
        fit = lambda m, lo, hi: -m(ids[lo:hi]).pow(2).mean(dim=(1, 2))
    return model, fit
for name in ["linear", "mlp", "tiny_lm"]:
    model, fit = case(name)
    es = hs.EGGROLL(model, population=64, sigma=0.05, rank=1, lr=0.01, optimizer="adam")
    ev = getattr(hs, "evaluate", None)
    step = lambda: es.tell(ev(es, fit))
    step()
    with d.DispatchCounter() as c:
        step()
    print(f"{name}: ops/step {c.ops}, kernel ops/step {c.kernel_ops}, host syncs/step {c.syncs}")
