"""PPO time-to-threshold on one gymnasium env and seed: the anchor `bench/rl_vs_ppo.py` compares ES against.

Runs inside a throw-away venv that has stable-baselines3 (``bench/rl_vs_ppo.py`` builds
one under the user cache), so it never imports hyperscalees: PPO is not a dependency of
the library. Protocol (shared/research/baselines.md §3):

- SB3 PPO with the rl-baselines3-zoo tuned hyperparameters (``ZOO`` below), ``MlpPolicy``,
  ``device="cpu"``; training envs ``make_vec_env(env, n_envs, seed=s)``, a separate eval env
  ``make_vec_env(env, 1, seed=s + 1000)``.
- Every ``--eval-every`` env steps (the first callback step at or past each multiple),
  ``evaluate_policy(model, eval_env, n_eval_episodes, deterministic=True)``.
- Stops at the first evaluation whose mean reaches the threshold, at ``--max-seconds`` of
  wall clock, or when the zoo's ``n_timesteps`` run out (CartPole: 1e5, so the ``lin_``
  schedules decay as in the zoo; Pendulum has no schedule and a 5e6 horizon, i.e. the
  wall-clock cap).
- MuJoCo (``HalfCheetah-v5``, with ``gymnasium[mujoco]`` in the venv): the zoo's tuned
  ``HalfCheetah-v3`` entry (v5 has the same model and reward), ``normalize: true`` as the zoo
  does it: ``VecNormalize`` on the training env (observations and rewards), and the eval env
  normalising observations with the training statistics, synced before every evaluation,
  rewards raw. It has no threshold: run it for ``--max-seconds`` (``--timesteps`` lifts the
  zoo's 1e6 horizon; its learning rate is constant, so nothing else depends on it).
- Clocks start at the start of ``learn()`` (model construction, about 1 s, is excluded);
  ``wall_s`` includes the evaluations, ``train_s`` excludes them.

Prints one JSON line: env, seed, threshold, reached, wall_s / train_s / env_steps at the
threshold (null when not reached), totals, env steps/s of training, versions, and the whole
curve as [wall seconds, env steps, mean eval return] per evaluation.

    python bench/ppo_anchor.py --env CartPole-v1 --seed 0 [--max-seconds 900] [--threads 1]
    python bench/ppo_anchor.py --env HalfCheetah-v5 --max-seconds 1800 --timesteps 100000000 \
        --eval-every 50000 --eval-episodes 10
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time

THRESHOLDS = {"CartPole-v1": 475.0, "Pendulum-v1": -200.0}
# rl-baselines3-zoo hyperparams/ppo.yml, "tuned" entries; "lin_X" is a schedule X * progress_remaining.
ZOO = {
    "CartPole-v1": dict(n_envs=8, n_timesteps=100_000, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98,
                        n_epochs=20, ent_coef=0.0, learning_rate="lin_1e-3", clip_range="lin_0.2"),
    "Pendulum-v1": dict(n_envs=4, n_timesteps=5_000_000, n_steps=1024, gae_lambda=0.95, gamma=0.9, n_epochs=10,
                        ent_coef=0.0, learning_rate=1e-3, clip_range=0.2, use_sde=True, sde_sample_freq=4),
    "HalfCheetah-v5": dict(normalize=True, n_envs=1, n_timesteps=1_000_000, batch_size=64, n_steps=512, gamma=0.98,
                           learning_rate=2.0633e-05, ent_coef=0.000401762, clip_range=0.1, n_epochs=20,
                           gae_lambda=0.92, max_grad_norm=0.8, vf_coef=0.58096,
                           policy_kwargs=dict(log_std_init=-2, ortho_init=False, activation_fn="relu",
                                              net_arch=dict(pi=[256, 256], vf=[256, 256]))),
}


def linear_schedule(start: float):
    """SB3 calls a schedule with progress_remaining, 1 at the start of learn() and 0 at its end."""
    return lambda progress_remaining: progress_remaining * start


def ppo_kwargs(env_id: str) -> tuple[int, int, dict]:
    """(n_envs, n_timesteps, keyword arguments of PPO) for ``env_id``, schedules resolved.

    ``normalize`` (VecNormalize, not a PPO argument) is left out; ``activation_fn`` stays a name
    (torch is imported in :func:`run` only).
    """
    hp = dict(ZOO[env_id])
    hp.pop("normalize", None)
    n_envs, n_timesteps = hp.pop("n_envs"), hp.pop("n_timesteps")
    for key, value in hp.items():
        if isinstance(value, str) and value.startswith("lin_"):
            hp[key] = linear_schedule(float(value[4:]))
    return n_envs, n_timesteps, hp


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", required=True, choices=sorted(ZOO))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threshold", type=float, default=None, help="mean eval return to reach (default: per env)")
    p.add_argument("--eval-every", type=int, default=10_000, help="env steps between evaluations")
    p.add_argument("--eval-episodes", type=int, default=20, help="episodes per evaluation")
    p.add_argument("--max-seconds", type=float, default=900.0, help="wall-clock cap from the start of learn()")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--final-eval", action="store_true", help="evaluate once more when training stops")
    p.add_argument("--timesteps", type=int, default=None, help="env steps to train at most (default: the zoo's)")
    p.add_argument("--hs-src", default=None, help="a hyperscalees source tree (its src/): score the policy with its "
                   "evaluator (tasks/rl/evaluate.py, the one rl_vs_ppo.py gives every method) instead of SB3's "
                   "evaluate_policy; curve points then carry the train-only clock too")
    args = p.parse_args(argv)
    if args.threshold is None:
        args.threshold = THRESHOLDS.get(args.env, float("inf"))  # no target: run to the clock
    return args


def shared_evaluator(args: argparse.Namespace):
    """hyperscalees' evaluator (imported from ``--hs-src``, not installed in this venv): the same
    episodes, env construction and starts as the ES runs of the same seed; PPO's mean action."""
    import importlib
    import numpy as np
    import torch
    sys.path.insert(0, args.hs_src)
    ev = importlib.import_module("hyperscalees.tasks.rl.evaluate")
    envs = importlib.import_module("hyperscalees.tasks.rl.envs")
    env = envs.make_env(args.env, args.eval_episodes, "cpu")
    keys = ev.evaluation_keys(args.seed, args.eval_episodes)
    max_steps = env.spaces.max_steps

    def score(model) -> tuple[float, float]:
        def act(obs):
            a, _ = model.predict(obs.numpy().astype(np.float32), deterministic=True)
            return torch.as_tensor(a)
        r = ev.evaluate_policy(act, env, keys, max_steps)
        return r["eval_return"], r["eval_return_std"]
    return score


def run(args: argparse.Namespace) -> dict:
    # Imported here so that --help and the tables above work without stable-baselines3.
    import gymnasium
    import stable_baselines3
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize, sync_envs_normalization

    # One thread by default: this policy is a 64x64 MLP, and on the project's 2-core machine two
    # intra-op threads make such small ops slower and the timings erratic whenever anything else
    # runs (ecosystem.md §0: PPO CartPole 10k steps took 5.6-6.1 s at 1 thread, 11-75 s at 2).
    torch.set_num_threads(args.threads)
    n_envs, n_timesteps, kwargs = ppo_kwargs(args.env)
    n_timesteps = args.timesteps or n_timesteps
    if "policy_kwargs" in kwargs:
        kwargs["policy_kwargs"] = {**kwargs["policy_kwargs"],
                                   "activation_fn": {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh}[
                                       kwargs["policy_kwargs"].get("activation_fn", "tanh")]}
    env = make_vec_env(args.env, n_envs=n_envs, seed=args.seed)
    eval_env = make_vec_env(args.env, n_envs=1, seed=args.seed + 1000)
    if ZOO[args.env].get("normalize"):
        env = VecNormalize(env, gamma=kwargs["gamma"])  # the zoo's normalize: true, with the algorithm's gamma
        eval_env = VecNormalize(eval_env, training=False, norm_reward=False)
    model = PPO("MlpPolicy", env, seed=args.seed, device="cpu", verbose=0, **kwargs)
    shared = shared_evaluator(args) if args.hs_src else None

    class ThresholdStop(BaseCallback):
        """Evaluates every ``eval_every`` env steps; stops at the threshold or the wall-clock cap."""

        def _on_training_start(self) -> None:
            self.t0, self.eval_s, self.next_eval = time.perf_counter(), 0.0, args.eval_every
            self.curve, self.hit, self.stopped = [], None, "timesteps"

        def evaluate(self) -> tuple[float, float, float]:
            """(wall, mean, std) of one evaluation, appended to the curve; its time counts as eval time."""
            te = time.perf_counter()
            if shared is not None:
                mean, std = shared(self.model)
            else:
                if isinstance(eval_env, VecNormalize):
                    sync_envs_normalization(self.training_env, eval_env)
                mean, std = evaluate_policy(self.model, eval_env, n_eval_episodes=args.eval_episodes,
                                            deterministic=True)
            now = time.perf_counter()
            self.eval_s += now - te
            wall = now - self.t0
            if shared is not None:   # [wall, train-only, env steps, return]: rl_vs_ppo.py's curve points
                self.curve.append([round(wall, 4), round(wall - self.eval_s, 4), self.num_timesteps, float(mean)])
            else:
                self.curve.append([round(wall, 4), self.num_timesteps, float(mean)])
            return wall, float(mean), float(std)

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next_eval:
                self.next_eval = (self.num_timesteps // args.eval_every + 1) * args.eval_every
                wall, mean, std = self.evaluate()
                if mean >= args.threshold:
                    self.hit = dict(wall_s=wall, train_s=wall - self.eval_s, env_steps=self.num_timesteps,
                                    eval_mean=float(mean), eval_std=float(std))
                    self.stopped = "threshold"
                    return False
            if time.perf_counter() - self.t0 > args.max_seconds:
                self.stopped = "time_cap"
                return False
            return True

    cb = ThresholdStop()
    model.learn(total_timesteps=n_timesteps, callback=cb)
    if args.final_eval and cb.hit is None and (not cb.curve or cb.curve[-1][1] != model.num_timesteps):
        cb.evaluate()  # the policy training ended with, not the last scheduled evaluation's
    total_wall = time.perf_counter() - cb.t0
    total_train = total_wall - cb.eval_s
    hit = cb.hit or {}
    return {
        "env": args.env, "seed": args.seed, "threshold": args.threshold, "reached": cb.hit is not None,
        "wall_s": hit.get("wall_s"), "train_s": hit.get("train_s"), "env_steps": hit.get("env_steps"),
        "eval_mean": hit.get("eval_mean"), "eval_std": hit.get("eval_std"), "stopped": cb.stopped,
        "total_wall_s": total_wall, "total_train_s": total_train, "total_env_steps": model.num_timesteps,
        "env_steps_per_s": model.num_timesteps / total_train if total_train > 0 else None,
        "eval_every": args.eval_every, "eval_episodes": args.eval_episodes, "max_seconds": args.max_seconds,
        "threads": torch.get_num_threads(), "hyperparams": ZOO[args.env], "n_timesteps": n_timesteps,
        "versions": {"stable_baselines3": stable_baselines3.__version__, "torch": torch.__version__,
                     "gymnasium": gymnasium.__version__, "python": platform.python_version()},
        "curve": cb.curve,
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    # SB3 makes an empty $TMPDIR/SB3-<timestamp> folder on every learn() unless SB3_LOGDIR is set.
    with tempfile.TemporaryDirectory(prefix="ppo_anchor_") as logdir:
        os.environ.setdefault("SB3_LOGDIR", logdir)
        out = run(args)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
