"""The recurrent states the lm task carries from window to window, one per (member, stream) row:
sliced for a chunk of members, joined back in member order, detached from the graph."""
from __future__ import annotations

import torch
from torch import Tensor


def slice_state(state, lo: int, hi: int):
    if state is None:
        return None
    if isinstance(state, Tensor):
        return state[lo:hi]
    return tuple(s[lo:hi] for s in state)


def cat_states(parts: list):
    if any(p is None for p in parts):
        return None
    if isinstance(parts[0], Tensor):
        return torch.cat(parts)
    return tuple(torch.cat(c) for c in zip(*parts))


def detach(state):
    if state is None:
        return None
    if isinstance(state, Tensor):
        return state.detach()
    return tuple(s.detach() for s in state)
