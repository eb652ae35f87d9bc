"""Reinforcement learning: population-vectorised rollouts on gymnasium environments (optional extra ``rl``)."""
from .task import RLOptions, RLTask

__all__ = ["RLOptions", "RLTask"]
