"""The backend seam: the engine only asks a backend for fitness; any backend that evaluates
the same chunks gives the same run, bit for bit."""
import pytest
import torch

import hyperscalees as hs
from hyperscalees.distributed import AbstractBackend, LocalBackend
from hyperscalees.engine import make_config, run
from hyperscalees.engine.loop import build


class ReversedChunks(AbstractBackend):
    """A toy 'distributed' backend: chunks evaluated in reverse order, as out-of-order workers would."""

    def __init__(self):
        self.calls = 0

    def evaluate(self, es, fitness_fn, chunk=None):
        n, chunk = es.population, chunk or es.population
        parts = {}
        for lo in reversed(range(0, n, chunk)):
            hi = min(n, lo + chunk)
            with es.perturbed((lo, hi)):
                parts[lo] = torch.as_tensor(fitness_fn(es.model, lo, hi)).float()
        self.calls += 1
        return torch.cat([parts[lo] for lo in sorted(parts)])



def test_engine_runs_identically_on_any_backend():
    cfg = make_config("xor", es={"population": 64, "seed": 3}, engine={"steps": 4, "chunk": 16})
    other = ReversedChunks()
    a, b = run(cfg, LocalBackend()), run(cfg, other)
    assert other.calls == 4
    assert a["metrics"] == b["metrics"]


def test_local_backend_equals_the_hand_written_loop():
    cfg = make_config("predict2", es={"population": 32, "seed": 1})
    task, model, es = build(cfg)
    _, model2, es2 = build(cfg)
    for step in range(3):
        fn = lambda m, lo, hi: task.fitness(m, lo, hi, step=step)
        f = LocalBackend().evaluate(es, fn, chunk=8)
        with es2.perturbed():
            f2 = task.fitness(model2, 0, 32, step=step)
        torch.testing.assert_close(f, f2, rtol=1e-6, atol=1e-6)  # chunked vs whole forward: float rounding
        LocalBackend().update(es, es.shape(f))
        es2.tell(f)                                             # same fitness -> same update bits
    for p, q in zip(model.parameters(), model2.parameters()):
        assert torch.equal(p, q)


def test_fitness_of_a_wrong_shape_names_the_chunk():
    model = torch.nn.Linear(2, 1)
    es = hs.EGGROLL(model, population=8)
    with pytest.raises(ValueError, match=r"shape \(3,\) for members \[0, 4\)"):
        hs.evaluate(es, lambda m, lo, hi: torch.zeros(3), chunk=4)
    with pytest.raises(ValueError, match="chunk must be an even number"):
        hs.evaluate(es, lambda m, lo, hi: torch.zeros(hi - lo), chunk=3)
    f = hs.evaluate(es, lambda m, lo, hi: m(torch.ones(hi - lo, 2)).repeat(1, 3), chunk=4)  # (P, G)
    assert f.shape == (8, 3)
