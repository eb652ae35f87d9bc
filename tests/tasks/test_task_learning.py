"""Each task learns with its own defaults: the numbers the README promises."""
import pytest
import torch

import hyperscalees as hs
from hyperscalees.engine import make_config, run
from hyperscalees.tasks import get_task


def train(name, seed, max_steps, check_every=5, **es_overrides):
    """Train with the task defaults; return (steps taken until solved or max_steps, metrics)."""
    task = get_task(name)(seed=seed)
    model = task.build_model()
    kw = {k: v for k, v in task.defaults.items() if k != "steps"}
    kw.update(es_overrides)
    es = hs.EGGROLL(model, seed=seed, **kw)
    metrics = task.evaluate(model)
    with torch.no_grad():
        while es.step < max_steps:
            es.tell(es.evaluate(lambda m, lo, hi: task.fitness(m, lo, hi, step=es.step)))
            if es.step % check_every == 0:
                metrics = task.evaluate(model)
                if task.solved(metrics):
                    break
    return es.step, metrics


def test_xor_converges_for_20_of_20_seeds():
    failed = {}
    for seed in range(20):
        steps, metrics = train("xor", seed, max_steps=150)
        if not metrics["mse"] < 0.005:
            failed[seed] = metrics["mse"]
    assert not failed, f"seeds that did not reach MSE < 0.005 in 150 steps: {failed}"


def test_predict2_reaches_target():
    summary = run(make_config("predict2", es={"seed": 0}))
    assert summary["metrics"]["abs_error"] < 0.05 and summary["solved"]


def test_poly_mse_decreases():
    task = get_task("poly")(seed=0)
    model = task.build_model()
    es = hs.EGGROLL(model, seed=0, **{k: v for k, v in task.defaults.items() if k != "steps"})
    curve = [task.evaluate(model)["mse"]]
    with torch.no_grad():
        for _ in range(3):
            for _ in range(30):
                es.tell(es.evaluate(lambda m, lo, hi: task.fitness(m, lo, hi, step=es.step)))
            curve.append(task.evaluate(model)["mse"])
    assert curve[-1] < 0.1 * curve[0], curve
    assert curve[1] < curve[0] and curve[3] < curve[1], curve


@pytest.mark.slow
def test_digits_reaches_90_percent_held_out():
    """A shortened version of `make run`: fixed steps (no timing), evaluated on the held-out split."""
    summary = run(make_config("digits", es={"seed": 0, "population": 1024}, engine={"steps": 60, "eval_every": 60}))
    assert summary["metrics"]["accuracy"] >= 0.90, summary["metrics"]
