"""The backend seam: a backend is handed a recipe and runs steps; any backend that evaluates the
same chunks gives the same run, bit for bit."""
import pytest
import torch
from torch import nn

import hyperscalees as hs
from hyperscalees.distributed import AbstractBackend, LocalBackend, backend_factory, get_backend
from hyperscalees.engine import make_config, run
from hyperscalees.engine.recipe import TaskRecipe, build


class ReversedChunks(LocalBackend):
    """A toy 'distributed' backend: chunks evaluated in reverse order, as out-of-order workers would."""

    calls = 0

    def evaluate(self):
        es, n = self.es, self.es.population
        chunk, parts = self.chunk or n, {}
        for lo in reversed(range(0, n, chunk)):
            hi = min(n, lo + chunk)
            with es.perturbed((lo, hi)):
                parts[lo] = torch.as_tensor(self.fitness(es.model, lo, hi, es.step)).float()
        ReversedChunks.calls += 1
        return torch.cat([parts[lo] for lo in sorted(parts)])


def test_engine_runs_identically_on_any_backend():
    cfg = make_config("xor", es={"population": 64, "seed": 3}, engine={"steps": 4, "chunk": 16})
    a, b = run(cfg, LocalBackend), run(cfg, ReversedChunks)
    assert ReversedChunks.calls == 4
    assert a["metrics"] == b["metrics"]


class Xor:
    """A user's own fitness: negative squared error on xor, the same four rows for every member."""

    X = torch.tensor([[0., 0], [0, 1], [1, 0], [1, 1]])
    Y = torch.tensor([[0.], [1], [1], [0]])

    def __call__(self, model, lo, hi, step):
        out = model(self.X.repeat(hi - lo, 1)).view(hi - lo, 4, 1)
        return -((out - self.Y) ** 2).mean(dim=(1, 2))


def xor_recipe():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 1))
    return hs.EGGROLL(model, population=64, sigma=0.1, rank=1, lr=0.05, optimizer="adam", seed=0), Xor()


def test_local_backend_equals_the_hand_written_loop():
    backend = hs.LocalBackend(xor_recipe, chunk=16)
    es, fitness = xor_recipe()
    for step in range(5):
        metrics = backend.step()
        with es.perturbed():
            f = fitness(es.model, 0, es.population, step)
        es.tell(f)
    assert metrics["step"] == 5 and backend.es.step == 5
    for p, q in zip(backend.model.parameters(), es.model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)  # chunked vs whole forward: float rounding
    backend.close()


def test_chunking_never_changes_the_weights():
    a, b = hs.LocalBackend(xor_recipe, chunk=8), hs.LocalBackend(xor_recipe)
    for _ in range(3):
        a.step(), b.step()
    for p, q in zip(a.model.parameters(), b.model.parameters()):
        assert torch.equal(p, q)


def test_the_engine_recipe_builds_what_build_builds():
    cfg = make_config("predict2", es={"population": 32, "seed": 1})
    es, fitness = TaskRecipe(cfg.to_dict())()
    _, model, _ = build(cfg)
    assert fitness.task.name == "predict2"
    assert all(torch.equal(p, q) for p, q in zip(es.model.parameters(), model.parameters()))


def test_bad_recipes_and_fitness_are_named():
    with pytest.raises(TypeError, match="needs a recipe"):
        hs.LocalBackend(object())
    with pytest.raises(TypeError, match=r"must return \(es, fitness\)"):
        hs.LocalBackend(lambda: 3)
    with pytest.raises(ValueError, match="chunk must be an even number"):
        hs.LocalBackend(xor_recipe, chunk=3)
    es, _ = xor_recipe()
    backend = hs.LocalBackend(lambda: (es, lambda m, lo, hi, step: torch.zeros(3)), chunk=4)
    with pytest.raises(ValueError, match=r"shape \(3,\) for members \[0, 4\)"):
        backend.step()


def test_evaluate_names_bad_shapes_and_keeps_g():
    model = torch.nn.Linear(2, 1)
    es = hs.EGGROLL(model, population=8)
    with pytest.raises(ValueError, match=r"shape \(3,\) for members \[0, 4\)"):
        hs.evaluate(es, lambda m, lo, hi, step: torch.zeros(3), chunk=4)
    with pytest.raises(ValueError, match="chunk must be an even number"):
        hs.evaluate(es, lambda m, lo, hi, step: torch.zeros(hi - lo), chunk=3)
    f = hs.evaluate(es, lambda m, lo, hi, step: m(torch.ones(hi - lo, 2)).repeat(1, 3), chunk=4)  # (P, G)
    assert f.shape == (8, 3)


def test_backend_registry_and_factory_check_options_first():
    assert get_backend("local") is LocalBackend
    with pytest.raises(ValueError, match="unknown backend 'mpi'"):
        get_backend("mpi")
    with pytest.raises(ValueError, match="takes no options"):
        backend_factory("local", {"workers": 2})
    with pytest.raises(ValueError, match="workers must be >= 1"):
        backend_factory("ray", {"workers": 0})
    assert issubclass(LocalBackend, AbstractBackend)


def test_evaluate_hands_the_step_and_refuses_the_old_three_argument_fitness():
    """One fitness signature everywhere: hs.evaluate calls (model, lo, hi, step) like every backend,
    and a (model, lo, hi) function fails at once with a TypeError naming the expected form."""
    es = hs.EGGROLL(torch.nn.Linear(2, 1), population=8, seed=0)
    seen = []

    def fitness(m, lo, hi, step):
        seen.append((lo, hi, step))
        return m(torch.ones(hi - lo, 2)).squeeze(1)
    for _ in range(2):
        es.tell(hs.evaluate(es, fitness, chunk=4))
    assert seen == [(0, 4, 0), (4, 8, 0), (0, 4, 1), (4, 8, 1)]
    with pytest.raises(TypeError, match=r"fitness\(model, lo, hi, step\).*\(m, lo, hi\)"):
        hs.evaluate(es, lambda m, lo, hi: torch.zeros(hi - lo))
    with pytest.raises(TypeError, match=r"fitness\(model, lo, hi, step\).*got int"):
        hs.evaluate(es, 3)
