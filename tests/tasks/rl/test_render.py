"""`hyperscalees eval --render`: the GIF holds every frame of the evaluation episode it replays, the replay is
that episode (same start, same return), and bad paths or missing packages fail with a clear message."""
import json
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("gymnasium")
pytest.importorskip("pygame")
pytest.importorskip("imageio")
Image = pytest.importorskip("PIL.Image")

from hyperscalees.engine import make_config, run  # noqa: E402
from hyperscalees.distributed import LocalBackend  # noqa: E402
from hyperscalees.tasks.rl import RLTask  # noqa: E402
from hyperscalees.tasks.rl.render import render_episodes  # noqa: E402
from hyperscalees.tasks.rl.rollout import rollout  # noqa: E402
from hyperscalees.noise.keys import fold_in, pair_keys  # noqa: E402
from hyperscalees.tasks.rl.task import _EVAL_STREAM  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cli"))
from cli_helpers import invoke  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_plot")


def gif_frames(path):
    """(frames stored, total duration in ms): Pillow merges identical neighbours, adding their durations."""
    with Image.open(path) as im:
        total = 0
        for i in range(im.n_frames):
            im.seek(i)
            total += im.info["duration"]
        return im.n_frames, total, im.size


def eval_episode_returns(task, model, n):
    keys = pair_keys(fold_in(task.seed, _EVAL_STREAM), torch.arange(n))
    return rollout(model, task._env(n), keys, task.eval_max_steps).returns


@pytest.mark.parametrize("env,max_steps,fps", [("CartPole-v1", 0, 50), ("Pendulum-v1", 15, 30)])
def test_the_gif_replays_the_evaluation_episodes_frame_by_frame(tmp_path, env, max_steps, fps):
    task = RLTask(seed=3, options={"env": env, "eval_max_steps": max_steps})
    model = task.build_model()
    out = tmp_path / "policy.gif"
    r = task.render(model, out, episodes=2)
    expected = eval_episode_returns(task, model, 2)
    if env == "CartPole-v1":  # reward 1 per step: the return is the episode length; one frame per state
        assert r.returns == expected.tolist()
        steps = sum(r.returns)
    else:  # gymnasium's float64 Pendulum against the batched float32 one, from the same starts
        torch.testing.assert_close(torch.tensor(r.returns, dtype=torch.float64), expected.double(), rtol=1e-3, atol=1e-3)
        steps = 2 * max_steps
    assert r.frames == steps + 2 and r.fps == fps
    stored, duration, size = gif_frames(out)
    assert duration == pytest.approx(r.frames * 1000 / fps, abs=10 * r.frames)  # delays: whole centiseconds
    assert 2 <= stored <= r.frames and size[0] >= 100 and size[1] >= 100


def test_frame_stride_keeps_every_sth_frame(tmp_path):
    task = RLTask(seed=3, options={"env": "Pendulum-v1", "eval_max_steps": 9})
    r = task.render(task.build_model(), tmp_path / "a.gif", episodes=1, every=3)
    assert r.frames == 4 and r.fps == 10  # states 0, 3, 6, 9 of 10


def test_eval_cli_renders_and_refuses_bad_paths(tmp_path, capsys):
    cfg = make_config("rl", es={"seed": 1, "population": 8}, engine={"steps": 1, "device": "cpu",
                                                                      "out": str(tmp_path / "run")},
                      options={"env": "CartPole-v1", "eval_episodes": 4})
    run(cfg, LocalBackend)
    gif = tmp_path / "cart.gif"
    code, out, err = invoke(["eval", str(tmp_path / "run"), "--episodes", "7", "--render", str(gif), "--json"], capsys)
    assert code == 0, err
    metrics = json.loads(out.strip().splitlines()[-1])["metrics"]
    assert gif.exists() and metrics["render_frames"] == metrics["render_return"] + 1
    for bad, why in ((tmp_path / "nodir" / "x.gif", "does not exist"), (tmp_path / "x.png", ".gif"),
                     (tmp_path, ".gif")):
        code, _, err = invoke(["eval", str(tmp_path / "run"), "--render", str(bad)], capsys)
        assert code == 2 and why in err and "Traceback" not in err
    code, _, err = invoke(["eval", str(tmp_path / "run"), "--episodes", "0"], capsys)
    assert code == 2 and "eval_episodes" in err


def test_missing_imageio_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "imageio.v3", None)
    task = RLTask(seed=0, options={"env": "CartPole-v1"})
    with pytest.raises(RuntimeError, match=r"hyperscalees\[rl\]"):
        render_episodes(task.build_model(), "CartPole-v1", torch.tensor([1]), 5, tmp_path / "x.gif")


def test_eval_refuses_episodes_and_render_for_tasks_without_them(tmp_path, capsys):
    run(make_config("xor", es={"population": 8}, engine={"steps": 1, "device": "cpu", "out": str(tmp_path)}),
        LocalBackend)
    code, _, err = invoke(["eval", str(tmp_path), "--episodes", "5"], capsys)
    assert code == 2 and "'xor' has no evaluation episodes" in err
    code, _, err = invoke(["eval", str(tmp_path), "--render", str(tmp_path / "x.gif")], capsys)
    assert code == 2 and "'xor' cannot draw itself" in err and not (tmp_path / "x.gif").exists()


def test_rendering_prints_nothing_about_sdl_audio():
    """Issue 19: SDL printed `error: XDG_RUNTIME_DIR is invalid ...` on every render without a session."""
    import os
    import subprocess
    code = ("from hyperscalees.tasks.rl.render import _make_render_env\n"
            "e = _make_render_env('CartPole-v1'); e.reset(seed=0); e.render(); e.close()")
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "SDL_VIDEODRIVER")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0 and "XDG_RUNTIME_DIR" not in r.stderr + r.stdout
