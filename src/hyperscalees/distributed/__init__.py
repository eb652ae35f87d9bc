"""Backends: turning a population into fitness, in-process (``local``) or across workers."""
from .base import AbstractBackend
from .graph import GraphedStep
from .local import LocalBackend, evaluate

BACKENDS = {"local": LocalBackend}

__all__ = ["AbstractBackend", "BACKENDS", "GraphedStep", "LocalBackend", "evaluate"]
