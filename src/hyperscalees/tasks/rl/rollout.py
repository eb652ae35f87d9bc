"""Run one episode in every env at once: the policy acts for all of them in one forward per env step.

Inside ``es.perturbed((lo, hi))`` that forward is the whole population slice, member-major:
env j belongs to member ``lo + j // E`` (E episodes per member). An env whose episode has
ended keeps being stepped (vector envs step together) but adds nothing. An observation or
reward that is NaN/inf marks that episode broken: its return becomes NaN, which the
strategy counts and treats as the worst score, so a broken env never reaches the weights.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Episodes:
    returns: Tensor   # (n,) float32; NaN where the episode broke
    lengths: Tensor   # (n,) int64 env steps each episode ran
    broken: Tensor    # (n,) bool

    @property
    def env_steps(self) -> int:
        return int(self.lengths.sum())


def rollout(policy, env, keys: Tensor, max_steps: int, stats=None) -> Episodes:
    """One episode per env from the starts ``keys`` (n,), at most ``max_steps`` env steps each.

    ``stats`` (a RunningStats) receives every observation the policy acts on.
    """
    obs = env.reset(keys)
    n = obs.shape[0]
    alive = torch.ones(n, dtype=torch.bool, device=obs.device)
    broken = torch.zeros_like(alive)
    total = torch.zeros(n, dtype=torch.float64, device=obs.device)
    lengths = torch.zeros(n, dtype=torch.int64, device=obs.device)
    for _ in range(max_steps):
        finite = torch.isfinite(obs).all(dim=-1)
        broken |= alive & ~finite
        obs = torch.where(finite.unsqueeze(-1), obs, torch.zeros_like(obs))
        if stats is not None:
            stats.observe(obs, alive & finite)
        with torch.no_grad():
            actions = policy(obs)
        obs, reward, terminated, truncated = env.step(actions)
        ok = torch.isfinite(reward)
        broken |= alive & ~ok
        total += torch.where(alive & ok, reward.double(), torch.zeros_like(total))
        lengths += alive.long()
        alive &= ~(terminated | truncated)
        if not bool(alive.any()):  # the env lives on the host: this read costs nothing extra
            break
    returns = torch.where(broken, torch.full_like(total, float("nan")), total).float()
    return Episodes(returns, lengths, broken)
