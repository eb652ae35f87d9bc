"""Pendulum-v1 as batched torch ops: one episode per population member, all stepped together.

gymnasium ships Pendulum-v1 only as a single NumPy env (plus a JAX one), and ES needs
thousands of episodes advancing in lockstep, on the GPU when there is one. This module
reproduces gymnasium's dynamics and reward operation for operation. In float64 on a CPU its
states equal ``gymnasium.make("Pendulum-v1")``'s bit for bit over a whole 200-step episode, and
its rewards within 1e-14 (NumPy's scalar ``x**2`` is libm's ``pow``, sometimes an ulp from
torch's x·x; tests/tasks/rl/test_pendulum.py). float32, the default, tracks gymnasium within
2e-3 for about 50 steps; after that the chaotic dynamics amplify float32 rounding (up to 0.13
by step 100): the same task, not the same trajectories.

Dimensions: N environments (``num_envs``). State is θ (N,) and θ̇ (N,); θ = 0 is upright
and positive is counter-clockwise. θ is kept unwrapped, as gymnasium keeps it, so a state
copied out of ``env.unwrapped.state`` means the same thing here.

No autoreset: once an env reports ``truncated`` the caller stops stepping it (all envs
start together and truncate on the same step). Stepping further keeps integrating and
keeps reporting ``truncated``.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

DT = 0.05          # s per step
MAX_SPEED = 8.0    # rad/s; θ̇ is clipped to ±MAX_SPEED after every step
MAX_TORQUE = 2.0   # N m; actions are clipped to ±MAX_TORQUE


def angle_normalize(theta: Tensor) -> Tensor:
    """θ wrapped into [-π, π): the reward must not depend on how many turns were made."""
    return torch.remainder(theta + math.pi, 2 * math.pi) - math.pi


def observe(theta: Tensor, theta_dot: Tensor) -> Tensor:
    """(N, 3) observations [cos θ, sin θ, θ̇]; cos/sin keep the policy's input continuous across ±π."""
    return torch.stack((torch.cos(theta), torch.sin(theta), theta_dot), dim=-1)


def pendulum_step(theta: Tensor, theta_dot: Tensor, torque: Tensor, g: float) -> tuple[Tensor, Tensor, Tensor]:
    """One DT step of a uniform rod (m = l = 1) pivoted at one end; returns (θ', θ̇', reward).

    Torque balance about the pivot: I θ̈ = m g (l/2) sin θ + u with I = m l²/3, so
    θ̈ = 3g/(2l) sin θ + 3u/(m l²). Gravity appears with +sin θ because θ is measured from
    upright, where the rod falls away. Integration is semi-implicit Euler (θ uses the new,
    clipped θ̇), as in gymnasium. The reward scores the state *before* the step and the
    (already clipped) torque: -(wrap(θ)² + 0.1 θ̇² + 0.001 u²), at most 0 when upright and still.
    """
    cost = angle_normalize(theta) ** 2 + 0.1 * theta_dot ** 2 + 0.001 * torque ** 2
    theta_ddot = 3 * g / 2 * torch.sin(theta) + 3.0 * torque
    new_theta_dot = torch.clamp(theta_dot + theta_ddot * DT, -MAX_SPEED, MAX_SPEED)
    new_theta = theta + new_theta_dot * DT
    return new_theta, new_theta_dot, -cost


class TorchPendulum:
    """N Pendulum-v1 episodes as tensors on ``device``; ``step`` has no Python loop and no host sync.

    Call :meth:`reset` or :meth:`reset_to` first. ``truncated`` turns True for every env
    on its ``max_episode_steps``-th step (gymnasium's TimeLimit); ``terminated`` is always
    False. There is no autoreset: stop stepping after truncation.
    """

    obs_dim = 3
    action_dim = 1
    action_low = -MAX_TORQUE
    action_high = MAX_TORQUE
    discrete = False

    def __init__(self, num_envs: int, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                 max_episode_steps: int = 200, g: float = 10.0):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
        self.num_envs = int(num_envs)
        self.device = torch.device(device)
        self.dtype = dtype
        self.max_episode_steps = int(max_episode_steps)
        self.g = float(g)
        self.theta: Tensor | None = None       # (N,)
        self.theta_dot: Tensor | None = None   # (N,)
        self.steps: Tensor | None = None       # (N,) int64, steps taken since the last reset

    def reset_to(self, theta: Tensor, theta_dot: Tensor) -> Tensor:
        """Set every env's state exactly (e.g. copied from gymnasium) and zero its step count; returns (N, 3)."""
        n = (self.num_envs,)
        for name, value in (("theta", theta), ("theta_dot", theta_dot)):
            if tuple(value.shape) != n:
                raise ValueError(f"{name} must have shape {n}, got {tuple(value.shape)}")
        self.theta = theta.to(device=self.device, dtype=self.dtype).clone()
        self.theta_dot = theta_dot.to(device=self.device, dtype=self.dtype).clone()
        self.steps = torch.zeros(n, dtype=torch.int64, device=self.device)
        return observe(self.theta, self.theta_dot)

    def reset(self, generator: torch.Generator) -> Tensor:
        """Draw θ ~ U(-π, π), θ̇ ~ U(-1, 1) (gymnasium's start distribution) from a CPU generator; returns (N, 3).

        Drawing on the CPU in float64 makes the start states depend on the generator's
        seed alone, not on the device or dtype, so CPU and GPU runs begin identically.
        """
        u = torch.rand(2, self.num_envs, generator=generator, dtype=torch.float64)   # (2, N) in [0, 1)
        theta = (2 * u[0] - 1) * math.pi
        theta_dot = 2 * u[1] - 1
        return self.reset_to(theta, theta_dot)

    def step(self, action: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Apply torques (N, 1) or (N,), clipped to ±2; returns obs (N, 3), reward (N,), terminated, truncated (N,)."""
        if self.theta is None:
            raise RuntimeError("call reset() or reset_to() before step()")
        if tuple(action.shape) not in ((self.num_envs, 1), (self.num_envs,)):
            raise ValueError(f"action must have shape ({self.num_envs}, 1) or ({self.num_envs},), "
                             f"got {tuple(action.shape)}")
        torque = action.to(device=self.device, dtype=self.dtype).reshape(self.num_envs)   # (N,)
        torque = torch.clamp(torque, -MAX_TORQUE, MAX_TORQUE)
        self.theta, self.theta_dot, reward = pendulum_step(self.theta, self.theta_dot, torque, self.g)
        self.steps = self.steps + 1
        truncated = self.steps >= self.max_episode_steps
        terminated = torch.zeros_like(truncated)
        return observe(self.theta, self.theta_dot), reward, terminated, truncated
