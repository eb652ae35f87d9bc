"""Many copies of one environment stepped together with torch tensors: one env per (member, episode).

Each env starts from an initial state fixed by a 32-bit *episode key* (the task derives keys
from (run seed, step, episode index) alone): any chunking of the population, any backend and
a resumed run meet the same starts.

Which implementation serves an env id is decided in one place, :data:`BUILDERS`:
- ``CartPole-v1``: gymnasium's NumPy-vectorised ``CartPoleVectorEnv`` (``make_vec(...,
  "vector_entry_point")``); its start states, U(−0.05, 0.05)⁴ as in gymnasium, are set from the keys;
- ``Pendulum-v1``: batched torch dynamics (``pendulum.py``), equal to gymnasium's step for step;
- anything else: gymnasium's synchronous vector env of ``gymnasium.make(env_id)`` copies,
  each reset with its key as seed (MuJoCo included, with ``gymnasium[mujoco]``).
gymnasium is an optional extra (``pip install 'hyperscalees[rl]'``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ...models.action_head import ActionSpec
from ...noise.distributions import to_unit_uniform
from ...noise.keys import element_bits


@dataclass(frozen=True)
class Spaces:
    obs_dim: int
    action: ActionSpec    # what the policy outputs and how that becomes an action (models/action_head.py)
    max_steps: int = 1000


def gymnasium():
    try:
        import gymnasium as gym
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise RuntimeError("RL tasks need gymnasium: pip install 'hyperscalees[rl]'") from e
    return gym


def start_uniforms(keys: Tensor, count: int) -> Tensor:
    """(n, count) uniforms in (0, 1), a pure function of each env's episode key."""
    idx = torch.arange(count, dtype=torch.int32)
    return to_unit_uniform(element_bits(keys.to(torch.int32).view(-1, 1), idx)).double()


class GymVectorEnv:
    """A gymnasium vector env behind torch tensors: ``reset(keys)``, ``step(actions)``."""

    def __init__(self, env_id: str, num_envs: int, device, mode: str):
        gym = gymnasium()
        self.env_id, self.num_envs, self.device, self.mode = env_id, num_envs, torch.device(device), mode
        try:
            self.env = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=mode)
        except gym.error.Error as e:
            raise ValueError(f"cannot make environment {env_id!r}: {e}") from None
        self.spaces = spaces_of(self.env, env_id)

    def reset(self, keys: Tensor) -> Tensor:
        if self.mode == "vector_entry_point":  # CartPoleVectorEnv: one RNG for all envs, so set the starts
            self.env.reset(seed=0)
            self.env.unwrapped.state = (start_uniforms(keys, 4).numpy().T * 0.1 - 0.05)
            obs = self.env.unwrapped.state.T.astype(np.float32)
        else:
            obs, _ = self.env.reset(seed=[int(k) & 0x7FFFFFFF for k in keys.tolist()])
        return torch.as_tensor(np.asarray(obs), dtype=torch.float32, device=self.device)

    def start_states(self) -> np.ndarray:
        """(n, 4) float64 states the last reset set (CartPoleVectorEnv only: what a single env is given)."""
        if self.mode != "vector_entry_point":
            raise NotImplementedError(f"{self.env_id}: a sync vector env is reset by seed, not by state")
        return np.asarray(self.env.unwrapped.state, dtype=np.float64).T.copy()

    def step(self, actions: Tensor):
        a = actions.detach().cpu().numpy()
        obs, reward, terminated, truncated, _ = self.env.step(a)
        as_t = lambda v, dt: torch.as_tensor(np.asarray(v), dtype=dt, device=self.device)
        return (as_t(obs, torch.float32), as_t(reward, torch.float32), as_t(terminated, torch.bool),
                as_t(truncated, torch.bool))

    def close(self) -> None:
        self.env.close()


class TorchPendulumEnv:
    """The batched torch Pendulum with key-driven starts: θ ~ U(−π, π), θ̇ ~ U(−1, 1) as in gymnasium."""

    def __init__(self, env_id: str, num_envs: int, device):
        from .pendulum import TorchPendulum
        self.env = TorchPendulum(num_envs, device=device)
        self.num_envs = num_envs
        self.spaces = Spaces(3, ActionSpec.box([-2.0], [2.0]), self.env.max_episode_steps)

    def reset(self, keys: Tensor) -> Tensor:
        u = start_uniforms(keys, 2).to(self.env.device)
        return self.env.reset_to((u[:, 0] * 2 - 1) * math.pi, u[:, 1] * 2 - 1)

    def start_states(self) -> np.ndarray:
        """(n, 2) float64 [θ, θ̇] of the last reset: what gymnasium's ``unwrapped.state`` holds."""
        return torch.stack((self.env.theta, self.env.theta_dot), -1).double().cpu().numpy()

    def step(self, actions: Tensor):
        return self.env.step(actions)

    def close(self) -> None:
        pass


def spaces_of(env, env_id: str) -> Spaces:
    """Observation/action sizes and bounds of a gymnasium vector env; refuses what a policy cannot drive."""
    obs, act = env.single_observation_space, env.single_action_space
    if obs.shape is None or len(obs.shape) != 1:
        raise ValueError(f"{env_id}: only flat (Box) observations are supported, got {obs}")
    limit = env.spec.max_episode_steps if env.spec is not None and env.spec.max_episode_steps else 1000
    return Spaces(obs.shape[0], action_spec(act, env_id), limit)


def action_spec(act, env_id: str) -> ActionSpec:
    """The :class:`ActionSpec` of a gymnasium action space, by its class (never by duck typing:
    MultiBinary has an ``n`` too); anything else is refused by name."""
    gym = gymnasium()
    spaces = gym.spaces
    kind = type(act).__name__
    if isinstance(act, spaces.Discrete):
        return ActionSpec("discrete", int(act.n), start=(int(act.start),))
    flat = act.shape is not None and len(act.shape) == 1
    if isinstance(act, spaces.MultiBinary) and flat:
        return ActionSpec("multi_binary", int(act.shape[0]))
    if isinstance(act, spaces.MultiDiscrete) and flat:
        nvec = tuple(int(v) for v in act.nvec)
        return ActionSpec("multi_discrete", len(nvec), nvec=nvec, start=tuple(int(v) for v in act.start))
    if isinstance(act, spaces.Box) and flat:
        if not np.issubdtype(act.dtype, np.floating):
            raise ValueError(f"{env_id}: Box actions of dtype {act.dtype} are not supported (only float Boxes)")
        return ActionSpec.box(act.low, act.high)
    raise ValueError(f"{env_id}: {kind} actions are not supported (only Discrete, flat MultiBinary, "
                     f"MultiDiscrete or float Box), got {act}")


BUILDERS = {
    "CartPole-v1": lambda env_id, n, device: GymVectorEnv(env_id, n, device, "vector_entry_point"),
    "Pendulum-v1": TorchPendulumEnv,
}


def make_env(env_id: str, num_envs: int, device="cpu"):
    """``num_envs`` copies of ``env_id``, by the builder :data:`BUILDERS` names (gymnasium's sync env otherwise)."""
    build = BUILDERS.get(env_id, lambda e, n, d: GymVectorEnv(e, n, d, "sync"))
    return build(env_id, num_envs, device)


def check_env_id(env_id: str) -> str:
    """Refuse an unknown id early, naming it (gymnasium's registry is the reference).

    ``module:Env-v0`` (gymnasium's syntax for custom environments) imports ``module`` first, so
    the environments it registers can be used from the command line, as ``gym.make`` allows.
    """
    gym = gymnasium()
    module, _, name = env_id.rpartition(":")
    if module:
        import importlib
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise ValueError(f"environment {env_id!r}: cannot import module {module!r} ({e})") from None
    if name not in gym.registry:
        close = [k for k in gym.registry if name.lower().split("-")[0] in k.lower()][:5]
        where = f" (module {module!r} did not register it)" if module else ""
        raise ValueError(f"unknown environment {name!r}{where}" + (f"; did you mean one of {close}?" if close else ""))
    return env_id
