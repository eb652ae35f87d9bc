from hyperscalees.distributed import LocalBackend
"""digits: held-out accuracy above 90% -- a shortened `make run`."""
import pytest

from hyperscalees.engine import make_config, run


@pytest.mark.slow
def test_digits_reaches_90_percent_held_out():
    """A shortened version of `make run`: fixed steps (no timing), evaluated on the held-out split."""
    summary = run(make_config("digits", es={"seed": 0, "population": 1024}, engine={"steps": 40, "eval_every": 40}), LocalBackend)
    assert summary["metrics"]["accuracy"] >= 0.90, summary["metrics"]
