"""Every registered task honours the fitness contract the engine relies on."""
import pytest
import torch

import hyperscalees as hs
from hyperscalees.tasks import TASKS, get_task


# RL on Pendulum: its returns move continuously with the weights (CartPole's argmax actions do not
# change under a σ of 1e-3, so the twin test below would see no noise at all).
OPTIONS = {"rl": {"env": "Pendulum-v1", "eval_episodes": 4, "starts": "step"},  # every member: the same starts
           "lm": {"model": "float-gru", "hidden": 16, "layers": 1, "window": 8, "streams": 2, "max_bytes": 50000,
                  "eval_tokens": 256, "sample_every": 0}}


# llm needs a pretrained model folder: its contract is tested in tests/llm/test_train_llm.py
CONTRACT = sorted(n for n in TASKS if n != "llm")


@pytest.fixture(scope="module")
def tasks():
    return {name: cls(seed=3, options=OPTIONS.get(name)) for name, cls in TASKS.items() if name in CONTRACT}


def per_member(f):
    """(P,) scores, or (P, G) scores averaged over G (what the engine's default group_fitness does)."""
    return f if f.dim() == 1 else f.mean(dim=1)


@pytest.mark.parametrize("name", CONTRACT)
def test_fitness_shape_and_identical_inputs_across_members_and_chunks(tasks, name):
    """Unperturbed, every member sees the same data, so all scores are equal -- also across chunks."""
    task = tasks[name]
    model = task.build_model()
    with torch.no_grad():
        a = per_member(task.fitness(model, 0, 6, step=5))
        b = per_member(task.fitness(model, 6, 10, step=5))
    assert a.shape == (6,) and b.shape == (4,)
    assert torch.equal(a, a[0].expand(6)) and torch.equal(b, a[:4])
    assert torch.isfinite(a).all()


@pytest.mark.parametrize("name", CONTRACT)
def test_antithetic_twins_differ_only_by_sign(tasks, name):
    """With noise on, twins 2k/2k+1 share data: their mean score moves only at second order in σ."""
    task = tasks[name]
    model = task.build_model()
    es = hs.EGGROLL(model, population=8, sigma=1e-3, rank=1, lr=0.01, seed=1)
    with torch.no_grad():
        f = per_member(hs.evaluate(es, lambda m, lo, hi, step: task.fitness(m, lo, hi, step=2), chunk=4))
        base = per_member(task.fitness(model, 0, 2, step=2))[0]
    pair_mean = f.view(-1, 2).mean(dim=1)
    spread = (f.view(-1, 2)[:, 0] - f.view(-1, 2)[:, 1]).abs().max()
    assert spread > 0  # noise did reach the model
    assert (pair_mean - base).abs().max() < 0.1 * spread + 1e-6


@pytest.mark.parametrize("name", CONTRACT)
def test_evaluate_reports_its_metric_and_model_is_seeded(tasks, name):
    cls = TASKS[name]
    task = tasks[name]
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    m1, m2 = task.build_model(), cls(seed=3, options=OPTIONS.get(name)).build_model()
    assert torch.equal(torch.rand(1), before)  # building a model leaves the global RNG alone
    for p, q in zip(m1.parameters(), m2.parameters()):
        assert torch.equal(p, q)
    other = cls(seed=4, options=OPTIONS.get(name)).build_model()
    assert not all(torch.equal(p, q) for p, q in zip(m1.parameters(), other.parameters()))
    metrics = task.evaluate(m1)
    assert set(task.metric_names()) <= set(metrics) and task.metric in metrics
    assert task.goal in ("min", "max")
    assert {"population", "sigma", "rank", "lr", "optimizer", "steps"} <= set(cls.defaults)


@pytest.mark.parametrize("name", ["predict2", "digits"])
def test_step_data_depends_only_on_seed_and_step(name):
    a, b = get_task(name)(seed=7), get_task(name)(seed=7)
    first = a.batch(4)
    a.batch(5)
    again, fresh = a.batch(4), b.batch(4)
    for x, y in zip(first if isinstance(first, tuple) else (first,), again if isinstance(again, tuple) else (again,)):
        assert torch.equal(x, y)
    for x, y in zip(first if isinstance(first, tuple) else (first,), fresh if isinstance(fresh, tuple) else (fresh,)):
        assert torch.equal(x, y)
    nxt = a.batch(5)
    assert not torch.equal(nxt[0] if isinstance(nxt, tuple) else nxt, first[0] if isinstance(first, tuple) else first)
    other_seed = get_task(name)(seed=8).batch(4)
    assert not torch.equal(other_seed[0] if isinstance(other_seed, tuple) else other_seed,
                           first[0] if isinstance(first, tuple) else first)


def test_unknown_task_and_options_are_named():
    with pytest.raises(ValueError, match=r"'nope'.*digits.*xor"):
        get_task("nope")
    with pytest.raises(ValueError, match="bogus"):
        get_task("xor")(options={"bogus": 1})
    with pytest.raises(ValueError, match="activation 'sine'"):
        get_task("xor")(options={"activation": "sine"}).build_model()


def test_digits_split_is_fixed_and_disjoint():
    a, b = get_task("digits")(seed=0), get_task("digits")(seed=5)
    assert torch.equal(a.x_eval, b.x_eval) and torch.equal(a.y_eval, b.y_eval)
    assert len(a.y_eval) + len(a.y_train) == 1797
    train_rows = {tuple(r.tolist()) for r in a.x_train}
    overlap = sum(tuple(r.tolist()) in train_rows for r in a.x_eval)
    assert overlap < 0.05 * len(a.y_eval)  # only genuine duplicate images in the dataset may coincide
