"""ES for reinforcement learning: episode returns as fitness, the population rolled out together.

Dimensions: P members in the slice [lo, hi), E episodes per member, n = P·E envs. A fitness
call runs one episode in each of the n envs, the policy acting for all of them in one
perturbed forward per env step, and returns the (P, E) returns; the strategy averages
each member's E returns (``group_fitness="mean"``) and ranks them (centered ranks by
default). Episode e of a step starts from the same state for every member, so members are
compared on equal terms; the starts change every step.

Observation normalisation uses statistics frozen for the whole step (``normalize.py``);
they live in the policy's buffers (saved with the model) and, as running sums, in the task
state (saved in checkpoints), so a resumed run continues bit for bit.

Threads: small policies ran 4-25× slower and erratically on 2 torch threads than on 1 on
the project's 2-core machine (issue #10), so rollouts and evaluations run on
``--threads`` (default 1) and restore the caller's setting afterwards.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ...models.policy import Policy
from ...ops.fixed_order import torch_threads
from ...noise.keys import fold_in, pair_keys
from ...models.mlp import ACTIVATIONS
from ..base import ACTIVATION_HELP, AbstractTask, check_options, option
from .envs import check_env_id, make_env
from .evaluate import EVAL_STREAM, evaluate_policy, evaluation_keys
from .normalize import RunningStats
from .rollout import rollout

TARGETS = {"CartPole-v1": 475.0, "Pendulum-v1": -200.0}  # "solved" returns (issue #10's acceptance)
_EVAL_STREAM = EVAL_STREAM
STARTS = ("auto", "step", "pair")
# Per-env settings that replace the task's defaults for whatever the command line leaves out, so
# ``train rl --env Pendulum-v1`` alone runs them. Pendulum: from a sweep on seeds 0-4 (bench rl then
# reports other seeds): OpenAI ES's per-pair starts, 256 pairs, a large decaying Adam step, rank 8;
# σ doubles after a step whose pairs all tie (a saturated policy: ESConfig.tie_sigma_growth).
ENV_ES_DEFAULTS = {"Pendulum-v1": {"population": 512, "sigma": 0.1, "lr": 0.25, "lr_decay": 0.99, "rank": 8,
                                   "tie_sigma_growth": 2.0}}
ENV_STARTS = {"Pendulum-v1": "pair"}   # starts="auto": this, else "step"
# Per-env engine settings, the same way. Pendulum: 2 seeds in 10 settled in a local optimum (about half the
# starts swung up, the others never; the evaluation flat for hundreds of steps, no tied pairs), so a run
# whose evaluation has not improved by more than 1 in 50 steps re-draws its weights (engine/restarts.py).
# 50: above the longest plateau seen on the tuning seeds (45 steps, seed 2 of 0-2 measured with 150 s each).
ENV_ENGINE_DEFAULTS = {"Pendulum-v1": {"restart_patience": 50, "restart_min_delta": 1.0}}


@dataclass(frozen=True)
class RLOptions:
    env: str = option("CartPole-v1", "gymnasium environment id, or module:Id to import a custom one first "
                      "(CartPole-v1 and Pendulum-v1 run batched; others as a sync vector env)")
    episodes: int = option(1, "episodes per member per step; their returns are averaged")
    hidden: int = option(32, "width of the policy's hidden layers")
    layers: int = option(2, "hidden layers of the policy")
    activation: str = option("tanh", ACTIVATION_HELP, choices=tuple(ACTIVATIONS))
    max_steps: int = option(0, "cap on training episodes' length (0: the environment's limit)")
    eval_episodes: int = option(100, "episodes of the unperturbed policy per evaluation (fixed starts)")
    eval_max_steps: int = option(0, "cap on evaluation episodes' length (0: the environment's limit, as returns "
                                    "are reported)")
    # bench rl's cadence, as PPO's: evaluate only at the first call at or past each multiple
    eval_every_env_steps: int = option(0, "evaluate only at the first evaluation step at or past each multiple of "
                                          "this many training env steps, repeating the last numbers in between "
                                          "(0: every evaluation step)")
    normalize: bool = option(True, "leave observations unnormalised (by default: running mean/std shared by the "
                                   "population)")
    starts: str = option("auto", "who shares a step's episode starts: every member (step), only a pair's twins "
                                 "(pair), or auto (the env's tuned choice: pair for Pendulum-v1, else step)",
                         choices=STARTS)
    threads: int = option(1, "torch threads for rollouts and evaluations (1: small policies run fastest on one)")

    def __post_init__(self):
        check_options(self, positive=("episodes", "hidden", "layers", "eval_episodes", "threads"),
                      activation=self.activation)
        if self.starts not in STARTS:
            raise ValueError(f"unknown starts {self.starts!r}; choose one of {list(STARTS)}")
        if self.starts == "auto":
            object.__setattr__(self, "starts", ENV_STARTS.get(self.env, "step"))
        for name in ("max_steps", "eval_max_steps", "eval_every_env_steps"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {v!r}")


class RLTask(AbstractTask):
    """A deterministic MLP policy on a gymnasium environment; fitness is the episode return."""

    name = "rl"
    metric = "eval_return"
    goal = "max"
    defaults = {"population": 64, "sigma": 0.1, "rank": 4, "lr": 0.05, "optimizer": "adam", "steps": 300,
                "shaping": "centered_rank"}
    Options = RLOptions
    width_option = "hidden"

    def __init__(self, seed=0, device=None, options=None):
        super().__init__(seed, device, options)
        o = self.options
        check_env_id(o.env)
        cores = os.cpu_count() or 1
        if o.threads > cores:
            warnings.warn(f"--threads {o.threads} is more than the {cores} CPU cores here: rollouts will be slower, "
                          f"not faster (try --threads {cores} or 1)", RuntimeWarning, stacklevel=2)
        probe = make_env(o.env, 1, self.device)
        self.spaces = probe.spaces
        probe.close()
        self.max_steps = o.max_steps or self.spaces.max_steps
        # Evaluation scores whole episodes unless told otherwise: a short training horizon (a cheap
        # fitness, e.g. HalfCheetah) must not shorten the return that is reported.
        self.eval_max_steps = o.eval_max_steps or self.spaces.max_steps
        self.target = TARGETS.get(o.env)
        self.stats = RunningStats(self.spaces.obs_dim)
        self.stats_step = 0
        self.env_steps = 0
        self._steps_seen = 0  # env_steps at the last progress() call
        self.eval_seconds = 0.0                 # spent in evaluations so far (bench rl subtracts it)
        self._last_eval: dict | None = None
        self._next_eval = 0                     # env steps at which the next evaluation is due
        self._envs: dict[int, object] = {}

    @classmethod
    def model_es_defaults(cls, options: dict) -> dict:
        """The env's tuned ES settings (ENV_ES_DEFAULTS) for what the command line leaves out."""
        return dict(ENV_ES_DEFAULTS.get(options.get("env", RLOptions.env), {}))

    @classmethod
    def engine_defaults(cls, options: dict) -> dict:
        """The env's tuned engine settings (ENV_ENGINE_DEFAULTS): restarts after a stall on Pendulum."""
        return dict(ENV_ENGINE_DEFAULTS.get(options.get("env", RLOptions.env), {}))

    # -- model -------------------------------------------------------------------------
    def make_model(self) -> nn.Module:
        s, o = self.spaces, self.options
        return Policy(s.obs_dim, s.action, o.hidden, o.layers, o.activation)

    # -- fitness -----------------------------------------------------------------------
    def _env(self, n: int):
        if n not in self._envs:
            self._envs[n] = make_env(self.options.env, n, self.device)
        return self._envs[n]

    def episode_keys(self, step: int, lo: int, hi: int) -> Tensor:
        """(n,) start keys of members [lo, hi), E per member, a function of (seed, step, index) alone.

        ``starts="step"``: episode e of a step starts from the same state for every member (common
        random numbers: members are ranked on equal footing), so a step's update follows E starts.
        ``starts="pair"``: only a pair's twins share starts (they still differ only by their noise
        sign) and every pair meets E new ones, so an update follows P/2·E starts (OpenAI ES's
        choice): slower to rank on equal terms, but it cannot overfit a step's few starts.
        """
        e = self.options.episodes
        if self.options.starts == "pair":
            first = (torch.arange(lo, hi) // 2) * e
            return pair_keys(fold_in(self.seed, step), (first.view(-1, 1) + torch.arange(e)).reshape(-1))
        return pair_keys(fold_in(self.seed, step), torch.arange(e).repeat(hi - lo))

    def sync_stats(self, model: nn.Module, step: int) -> None:
        """Fold the previous steps' observations in and hand the frozen statistics to the policy."""
        if step > self.stats_step:
            self.stats.fold()
            self.stats_step = step
        if self.options.normalize:
            mean, std = self.stats.mean_std()
            norm = model.norm
            norm.mean.copy_(mean.to(norm.mean.device))
            norm.std.copy_(std.to(norm.std.device))

    def fitness(self, model: nn.Module, lo: int, hi: int, step: int = 0) -> Tensor:
        self.sync_stats(model, step)
        with torch_threads(self.options.threads):
            ep = rollout(model, self._env((hi - lo) * self.options.episodes), self.episode_keys(step, lo, hi),
                         self.max_steps, self.stats if self.options.normalize else None)
        self.env_steps += ep.env_steps
        return ep.returns.view(hi - lo, self.options.episodes)

    def make_fitness(self):
        """Fitness whose observation sums workers can merge (``fitness.py``)."""
        from .fitness import ObservationStatsFitness
        return ObservationStatsFitness(self)

    # -- evaluation ----------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """``eval_episodes`` episodes of the unperturbed policy (tasks/rl/evaluate.py: the evaluator bench rl
        gives every method). With ``eval_every_env_steps``, a call before the next multiple is due returns
        the last evaluation's numbers again (``evaluated`` 0) instead of evaluating."""
        every = self.options.eval_every_env_steps
        if every and self._last_eval is not None and self.env_steps < self._next_eval:
            return {**self._last_eval, "env_steps": self.env_steps, "evaluated": 0, "eval_s": self.eval_seconds}
        n = self.options.eval_episodes
        with torch_threads(self.options.threads):
            res = evaluate_policy(self._stoppable(model), self._env(n), evaluation_keys(self.seed, n),
                                  self.eval_max_steps)
        self.eval_seconds += res.pop("seconds")
        if not every:      # the metrics stay a function of the run (no clock reading): runs compare bit for bit
            return {**res, "env_steps": self.env_steps}
        self._next_eval = (self.env_steps // every + 1) * every
        self._last_eval = res
        return {**res, "env_steps": self.env_steps, "evaluated": 1, "eval_s": self.eval_seconds}

    def _stoppable(self, model: nn.Module):
        """The policy, checking for a stop request before every batched env step (an evaluation of many
        long episodes is cut within one step of Ctrl-C or the time budget, never half-counted)."""
        if self.stop_check is None:
            return model

        def act(obs):
            self.check_stop()
            return model(obs)
        return act

    def render(self, model: nn.Module, path, episodes: int = 1, every: int = 1):
        """The first ``episodes`` evaluation episodes as a GIF at ``path`` (tasks/rl/render.py)."""
        from .render import render_episodes
        if not isinstance(episodes, int) or episodes < 1:
            raise ValueError(f"episodes to render must be an integer >= 1, got {episodes!r}")
        keys = pair_keys(fold_in(self.seed, _EVAL_STREAM), torch.arange(episodes))
        with torch_threads(self.options.threads):
            return render_episodes(model, self.options.env, keys, self.eval_max_steps, path, self.device, every)

    def progress(self, step_seconds: float) -> dict[str, str]:
        """Training env steps per second of the step that just ran (evaluations not counted)."""
        done, self._steps_seen = self.env_steps - self._steps_seen, self.env_steps
        return {"env_steps/s": f"{done / step_seconds:.3g}"} if step_seconds > 0 else {}

    def metric_names(self):
        names = ("eval_return", "eval_return_std", "eval_broken", "env_steps")
        return names + ("evaluated", "eval_s") if self.options.eval_every_env_steps else names

    def restart_state(self) -> None:
        """A restart starts the observation statistics afresh too: a new draw normalised by the stalled
        policy's observations (a pendulum held near upright) does not begin where a new run would."""
        self.stats = RunningStats(self.spaces.obs_dim)

    # -- state a resumed run must restore ----------------------------------------------
    def state_dict(self) -> dict:
        return {"stats": self.stats.state_dict(), "stats_step": self.stats_step, "env_steps": self.env_steps,
                "next_eval": self._next_eval}   # eval_seconds is a clock reading, not state: a resume restarts it

    def load_state_dict(self, state: dict) -> None:
        if not state:
            return
        self.stats.load_state_dict(state["stats"])
        self.stats_step = int(state["stats_step"])
        self.env_steps = self._steps_seen = int(state["env_steps"])
        self._next_eval = int(state.get("next_eval", 0))
