"""The in-process backend: the recipe's population evaluated chunk by chunk in this process."""
from __future__ import annotations

from torch import Tensor

from ..nn.evaluate import evaluate
from .base import AbstractBackend


class LocalBackend(AbstractBackend):
    """Chunks run one after another in this process (the default). A fitness that keeps state
    simply keeps it: there is nothing to merge."""

    name = "local"

    def evaluate(self) -> Tensor:
        return evaluate(self.es, self.fitness, self.chunk)
