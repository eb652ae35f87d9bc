from hyperscalees.distributed import LocalBackend
"""predict2 reaches mean |y - 2| < 0.05 with its defaults."""
from hyperscalees.engine import make_config, run


def test_predict2_reaches_target():
    summary = run(make_config("predict2", es={"seed": 0}), LocalBackend)
    assert summary["metrics"]["abs_error"] < 0.05 and summary["solved"]
