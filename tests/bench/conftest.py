"""The project's studies live in bench/ of the checkout, not in the package: their tests import them the
way `python bench/STUDY.py` does, with bench/ on sys.path."""
import importlib.util
import sys
from collections import namedtuple
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))


Call = namedtuple("Call", "method seed tuned validate budget c")


@pytest.fixture
def fake_runs(monkeypatch):
    """bench/llm_vs_grpo.py with fake ES and GRPO runs (no training): validation accuracy grows with ES's
    lr and falls with GRPO's learning rate; every call recorded as a :data:`Call`."""
    import llm_vs_grpo
    calls = []

    def side(method, key):
        def run_side(model, seed, budget, threads, c, tuned=None, validate=False):
            calls.append(Call(method, seed, tuned, validate, budget, c))
            v = (tuned or {}).get(key, 0.0)
            acc = min(v * 10, 1.0) if method == "es" else 1.0 - min(v * 1000, 1.0)
            rec = {"method": method, "seed": seed, "status": "ok", "after": {"accuracy": 0.5, "formatted": 1.0,
                   "reward": 0.5}, "steps": 3, "train_s": budget, "generations_per_s": 1.0, "curve": [[1.0, 0.1]]}
            return {**rec, "validation": {"accuracy": acc}} if validate else rec
        return run_side

    monkeypatch.setattr(llm_vs_grpo, "run_es", side("es", "lr"))
    monkeypatch.setattr(llm_vs_grpo, "run_grpo", side("grpo", "learning_rate"))
    monkeypatch.setattr(llm_vs_grpo, "before_accuracy", lambda model, c: {"accuracy": 0.1, "formatted": 1.0,
                                                                           "reward": 0.2, "problems": 7})
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())  # "trl is installed"
    return calls
