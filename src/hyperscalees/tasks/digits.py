"""Classify scikit-learn's bundled 8x8 digits (no download): ES on a real, if small, dataset.

Dimensions: P members, B minibatch examples per member, 64 pixel features, 10 classes.
The train/held-out split is fixed (it does not depend on the run seed), so accuracies of
different seeds are comparable. Each step draws one minibatch from (seed, step) and every
member scores it, so antithetic twins see identical examples.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..models import mlp
from ..models.mlp import ACTIVATIONS
from .base import ACTIVATION_HELP, AbstractTask, check_options, member_major, option

_SPLIT_SEED = 1234  # fixed: the held-out set is the same for every run


@dataclass(frozen=True)
class DigitsOptions:
    hidden: int = option(64, "width of the hidden layer")
    batch: int = option(128, "examples every member scores per step")
    holdout: float = option(0.2, "fraction of the data held out, in (0, 1)")
    activation: str = option("tanh", ACTIVATION_HELP, choices=tuple(ACTIVATIONS))

    def __post_init__(self):
        check_options(self, positive=("hidden", "batch"), activation=self.activation)
        if not 0 < self.holdout < 1:
            raise ValueError(f"holdout must be in (0, 1), got {self.holdout!r}")


def load_digits_tensors() -> tuple[Tensor, Tensor]:
    """(1797, 64) pixels scaled to [0, 1] and (1797,) labels, from scikit-learn's bundled copy."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise RuntimeError("the digits task needs scikit-learn: pip install 'hyperscalees[tasks]'") from e
    d = load_digits()
    x = torch.tensor(d.data, dtype=torch.float32) / 16.0
    return x, torch.tensor(d.target, dtype=torch.long)


class DigitsTask(AbstractTask):
    """MLP 64→H→10; fitness is -cross-entropy on a per-step minibatch; reports held-out accuracy."""

    name = "digits"
    metric = "accuracy"
    goal = "max"
    target = 0.90
    defaults = {"population": 2048, "sigma": 0.03, "rank": 2, "lr": 0.03, "optimizer": "adam", "steps": 1000}
    Options = DigitsOptions
    width_option = "hidden"

    def __init__(self, seed=0, device=None, options=None):
        super().__init__(seed, device, options)
        x, y = load_digits_tensors()
        perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(_SPLIT_SEED))
        n_eval = int(round(len(y) * self.options.holdout))
        ev, tr = perm[:n_eval], perm[n_eval:]
        self.x_train, self.y_train = x[tr].to(self.device), y[tr].to(self.device)
        self.x_eval, self.y_eval = x[ev].to(self.device), y[ev].to(self.device)
        self._cached: tuple[int, Tensor, Tensor] | None = None

    def batch(self, step: int) -> tuple[Tensor, Tensor]:
        """Minibatch (B, 64), (B,) of ``step``: a function of (seed, step) only, cached across chunks."""
        if self._cached is None or self._cached[0] != step:
            n = len(self.y_train)
            b = min(self.options.batch, n)
            idx = torch.randperm(n, generator=self.generator(step))[:b].to(self.device)
            self._cached = (step, self.x_train[idx], self.y_train[idx])
        return self._cached[1], self._cached[2]

    def make_model(self) -> nn.Module:
        return mlp([64, self.options.hidden, 10], self.options.activation)

    def fitness(self, model: nn.Module, lo: int, hi: int, step: int = 0) -> Tensor:
        p = hi - lo
        x, y = self.batch(step)
        logits = model(member_major(x, p))  # (P*B, 10)
        ce = F.cross_entropy(logits, member_major(y, p), reduction="none")  # (P*B,)
        return -ce.view(p, -1).mean(dim=1)

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        logits = model(self.x_eval)
        return {"accuracy": float((logits.argmax(dim=1) == self.y_eval).float().mean()),
                "loss": float(F.cross_entropy(logits, self.y_eval)),
                "train_accuracy": float((model(self.x_train).argmax(dim=1) == self.y_train).float().mean())}

    def metric_names(self):
        return ("accuracy", "loss", "train_accuracy")
