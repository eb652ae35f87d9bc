"""``hyperscalees eval DIR``: load a run's checkpoint and print its task's held-out metrics.

Reads only the model and the task state that ``checkpoint.json`` names: evaluating needs
no optimizer state, so a damaged strategy file does not stop it. ``--episodes`` overrides
the run's evaluation episode count (tasks that have one: rl); ``--render out.gif`` also
animates the first evaluation episode(s) (tasks that can draw themselves: rl).
"""
from __future__ import annotations

import argparse
import dataclasses

from ..engine import load_run
from .base import examples_epilog, fail, json_line, os_error


def register(subparsers) -> None:
    p = subparsers.add_parser("eval", help="evaluate a saved checkpoint",
                              description="Load the checkpoint of a run directory and print its held-out metrics.",
                              **examples_epilog([("hyperscalees eval runs/digits", "held-out metrics of that run"),
                                                 ("hyperscalees eval runs/cartpole --episodes 100 --render cart.gif",
                                                  "RL: 100 episodes and a GIF of the first")]))
    p.add_argument("directory", metavar="DIR", help="run directory written by `hyperscalees train --out DIR`")
    p.add_argument("--device", default=None, help="torch device to evaluate on (default: cpu)")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    p.add_argument("--data", default=None, metavar="PATH",
                   help="where the run's data is now, if it moved since training (lm; checked to be the same data)")
    p.add_argument("--episodes", type=int, default=None, metavar="N",
                   help="evaluation episodes (rl; default: the run's --eval-episodes)")
    p.add_argument("--render", default=None, metavar="FILE.gif",
                   help="rl: also write the first evaluation episode(s) as an animated GIF (needs the rl extra: "
                        "gymnasium[classic-control], imageio; MuJoCo envs also need MUJOCO_GL=egl or osmesa)")
    p.add_argument("--render-episodes", type=int, default=1, metavar="K", help="episodes in the GIF (default: 1)")
    p.add_argument("--frame-every", type=int, default=1, metavar="S",
                   help="keep every S-th frame in the GIF: a smaller file, still played in real time (default: 1)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.render is not None and args.episodes is not None and args.render_episodes > args.episodes:
        return fail("hyperscalees eval", f"--render-episodes {args.render_episodes} is more than the --episodes "
                    f"{args.episodes} evaluated: the GIF shows scored episodes only")
    try:
        cfg, task, model, step = load_run(args.directory, args.device, data={"data": args.data} if args.data else None)
    except (FileNotFoundError, ValueError, RuntimeError) as e:
        return fail("hyperscalees eval", str(e))
    except OSError as e:
        return fail("hyperscalees eval", os_error(e))
    try:
        if args.episodes is not None:
            if not hasattr(task.options, "eval_episodes"):
                raise ValueError(f"--episodes: task {cfg.task!r} has no evaluation episodes")
            task.options = dataclasses.replace(task.options, eval_episodes=args.episodes)
        if args.render is not None and not hasattr(task, "render"):
            raise ValueError(f"--render: task {cfg.task!r} cannot draw itself (rl can)")
        scored = getattr(task.options, "eval_episodes", None)
        if args.render is not None and scored is not None and args.render_episodes > scored:
            raise ValueError(f"--render-episodes {args.render_episodes} is more than the {scored} episodes evaluated "
                             "(--episodes): the GIF shows scored episodes only")
        rendered = (task.render(model, args.render, args.render_episodes, args.frame_every)  # a bad path fails fast
                    if args.render is not None else None)
        metrics = task.evaluate(model)
    except (ValueError, RuntimeError) as e:
        return fail("hyperscalees eval", str(e))
    except OSError as e:
        return fail("hyperscalees eval", os_error(e))
    if rendered is not None:
        metrics = {**metrics, "render_frames": rendered.frames,
                   "render_return": sum(rendered.returns) / len(rendered.returns)}
    if args.json:
        print(json_line({"task": cfg.task, "step": step, "directory": args.directory, "metrics": metrics,
                         "solved": task.solved(metrics)}))
    else:
        print(f"{cfg.task} at step {step} ({args.directory})")
        for k, v in metrics.items():
            print(f"  {k:<16} {v:.6g}")
        print(f"  {'solved':<16} {task.solved(metrics)}")
        if rendered is not None:
            print(f"  wrote {rendered.path}: {rendered.frames} frames at {rendered.fps} fps")
    return 0
