"""Deterministic control policies: observation normalisation, an MLP trunk, an action head.

ES perturbs the weights, not the actions, so a policy is deterministic: the argmax of its
logits for discrete actions, ``tanh`` scaled to the action bounds for continuous ones.
The observation statistics are buffers, not parameters: ES never perturbs them, they are
saved with the model (a reloaded policy acts exactly as it did), and the task that
gathers them replaces them between steps (tasks/rl/normalize.py).

Shaped like an actor-critic (trunk, actor head, value head) so a policy can be
warm-started from or exported to a PPO-style network; ES trains the actor and leaves
the value head out of the population (its parameters have ``requires_grad=False``, which
hyperscalees reads as frozen).
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from .mlp import ACTIVATIONS, mlp


class ObsNorm(nn.Module):
    """(x − mean) / std, clipped to ±clip: mean and std are buffers set from running statistics."""

    def __init__(self, dim: int, clip: float = 5.0):
        super().__init__()
        self.clip = clip
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("std", torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return ((x - self.mean) / self.std).clamp(-self.clip, self.clip)


class Policy(nn.Module):
    """obs (B, obs_dim) -> actions (B,) int64 for ``discrete`` spaces, (B, act_dim) in [low, high] otherwise."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: int = 32, layers: int = 2, activation: str = "tanh",
                 discrete: bool = True, low: float = -1.0, high: float = 1.0):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}")
        self.discrete = discrete
        self.norm = ObsNorm(obs_dim)
        self.trunk = nn.Sequential(mlp([obs_dim] + [hidden] * layers, activation), ACTIVATIONS[activation]())
        self.actor = nn.Linear(hidden, act_dim)
        self.critic = nn.Linear(hidden, 1).requires_grad_(False)
        self.register_buffer("low", torch.tensor(float(low)))
        self.register_buffer("high", torch.tensor(float(high)))

    def forward(self, obs: Tensor) -> Tensor:
        out = self.actor(self.trunk(self.norm(obs)))
        if self.discrete:
            return out.argmax(dim=-1)
        return self.low + (torch.tanh(out) + 1) * (self.high - self.low) / 2
