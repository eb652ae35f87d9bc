"""The multilayer perceptron every task and benchmark builds."""
from __future__ import annotations

from torch import nn

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU}


def mlp(sizes: list[int], activation: str = "tanh") -> nn.Sequential:
    """Linear layers of ``sizes`` with ``activation`` between them (not after the last)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}")
    if len(sizes) < 2 or any(not isinstance(s, int) or s < 1 for s in sizes):
        raise ValueError(f"mlp sizes must be at least two positive integers, got {list(sizes)!r}")
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(ACTIVATIONS[activation]())
    return nn.Sequential(*layers)
