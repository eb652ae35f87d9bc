"""ES for RL: CartPole solved, exact resume with observation statistics, reload gives the same returns,
broken environments never reach the weights."""
import math

import pytest
import torch

from hyperscalees.distributed import LocalBackend
from hyperscalees.engine import load_checkpoint, load_run, make_config, run
from hyperscalees.strategies import metrics as strategy_metrics
from hyperscalees.tasks import TASKS
from hyperscalees.tasks.rl import RLTask, envs
from hyperscalees.tasks.rl.normalize import RunningStats

pytest.importorskip("gymnasium")
pytestmark = pytest.mark.usefixtures("no_plot")


def config(env="CartPole-v1", **engine):
    return make_config("rl", es={"seed": 2, "population": 32},
                       engine={"steps": 6, "eval_every": 3, "device": "cpu", **engine},
                       options={"env": env, "eval_episodes": 20})


def same(a, b, where="state"):
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def test_running_stats_fold_only_between_steps():
    s = RunningStats(3)
    x = torch.randn(50, 3, generator=torch.Generator().manual_seed(0))
    mask = torch.arange(50) % 5 != 0
    s.observe(x, mask)
    assert torch.equal(s.mean_std()[0], torch.zeros(3))          # nothing folded yet: the step's stats are frozen
    s.fold()
    mean, std = s.mean_std()
    kept = x[mask].double()
    torch.testing.assert_close(mean, kept.mean(0).float())
    torch.testing.assert_close(std, kept.std(0, unbiased=False).float())
    s.observe(torch.tensor([[float("nan"), 1.0, 2.0]]), torch.tensor([True]))
    s.fold()
    assert bool(torch.isfinite(s.mean_std()[0]).all())


def test_cartpole_is_solved_in_a_few_steps():
    summary = run(make_config("rl", es={"seed": 0}, engine={"steps": 12, "eval_every": 4, "device": "cpu"},
                              options={"env": "CartPole-v1"}), LocalBackend)
    assert summary["metrics"]["eval_return"] >= 475 and summary["solved"]


def test_resume_is_bit_identical_with_observation_statistics(tmp_path):
    run(config(out=str(tmp_path / "straight")), LocalBackend)
    run(config(steps=3, out=str(tmp_path / "resumed")), LocalBackend)
    assert float(load_checkpoint(tmp_path / "resumed").task["stats"]["count"]) > 0
    run(config(resume=str(tmp_path / "resumed")), LocalBackend)
    a, b = load_checkpoint(tmp_path / "straight"), load_checkpoint(tmp_path / "resumed")
    same(a.model, b.model, "model")                 # the policy's normalisation buffers included
    same(a.strategy, b.strategy, "strategy")
    same(a.task, b.task, "task")


def test_a_reloaded_policy_gives_the_same_evaluation_returns(tmp_path):
    summary = run(config(out=str(tmp_path / "run")), LocalBackend)
    _, task, model, _ = load_run(tmp_path / "run")
    again = task.evaluate(model)
    assert again["eval_return"] == summary["metrics"]["eval_return"]
    assert again["eval_return_std"] == summary["metrics"]["eval_return_std"]


def test_pendulum_runs_on_the_torch_dynamics():
    task = RLTask(seed=0, options={"env": "Pendulum-v1", "eval_episodes": 3})
    model = task.build_model()
    f = task.fitness(model, 0, 4, step=0)
    assert f.shape == (4, 1) and bool(torch.isfinite(f).all()) and float(f.max()) < 0
    assert task.env_steps == 4 * 200


def test_unknown_env_and_unsupported_spaces_are_named():
    with pytest.raises(ValueError, match="unknown environment 'CartPole-v9'.*CartPole-v1"):
        RLTask(options={"env": "CartPole-v9"})
    with pytest.raises(ValueError, match="only flat \\(Box\\) observations"):
        RLTask(options={"env": "Blackjack-v1"})


class BrokenEnv:
    """CartPole whose env 1 reports a NaN reward and env 2 a NaN observation at step 3."""

    def __init__(self, env_id, n, device):
        self.inner = envs.GymVectorEnv("CartPole-v1", n, device, "vector_entry_point")
        self.spaces, self.num_envs, self.t = self.inner.spaces, n, 0

    def reset(self, keys):
        self.t = 0
        return self.inner.reset(keys)

    def step(self, actions):
        obs, reward, term, trunc = self.inner.step(actions)
        self.t += 1
        if self.t == 3 and self.num_envs > 2:
            reward[1] = float("nan")
            obs[2, 0] = float("inf")
        return obs, reward, term, trunc

    def close(self):
        pass


def test_a_broken_env_counts_as_the_worst_episode_and_never_reaches_the_weights(monkeypatch):
    monkeypatch.setitem(envs.BUILDERS, "CartPole-v1", BrokenEnv)
    monkeypatch.setattr(strategy_metrics, "_warned_nonfinite", False)
    with pytest.warns(RuntimeWarning, match="2 non-finite fitness"):  # the two broken episodes of step 1
        summary = run(make_config("rl", es={"seed": 1, "population": 8}, engine={"steps": 2, "device": "cpu"},
                                  options={"env": "CartPole-v1", "eval_episodes": 5}), LocalBackend)
    assert math.isfinite(summary["metrics"]["eval_return"]) and summary["metrics"]["eval_broken"] == 2
    task = RLTask(seed=1, options={"env": "CartPole-v1", "eval_episodes": 5})
    f = task.fitness(task.build_model(), 0, 4, step=0)
    assert bool(torch.isnan(f[1, 0])) and bool(torch.isnan(f[2, 0])) and bool(torch.isfinite(f[[0, 3]]).all())


def test_rl_is_a_registered_task():
    assert TASKS["rl"] is RLTask and RLTask.metric == "eval_return"


def test_progress_reports_the_env_steps_of_the_last_step():
    task = RLTask(seed=0, options={"env": "Pendulum-v1", "max_steps": 10})
    es_model = task.build_model()
    assert task.progress(1.0) == {"env_steps/s": "0"}
    task.fitness(es_model, 0, 4, step=0)          # 4 members x 1 episode x 10 steps
    assert task.progress(0.5) == {"env_steps/s": "80"}
    task.fitness(es_model, 0, 2, step=1)
    assert task.progress(2.0) == {"env_steps/s": "10"} and task.progress(0.0) == {}


@pytest.mark.parametrize("starts", ["step", "pair"])
def test_episode_starts_are_shared_as_asked_and_chunking_meets_the_same_ones(starts):
    task = RLTask(seed=4, options={"env": "Pendulum-v1", "episodes": 3, "starts": starts})
    keys = task.episode_keys(step=2, lo=0, hi=8).view(8, 3)       # (member, episode)
    assert torch.equal(keys[0::2], keys[1::2])                      # a pair's twins always share their starts
    assert len(set(keys[0].tolist())) == 3                          # a member's episodes differ
    assert torch.equal(keys[0], keys[2]) == (starts == "step")      # pairs share them only with "step"
    if starts == "pair":
        assert len(set(keys.reshape(-1).tolist())) == 4 * 3
    chunk = task.episode_keys(step=2, lo=4, hi=8).view(4, 3)
    assert torch.equal(chunk, keys[4:])                             # a chunk meets its members' starts
    assert not torch.equal(task.episode_keys(step=3, lo=0, hi=8).view(8, 3), keys)  # new starts every step
    with pytest.raises(ValueError, match="'twins'"):
        RLTask(options={"env": "Pendulum-v1", "starts": "twins"})


def test_pendulum_alone_runs_its_tuned_settings():
    """``train rl --env Pendulum-v1`` with no other flag: the per-env settings, σ widening on ties included;
    a flag given on the command line still wins, and other envs keep the task's defaults."""
    from hyperscalees.cli.main import build_parser
    from hyperscalees.cli.train import config_from_args
    from hyperscalees.tasks.rl.task import ENV_ES_DEFAULTS, RLOptions
    cfg = config_from_args(build_parser().parse_args(["train", "rl", "--env", "Pendulum-v1"]))
    assert {k: getattr(cfg.es, k) for k in ENV_ES_DEFAULTS["Pendulum-v1"]} == ENV_ES_DEFAULTS["Pendulum-v1"]
    assert cfg.es.tie_sigma_growth > 1 and RLOptions(**cfg.options).starts == "pair"
    cfg = config_from_args(build_parser().parse_args(["train", "rl", "--env", "Pendulum-v1", "--sigma", "0.05",
                                                      "--starts", "step"]))
    assert cfg.es.sigma == 0.05 and cfg.es.population == 512 and RLOptions(**cfg.options).starts == "step"
    cfg = config_from_args(build_parser().parse_args(["train", "rl"]))
    assert cfg.es.population == 64 and cfg.es.tie_sigma_growth == 1.0 and RLOptions(**cfg.options).starts == "step"
    assert cfg.engine.restart_patience == 0


def test_pendulum_restarts_after_a_stall_unless_told_otherwise():
    from hyperscalees.cli.main import build_parser
    from hyperscalees.cli.train import config_from_args
    from hyperscalees.tasks.rl.task import ENV_ENGINE_DEFAULTS
    cfg = config_from_args(build_parser().parse_args(["train", "rl", "--env", "Pendulum-v1"]))
    assert (cfg.engine.restart_patience, cfg.engine.restart_min_delta) == tuple(
        ENV_ENGINE_DEFAULTS["Pendulum-v1"][k] for k in ("restart_patience", "restart_min_delta"))
    cfg = config_from_args(build_parser().parse_args(["train", "rl", "--env", "Pendulum-v1", "--restart-patience",
                                                      "0"]))
    assert cfg.engine.restart_patience == 0
    assert make_config("rl", options={"env": "Pendulum-v1"}).engine.restart_patience == \
        ENV_ENGINE_DEFAULTS["Pendulum-v1"]["restart_patience"]


def test_a_restart_forgets_the_observation_statistics():
    """A re-drawn policy is normalised as a new run's would be, not by the stalled policy's observations."""
    task = RLTask(seed=1, options={"env": "CartPole-v1", "eval_episodes": 2})
    model = task.build_model()
    for step in range(3):
        task.fitness(model, 0, 4, step)
    task.sync_stats(model, 3)
    assert float(task.stats.count) > 0 and not torch.equal(model.norm.std, torch.ones_like(model.norm.std))
    task.restart_state()
    task.sync_stats(model, 4)
    assert float(task.stats.count) == 0
    assert torch.equal(model.norm.mean, torch.zeros_like(model.norm.mean))
    assert torch.equal(model.norm.std, torch.ones_like(model.norm.std))


def test_evaluation_cadence_in_env_steps_and_its_time():
    """eval_every_env_steps: a real evaluation only once per multiple of env steps (PPO's cadence in
    bench rl); in between the last numbers come back marked evaluated=0, and eval_s counts real ones."""
    task = RLTask(seed=0, options={"eval_every_env_steps": 10_000, "eval_episodes": 4})
    model = task.build_model()
    first = task.evaluate(model)
    assert first["evaluated"] == 1 and first["eval_s"] > 0
    again = task.evaluate(model)
    assert again["evaluated"] == 0 and again["eval_s"] == first["eval_s"] and again["eval_return"] == first["eval_return"]
    task.env_steps = 10_000
    assert task.evaluate(model)["evaluated"] == 1
    every = RLTask(seed=0, options={"eval_episodes": 4})             # off: every call evaluates, no clock in it
    assert every.evaluate(model) == every.evaluate(model) and "eval_s" not in every.evaluate(model)
    assert every.eval_seconds > 0


def test_a_stop_request_cuts_an_evaluation_within_an_env_step_and_changes_nothing():
    """What Ctrl-C or the end of the time budget does to a long evaluation (issue 19): it stops
    within one batched env step and the task keeps what it had (its next evaluation is unchanged)."""
    from hyperscalees.tasks import EvaluationStopped
    task = RLTask(seed=0, options={"env": "Pendulum-v1", "eval_episodes": 4, "eval_every_env_steps": 1000})
    model = task.build_model()
    calls = []
    task.stop_check = lambda: calls.append(1) or len(calls) > 5    # asked to stop at the 6th env step
    with pytest.raises(EvaluationStopped):
        task.evaluate(model)
    assert len(calls) == 6                                           # of 200 env steps per episode
    assert task.state_dict()["next_eval"] == 0 and task.eval_seconds == 0
    task.stop_check = None
    assert task.evaluate(model)["evaluated"] == 1                    # the same evaluation, whole
