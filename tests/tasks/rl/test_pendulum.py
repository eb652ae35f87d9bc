"""TorchPendulum follows gymnasium's Pendulum-v1 step for step; reset is reproducible; bad input is refused."""
import math

import numpy as np
import pytest
import torch

from hyperscalees.tasks.rl.pendulum import TorchPendulum

N = 16     # envs, one gymnasium env per seed 0..N-1
T = 200    # steps: Pendulum-v1's TimeLimit
# float32 against gymnasium (float64 physics), worst |obs| or |reward| error over the first 50 steps.
# Measured over 30 x 16 random episodes: median 8e-5, worst 5.7e-4 (10 steps: 6e-6, 25: 9e-6;
# later the chaotic dynamics amplify float32 rounding: 100 steps up to 0.13, 200 up to 4).
F32_STEPS, F32_TOL = 50, 2e-3


@pytest.fixture(scope="module")
def reference():
    """Start states, actions (some outside [-2, 2]) and what N gymnasium envs did with them."""
    gym = pytest.importorskip("gymnasium")
    envs = [gym.make("Pendulum-v1") for _ in range(N)]
    for seed, env in enumerate(envs):
        env.reset(seed=seed)
    start = np.stack([env.unwrapped.state for env in envs])                        # (N, 2)
    actions = np.random.default_rng(0).uniform(-3.0, 3.0, size=(T, N, 1))          # (T, N, 1)
    states, obs, rewards, truncated = [], [], [], []
    for t in range(T):
        out = [env.step(actions[t, i]) for i, env in enumerate(envs)]
        states.append(np.stack([env.unwrapped.state for env in envs]))             # (N, 2)
        obs.append(np.stack([o[0] for o in out]))                                  # (N, 3) float32
        rewards.append([o[1] for o in out])
        truncated.append([o[3] for o in out])          # from the TimeLimit wrapper
    return {"start": torch.from_numpy(start), "actions": torch.from_numpy(actions),
            "states": torch.from_numpy(np.stack(states)), "obs": torch.from_numpy(np.stack(obs)),
            "rewards": torch.tensor(rewards, dtype=torch.float64), "truncated": torch.tensor(truncated)}


def rollout(env: TorchPendulum, ref: dict, steps: int, action_shape: tuple) -> tuple:
    """Our obs (steps, N, 3), rewards (steps, N) and truncation flags (steps, N) from gymnasium's starts."""
    env.reset_to(ref["start"][:, 0], ref["start"][:, 1])
    obs, rewards, truncated = [], [], []
    for t in range(steps):
        o, r, terminated, tr = env.step(ref["actions"][t].reshape(action_shape))
        assert not terminated.any()
        obs.append(o)
        rewards.append(r)
        truncated.append(tr)
    return torch.stack(obs).double(), torch.stack(rewards).double(), torch.stack(truncated)


def physics_obs(states: torch.Tensor) -> torch.Tensor:
    """[cos θ, sin θ, θ̇] of gymnasium's float64 state: its returned obs is rounded to float32."""
    return torch.stack((states[..., 0].cos(), states[..., 0].sin(), states[..., 1]), dim=-1)


def test_float64_matches_gymnasium_step_for_step(reference):
    assert (reference["actions"].abs() > 2).float().mean() > 0.2, "the clipping path must be exercised"
    env = TorchPendulum(N, dtype=torch.float64)
    env.reset_to(reference["start"][:, 0], reference["start"][:, 1])
    states = []
    for t in range(T):                                       # the states: bit for bit, all 200 steps
        env.step(reference["actions"][t])
        states.append(torch.stack((env.theta, env.theta_dot), dim=-1))
    assert torch.equal(torch.stack(states), reference["states"])
    obs, rewards, truncated = rollout(TorchPendulum(N, dtype=torch.float64), reference, T, (N, 1))
    assert torch.equal(obs, physics_obs(reference["states"]))
    # rewards: NumPy's scalar x**2 (libm pow) is sometimes an ulp from torch's x·x
    torch.testing.assert_close(rewards, reference["rewards"], rtol=0, atol=1e-14)
    # gymnasium's own float32 obs: ours rounded to float32 agrees within one float32 ulp (|θ̇| <= 8)
    torch.testing.assert_close(obs.float(), reference["obs"], rtol=0, atol=1e-6)
    assert torch.equal(truncated, reference["truncated"])
    assert not truncated[:-1].any() and truncated[-1].all()   # the comparison above is not vacuous


def test_float32_tracks_gymnasium_within_stated_tolerance(reference):
    obs, rewards, _ = rollout(TorchPendulum(N, dtype=torch.float32), reference, F32_STEPS, (N,))
    torch.testing.assert_close(obs, physics_obs(reference["states"][:F32_STEPS]), rtol=0, atol=F32_TOL)
    torch.testing.assert_close(rewards, reference["rewards"][:F32_STEPS], rtol=0, atol=F32_TOL)


def test_truncation_follows_max_episode_steps():
    env = TorchPendulum(3, max_episode_steps=5)
    env.reset(torch.Generator().manual_seed(0))
    flags = torch.stack([env.step(torch.zeros(3))[3] for _ in range(5)])       # (5, 3)
    assert not flags[:4].any() and flags[4].all()
    env.reset(torch.Generator().manual_seed(0))                                # reset zeroes the counters
    assert not env.step(torch.zeros(3))[3].any()


def test_reset_is_reproducible_and_in_range():
    env = TorchPendulum(4096)
    a = env.reset(torch.Generator().manual_seed(7))
    theta, theta_dot = env.theta.clone(), env.theta_dot.clone()
    b = env.reset(torch.Generator().manual_seed(7))
    c = env.reset(torch.Generator().manual_seed(8))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.shape == (4096, 3) and a.dtype == torch.float32
    assert theta.min() >= -math.pi and theta.max() <= math.pi and theta.abs().max() > 3.0
    assert theta_dot.abs().max() <= 1.0 and theta_dot.abs().max() > 0.99
    torch.testing.assert_close(a[:, :2].norm(dim=1), torch.ones(4096))
    # the start states depend on the seed only, not on the env's dtype
    env64 = TorchPendulum(4096, dtype=torch.float64)
    env64.reset(torch.Generator().manual_seed(7))
    torch.testing.assert_close(env64.theta.float(), theta, rtol=0, atol=0)


def test_step_never_reads_values_back_to_the_host():
    """On the meta device tensors have no data, so any .item()/bool() sync would raise."""
    env = TorchPendulum(8, device="meta")
    env.reset_to(torch.zeros(8), torch.zeros(8))
    obs, reward, terminated, truncated = env.step(torch.zeros(8, 1))
    assert obs.shape == (8, 3) and reward.shape == terminated.shape == truncated.shape == (8,)


def test_bad_input_is_refused():
    env = TorchPendulum(16)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(torch.zeros(16, 1))
    env.reset(torch.Generator().manual_seed(0))
    for shape in [(16, 2), (8, 1), (1, 16), (16, 1, 1), ()]:
        with pytest.raises(ValueError, match=r"\(16, 1\) or \(16,\)"):
            env.step(torch.zeros(shape))
    with pytest.raises(ValueError, match=r"theta must have shape \(16,\)"):
        env.reset_to(torch.zeros(15), torch.zeros(16))
    with pytest.raises(ValueError, match="num_envs"):
        TorchPendulum(0)
