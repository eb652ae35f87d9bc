"""Adding a task, an update rule, a strategy or a backend is one new file plus one registration line.

Each toy below stands for the new file; the ``monkeypatch.setitem`` is the registration line
(in the package: a line in ``tasks.TASKS``, ``strategies.rules.RULES``, ``strategies.STRATEGIES``
or ``distributed.BACKENDS``). Nothing else is touched, yet the command line offers it, the config
accepts it and a run uses it.
"""
import json
from dataclasses import dataclass

import pytest
import torch
from torch import nn

from hyperscalees import distributed, strategies, tasks
from hyperscalees.cli.main import main
from hyperscalees.distributed import LocalBackend
from hyperscalees.noise.spec import ESMode
from hyperscalees.strategies.base import AbstractStrategy
from hyperscalees.strategies.rules import RULES, AbstractUpdateRule
from hyperscalees.tasks.base import AbstractTask, option


@dataclass(frozen=True)
class ConstOptions:
    target: float = option(3.0, "the value the model's output should reach")


class ConstTask(AbstractTask):
    """Move a 1 -> 1 linear model's output at x = 1 to --target."""

    name, metric, goal = "const", "error", "min"
    defaults = {"population": 32, "sigma": 0.1, "lr": 0.1, "steps": 40}
    Options = ConstOptions

    def make_model(self):
        return nn.Linear(1, 1)

    def fitness(self, model, lo, hi, step=0):
        return -(model(torch.ones(hi - lo, 1)).view(-1) - self.options.target) ** 2

    def evaluate(self, model):
        return {"error": float((model(torch.ones(1, 1)) - self.options.target).abs())}


class SignRule(AbstractUpdateRule):
    """signSGD on the ES estimate."""

    def apply(self, estimates, lr_factor):
        for g in self.groups:
            for n in g.names:
                self.params[n].add_(estimates[n].sign(), alpha=g.lr * lr_factor)


class FullRankStrategy(AbstractStrategy):
    name = "full_rank_toy"

    def is_lowrank(self, spec):
        return False


class CountingBackend(LocalBackend):
    name = "counting"
    steps = 0

    def evaluate(self):
        CountingBackend.steps += 1
        return super().evaluate()


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(tasks.TASKS, "const", ConstTask)                       # the one line per kind
    monkeypatch.setitem(RULES, "sign_sgd", SignRule)
    monkeypatch.setitem(strategies.STRATEGIES, "full_rank_toy", FullRankStrategy)
    monkeypatch.setitem(distributed.BACKENDS, "counting", CountingBackend)


def test_a_new_task_rule_strategy_and_backend_run_from_the_command_line(registered, capsys):
    code = main(["train", "const", "--target", "2.5", "--update-rule", "sign_sgd", "--lr", "0.02",
                 "--strategy", "full_rank_toy", "--backend", "counting", "--steps", "60", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    summary = json.loads(out.out)
    assert summary["strategy"] == "full_rank_toy" and summary["steps"] == 60
    assert CountingBackend.steps == 60
    assert summary["metrics"]["error"] < 0.1    # signSGD at lr 0.02 walks the output to 2.5


def test_their_flags_and_help_come_from_them(registered, capsys):
    with pytest.raises(SystemExit):
        main(["train", "const", "--help"])
    text = capsys.readouterr().out
    assert "--target" in text and "the value the model's output should reach" in text
    assert "sign_sgd" in text and "full_rank_toy" in text and "counting" in text


@dataclass(frozen=True)
class PickOptions:
    model: str = option("small", "which of this task's own models", choices=("small", "large"))


class PickTask(ConstTask):
    """A second task with a --model of its own: its own choices and help, not the lm task's."""

    name = "pick"
    Options = PickOptions

    def fitness(self, model, lo, hi, step=0):
        return -(model(torch.ones(hi - lo, 1)).view(-1) - 1.0) ** 2

    def evaluate(self, model):
        return {"error": float((model(torch.ones(1, 1)) - 1.0).abs())}


def test_two_tasks_may_give_one_flag_name_different_meanings(monkeypatch, capsys):
    monkeypatch.setitem(tasks.TASKS, "pick", PickTask)
    assert main(["train", "pick", "--model", "large", "--steps", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["steps"] == 1
    with pytest.raises(SystemExit):                                               # lm's model is not pick's
        main(["train", "pick", "--model", "egg", "--steps", "1"])
    assert "invalid choice: 'egg'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "lm", "--model", "large"])
    assert "invalid choice: 'large'" in capsys.readouterr().err


def test_a_mistyped_flag_gets_one_line_and_a_suggestion(capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "xor", "--stpes", "3"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "did you mean --steps?" in err and "usage:" not in err
    assert len(err.strip().splitlines()) == 1
    assert main(["train", "rl", "--eval-episodes", "0"]) == 2
    assert "error: --eval-episodes must be an integer >= 1, got 0" in capsys.readouterr().err


def test_a_rank_above_every_matrix_is_noted(capsys):
    """xor's matrices are 16x2 and 1x16: rank 8 can only cost time (issue 19's rough edges)."""
    assert main(["train", "xor", "--rank", "8", "--steps", "1", "--json"]) == 0
    assert "note: --rank 8 is above min(out, in) of every matrix this model perturbs (at most 2)" \
        in capsys.readouterr().err
    assert main(["train", "xor", "--rank", "2", "--steps", "1", "--json"]) == 0
    assert "--rank" not in capsys.readouterr().err
