"""poly: the held-out MSE falls steadily."""
import torch

import hyperscalees as hs
from hyperscalees.tasks import get_task


def test_poly_mse_decreases():
    task = get_task("poly")(seed=0)
    model = task.build_model()
    es = hs.EGGROLL(model, seed=0, **{k: v for k, v in task.defaults.items() if k != "steps"})
    curve = [task.evaluate(model)["mse"]]
    with torch.no_grad():
        for _ in range(3):
            for _ in range(20):
                es.tell(hs.evaluate(es, lambda m, lo, hi, step: task.fitness(m, lo, hi, step=step)))
            curve.append(task.evaluate(model)["mse"])
    assert curve[-1] < 0.1 * curve[0], curve
    assert curve[1] < curve[0] and curve[3] < curve[1], curve
