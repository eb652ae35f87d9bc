"""Deterministic control policies: observation normalisation, an MLP trunk, an action head.

ES perturbs the weights, not the actions, so a policy is deterministic: its actor's outputs
become actions by a fixed rule per kind of action space (``action_head.py``: argmax of logits
for discrete actions, ``tanh`` scaled to each dimension's bounds for a bounded Box, ...).
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

from .action_head import ActionHead, ActionSpec
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
    """obs (B, obs_dim) -> actions of ``action``'s space (``ActionHead``).

    ``action`` may be given as an int: that many discrete choices (``Discrete(action)``).
    """

    def __init__(self, obs_dim: int, action: ActionSpec | int, hidden: int = 32, layers: int = 2,
                 activation: str = "tanh"):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}")
        if isinstance(action, int):
            action = ActionSpec("discrete", action)
        self.norm = ObsNorm(obs_dim)
        self.trunk = nn.Sequential(mlp([obs_dim] + [hidden] * layers, activation), ACTIVATIONS[activation]())
        self.actor = nn.Linear(hidden, action.outputs)
        self.critic = nn.Linear(hidden, 1).requires_grad_(False)
        self.head = ActionHead(action)

    def forward(self, obs: Tensor) -> Tensor:
        return self.head(self.actor(self.trunk(self.norm(obs))))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # Models saved before per-dimension bounds held two scalar buffers "low"/"high" (one range
        # for every dimension, which was the bug): the bounds are the environment's, so take ours.
        legacy = [prefix + k for k in ("low", "high")]
        if any(k in state_dict for k in legacy):
            for k in legacy:
                state_dict.pop(k, None)
            for name, buf in self.head.named_buffers():
                state_dict.setdefault(f"{prefix}head.{name}", buf.clone())
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
