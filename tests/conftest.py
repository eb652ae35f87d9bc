import pytest


@pytest.fixture
def no_plot(monkeypatch):
    """Skip curve.png (about 0.5 s a run) in tests that run many short trainings and never look at it."""
    monkeypatch.setattr("hyperscalees.engine.loop.plot_curve", lambda directory, metric: (None, None))
