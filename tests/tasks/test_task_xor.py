"""XOR, the gist set-up, converges for every seed."""
from task_helpers import train


def test_xor_converges_for_20_of_20_seeds():
    failed = {}
    for seed in range(20):
        _, metrics = train("xor", seed, max_steps=150)
        if not metrics["mse"] < 0.005:
            failed[seed] = metrics["mse"]
    assert not failed, f"seeds that did not reach MSE < 0.005 in 150 steps: {failed}"
