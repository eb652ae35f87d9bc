import pytest
import torch


@pytest.fixture
def no_plot(monkeypatch):
    """Skip curve.png (about 0.5 s a run) in tests that run many short trainings and never look at it."""
    monkeypatch.setattr("hyperscalees.engine.loop.plot_curve", lambda directory, metric: (None, None))


@pytest.fixture
def one_thread():
    """torch at one intra-op thread for the test (modules opt in with ``pytestmark =
    pytest.mark.usefixtures("one_thread")``): small models gain nothing from intra-op threads,
    and on a loaded machine each parallel region can wait for a descheduled partner thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
