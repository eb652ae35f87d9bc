"""Animate a trained policy: evaluation episodes replayed in gymnasium's own env, written as a GIF.

Why gymnasium's single env and not the batched one: only gymnasium draws frames
(``render_mode="rgb_array"``; classic control through pygame, MuJoCo through its GL
backend). Each replayed episode starts where the task's evaluation episode of the same
index starts: the batched envs (CartPole, Pendulum) have their start state copied into
gymnasium's env, any other id is reset with the same seed the sync vector env gets. So
the animation shows the episodes ``hyperscalees eval`` scores, and their returns are
reported next to the file as a check.

The GIF is written by imageio (its Pillow plugin), an optional extra like gymnasium
(``pip install 'hyperscalees[rl]'``). MuJoCo frames need an OpenGL backend: without a
display set ``MUJOCO_GL=egl`` (GPU) or ``MUJOCO_GL=osmesa`` (software) before rendering.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .envs import BUILDERS, gymnasium, make_env


@dataclass
class Rendered:
    path: Path
    frames: int          # frames drawn: one per state, the start included
    returns: list[float]  # return of each replayed episode
    fps: int


def check_gif_path(path) -> Path:
    """The output file, refused early (before any rollout) when it cannot be a GIF written there."""
    p = Path(path)
    if p.suffix.lower() != ".gif":
        raise ValueError(f"--render writes a GIF: give a path ending in .gif, got {str(path)!r}")
    if p.is_dir():
        raise ValueError(f"--render {str(path)!r} is a directory, not a file")
    if not p.parent.is_dir():
        raise ValueError(f"cannot write {str(path)!r}: directory {str(p.parent)!r} does not exist")
    return p


def _imageio():
    try:
        import imageio.v3 as iio
    except ImportError as e:
        raise RuntimeError("--render needs imageio (with Pillow): pip install 'hyperscalees[rl]'") from e
    return iio


def _make_render_env(env_id: str):
    gym = gymnasium()
    # pygame's init opens SDL's video driver, which without a desktop session prints "error:
    # XDG_RUNTIME_DIR is invalid..." on every render; frames drawn off-screen need no display.
    # A driver the user chose is kept.
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    try:
        env = gym.make(env_id, render_mode="rgb_array")
    except gym.error.DependencyNotInstalled as e:
        raise RuntimeError(f"cannot render {env_id}: {e} (classic control: pip install 'hyperscalees[rl]'; "
                           "MuJoCo: pip install 'hyperscalees[mujoco]')") from None
    _follow_the_body(env)
    return env


def _follow_the_body(env) -> None:
    """MuJoCo locomotion models have a camera named "track" that follows the body, but gymnasium
    1.4 renders them from a free camera that stays put, so a running HalfCheetah leaves the
    picture after about two seconds: render from the model's "track" camera where there is one."""
    renderer = getattr(env.unwrapped, "mujoco_renderer", None)
    if renderer is None:
        return
    import mujoco
    track = mujoco.mj_name2id(renderer.model, mujoco.mjtObj.mjOBJ_CAMERA, "track")
    if track != -1:
        renderer.camera_id = track


def _start(env, env_id: str, key: int, device) -> np.ndarray:
    """Reset ``env`` to the start of the evaluation episode with ``key``; returns the first observation."""
    obs, _ = env.reset(seed=int(key) & 0x7FFFFFFF)  # what the sync vector env does for other ids
    if env_id in BUILDERS:  # batched envs draw their own starts from the key: copy that state over
        batched = make_env(env_id, 1, device)
        first = batched.reset(torch.tensor([int(key)], dtype=torch.int64))
        state = batched.start_states()
        batched.close()
        u = env.unwrapped
        u.state = np.array(state[0], dtype=np.float64)
        obs = u._get_obs() if hasattr(u, "_get_obs") else first[0].cpu().numpy()
    return np.asarray(obs)


def _frame(env) -> np.ndarray:
    try:
        return np.asarray(env.render())
    except Exception as e:  # GL and pygame failures come in many types; all mean "cannot draw here"
        raise RuntimeError(f"rendering failed ({type(e).__name__}: {e}); MuJoCo envs need MUJOCO_GL=egl or "
                           "MUJOCO_GL=osmesa on a machine without a display") from None


@torch.no_grad()
def render_episodes(model: nn.Module, env_id: str, keys: torch.Tensor, max_steps: int, path, device="cpu",
                    every: int = 1) -> Rendered:
    """Replay one episode per key with ``model`` acting, every ``every``-th frame into the GIF ``path``."""
    path = check_gif_path(path)
    if every < 1:
        raise ValueError(f"frame stride must be >= 1, got {every}")
    iio = _imageio()
    env = _make_render_env(env_id)
    fps = int(env.metadata.get("render_fps") or 30)
    frames, returns, drawn = [], [], 0

    def draw():
        nonlocal drawn
        if drawn % every == 0:
            frames.append(_frame(env))
        drawn += 1

    try:
        for key in keys.tolist():
            obs, total = _start(env, env_id, key, device), 0.0
            draw()
            for _ in range(max_steps):
                action = model(torch.as_tensor(obs, dtype=torch.float32, device=device).unsqueeze(0))[0].cpu().numpy()
                obs, reward, terminated, truncated, _ = env.step(action.item() if action.ndim == 0 else action)
                total += float(reward)
                draw()
                if terminated or truncated:
                    break
            returns.append(total)
    finally:
        env.close()
    duration_ms = 1000 * every / max(fps, 1)
    iio.imwrite(path, np.stack(frames), extension=".gif", duration=duration_ms, loop=0)
    return Rendered(path, len(frames), returns, max(1, round(fps / every)))
