"""A task with state (here an observation normaliser) is checkpointed with it and resumes bit for bit."""
from dataclasses import dataclass

import pytest
import torch
from run_helpers import assert_same, assert_same_run

from hyperscalees.distributed import LocalBackend
from hyperscalees.engine import load_checkpoint, load_run, make_config, run
from hyperscalees.models import mlp
from hyperscalees.tasks import TASKS, AbstractTask, member_major

pytestmark = pytest.mark.usefixtures("no_plot")


@dataclass(frozen=True)
class NormOptions:
    hidden: int = 8


class NormalisedInputsTask(AbstractTask):
    """Fresh inputs each step, shifted by a running mean of all inputs seen so far (as RL observation
    normalisation does): the fitness depends on every earlier step, not only on (seed, step)."""

    name = "normalised"
    metric = "mse"
    defaults = {"population": 16, "sigma": 0.1, "lr": 0.05, "steps": 6}
    Options = NormOptions

    def __init__(self, seed=0, device=None, options=None):
        super().__init__(seed, device, options)
        self.mean, self.count = torch.zeros(3), 0
        self.target = torch.tensor([[1.0], [-1.0], [0.5], [0.0]])

    def make_model(self):
        return mlp([3, self.options.hidden, 1])

    def fitness(self, model, lo, hi, step=0):
        p = hi - lo
        x = torch.randn(4, 3, generator=self.generator(step)) + 3.0
        if lo == 0:  # update the statistics once per step
            self.count += 1
            self.mean = self.mean + (x.mean(dim=0) - self.mean) / self.count
        out = model(member_major(x - self.mean, p)).view(p, 4, 1)  # (P, 4, 1)
        return -((out - self.target) ** 2).mean(dim=(1, 2))

    @torch.no_grad()
    def evaluate(self, model):
        x = torch.full((4, 3), 3.0) - self.mean
        return {"mse": float(((model(x) - self.target) ** 2).mean())}

    def state_dict(self):
        return {"mean": self.mean.clone(), "count": self.count}

    def load_state_dict(self, state):
        self.mean, self.count = state["mean"].clone(), int(state["count"])


@pytest.fixture
def stateful_task(monkeypatch):
    monkeypatch.setitem(TASKS, NormalisedInputsTask.name, NormalisedInputsTask)


def config(**engine):
    return make_config("normalised", es={"seed": 1}, engine={"steps": 6, **engine})


def test_task_state_is_saved_and_a_resumed_run_matches_an_uninterrupted_one(tmp_path, stateful_task):
    run(config(out=str(tmp_path / "straight")), LocalBackend)
    run(config(steps=3, out=str(tmp_path / "resumed")), LocalBackend)
    assert load_checkpoint(tmp_path / "resumed").task["count"] == 3
    run(config(resume=str(tmp_path / "resumed")), LocalBackend)
    assert_same_run(tmp_path / "straight", tmp_path / "resumed")
    # eval restores the task state too: its metrics are those of the finished run
    _, task, model, _ = load_run(tmp_path / "resumed")
    assert task.count == 6 and task.evaluate(model) == load_checkpoint(tmp_path / "resumed").meta["metrics"]


def test_without_its_state_the_resumed_run_would_differ(tmp_path, stateful_task, monkeypatch):
    """The check above has teeth: dropping the task state on resume changes the trajectory."""
    run(config(out=str(tmp_path / "straight")), LocalBackend)
    run(config(steps=3, out=str(tmp_path / "resumed")), LocalBackend)
    monkeypatch.setattr(NormalisedInputsTask, "load_state_dict", lambda self, state: None)
    run(config(resume=str(tmp_path / "resumed")), LocalBackend)
    with pytest.raises(AssertionError):
        assert_same(load_checkpoint(tmp_path / "straight").model, load_checkpoint(tmp_path / "resumed").model)
