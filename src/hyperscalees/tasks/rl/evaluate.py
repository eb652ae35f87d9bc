"""The one evaluator of a policy: whoever trained it (ES, OpenES, PPO in ``bench rl``), it is scored alike.

``episodes`` episodes in the project's batched env (``make_env``: the same construction as
training), started from ``evaluation_keys(seed, episodes)`` -- a fixed set per run seed, never
a training step's -- each run to ``max_steps`` or its end, one batched action per env step.
``act`` maps observations (n, obs_dim) to actions as a :class:`~hyperscalees.models.Policy`
does: (n,) int64 for discrete spaces, (n, act_dim) floats otherwise. It must be deterministic
(ES policies are; for PPO, its mean action).
"""
from __future__ import annotations

import math
import time
from typing import Callable

import torch
from torch import Tensor

from ...noise.keys import fold_in, pair_keys
from .rollout import rollout

EVAL_STREAM = 0xE7A1  # evaluation starts: one fixed set per run, never a training step's


def evaluation_keys(seed: int, episodes: int) -> Tensor:
    """(episodes,) start keys of the evaluation episodes of run ``seed``."""
    return pair_keys(fold_in(seed, EVAL_STREAM), torch.arange(episodes))


@torch.no_grad()
def evaluate_policy(act: Callable[[Tensor], Tensor], env, keys: Tensor, max_steps: int) -> dict[str, float]:
    """Mean/std return over one episode per key in ``env`` (built for ``keys.numel()`` envs) and the
    seconds it took; broken episodes (NaN/inf) are counted and left out of the mean."""
    t0 = time.perf_counter()
    ep = rollout(act, env, keys, max_steps)
    r = ep.returns
    ok = r[torch.isfinite(r)]
    return {"eval_return": float(ok.mean()) if ok.numel() else math.nan,
            "eval_return_std": float(ok.std()) if ok.numel() > 1 else 0.0,
            "eval_broken": int(ep.broken.sum()), "seconds": time.perf_counter() - t0}


__all__ = ["EVAL_STREAM", "evaluate_policy", "evaluation_keys"]
