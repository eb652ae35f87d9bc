"""GraphedStep: a captured-and-replayed step equals the eager step, or the step runs eagerly and says why.

CUDA graphs are checked on a CPU with a recording stand-in (graph_emulator.py): capture
changes nothing, replay re-runs the recorded ops with the tensors and scalars they had. The
fused noise kernel runs under Triton's interpreter, so the replayed draws are the real ones.
"""
import pytest
import torch
from torch import nn

import hyperscalees as hs
from hyperscalees.nn.graph import GraphedStep

from graph_emulator import RecordedGraph

pytest.importorskip("triton")
P, T, STEPS = 8, 3, 5


class Data:
    """Fitness inputs at a fixed address, refreshed in place each step."""

    def __init__(self):
        self.x = torch.zeros(P * T, dtype=torch.long)
        self.calls = 0

    def refresh(self, step):
        self.x.copy_(torch.arange(P * T).add(step * 5).remainder(11))

    def fitness(self, model, lo, hi):
        self.calls += 1
        out = model(self.x[lo * T:hi * T])
        return -out.pow(2).view(hi - lo, -1).mean(dim=1)


def build(**kw):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(11, 6), nn.Linear(6, 5), nn.Tanh(), nn.LayerNorm(5), nn.Linear(5, 3))
    es = hs.EGGROLL(model, **({"population": P, "sigma": 0.1, "rank": 2, "lr": 0.05, "optimizer": "adam",
                               "seed": 4} | kw))
    return model, es


def run(graphed: bool, steps=STEPS, chunk=4, **kw):
    model, es = build(**kw)
    data = Data()
    step = GraphedStep(es, data.fitness, chunk=chunk, capture_factory=RecordedGraph, enabled=graphed)
    metrics = []
    for s in range(steps):
        data.refresh(s)
        metrics.append(dict(step()))
    return model, step, data, metrics


@pytest.fixture(autouse=True)
def interpreted_kernel(monkeypatch):
    monkeypatch.setenv("HYPERSCALEES_NOISE_KERNEL", "interpret")


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_replayed_steps_equal_eager_steps_bit_for_bit(optimizer):
    eager_model, eager, _, eager_metrics = run(False, optimizer=optimizer)
    model, graphed, data, metrics = run(True, optimizer=optimizer)
    assert eager.reason == "disabled" and graphed.reason is None and graphed.captured
    assert data.calls == (graphed.warmup + 1) * (P // 4)   # Python ran the forwards only up to the capture
    for k, v in eager_model.state_dict().items():
        assert torch.equal(v, model.state_dict()[k]), k
    assert metrics == eager_metrics
    assert graphed.es.strategy.step == STEPS


def test_changing_sigma_or_lr_runs_eagerly_and_says_why():
    _, step, _, _ = run(True, steps=1, sigma_decay=0.9)
    assert "σ changes every step" in step.reason and not step.captured
    _, step, _, _ = run(True, steps=1, lr_decay=0.9)
    assert "lr changes every step" in step.reason


def test_parameters_off_cuda_make_the_default_capture_decline():
    _, es = build()                                  # on the CPU, whether or not a GPU is present
    step = GraphedStep(es, Data().fitness)
    assert "CUDA graphs need a CUDA device" in step.reason and not step.captured


def test_without_the_fused_kernel_it_declines(monkeypatch):
    monkeypatch.setenv("HYPERSCALEES_NOISE_KERNEL", "torch")
    _, es = build()
    assert "fused noise kernel" in GraphedStep(es, Data().fitness, capture_factory=RecordedGraph).reason


def test_a_step_that_reads_a_device_value_falls_back_with_a_warning():
    eager_model, *_ = run(False)
    model, es = build()
    data = Data()

    def fitness(m, lo, hi):
        f = data.fitness(m, lo, hi)
        return f * 0 + f if float(f.sum()) < 1e30 else f      # a host read: not capturable
    step = GraphedStep(es, fitness, chunk=4, capture_factory=RecordedGraph)
    with pytest.warns(RuntimeWarning, match="capture failed"):
        for s in range(STEPS):
            data.refresh(s)
            step()
    assert "capture failed" in step.reason and not step.captured
    for k, v in eager_model.state_dict().items():
        assert torch.equal(v, model.state_dict()[k]), k


def test_a_real_cuda_graph_declines_the_interpreted_kernel():
    """The interpreter copies device tensors to the host per launch; inside torch.cuda.graph that
    raised mid-capture (the H200 run of 2026-11-28). It is refused up front, with the fix named."""
    from hyperscalees.nn.graph import CudaGraphCapture, capture_obstacle
    _, es = build(optimizer="sgd")
    reason = capture_obstacle(es, torch.device("cuda"), CudaGraphCapture)
    assert reason is not None and "HYPERSCALEES_NOISE_KERNEL=interpret" in reason


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_real_cuda_graph_equals_eager(monkeypatch):
    from hyperscalees.nn.graph import CudaGraphCapture
    # The compiled kernel, not the module's interpreted one: the interpreter cannot be captured.
    monkeypatch.setenv("HYPERSCALEES_NOISE_KERNEL", "auto")

    def go(enabled):
        torch.manual_seed(0)
        model = nn.Linear(64, 32).cuda()
        es = hs.EGGROLL(model, population=64, sigma=0.1, rank=1, lr=0.05, optimizer="adam")
        x = torch.zeros(64 * 2, 64, device="cuda")
        step = GraphedStep(es, lambda m, lo, hi: -m(x[lo * 2:hi * 2]).pow(2).view(hi - lo, -1).mean(dim=1),
                           enabled=enabled, capture_factory=CudaGraphCapture)
        for s in range(6):
            x.copy_(torch.randn(x.shape, generator=torch.Generator().manual_seed(s)).cuda())
            step()
        return model, step
    eager, _ = go(False)
    graphed, step = go(True)
    assert step.captured, step.reason
    assert torch.equal(eager.weight, graphed.weight) and torch.equal(eager.bias, graphed.bias)
