"""``train llm --preset NAME``: the published ES-on-LLM protocols as named settings.

Each preset holds what its source documents, in this library's units, and nothing else: a
setting the source does not give is left at ``train llm``'s default and named in ``missing``.
Explicit flags (or keys given to ``make_config``) override a preset's values, so a preset is a
starting point a run can resize (e.g. ``--preset qiu --train-problems 32 --prompts 32`` on a CPU).

How the sources' settings map here:

- **Qiu et al.** (arXiv 2509.24372, "ES at scale"): 30 members, each its own Gaussian draw (no
  antithetic pairs), σ 1e-3, greedy answers, every member scored on the whole fixed 200-problem
  training set every iteration, rewards z-scored across the population (global, not per prompt),
  and the update θ += α·(1/N)·Σ zₙεₙ with α = 5e-4. Full-rank noise is ``--strategy open_es``
  (a dense ε per weight); global z-score is ``shaping=z_score`` with ``group_fitness=mean`` (each
  member's mean reward over the problems, then one z-score over members). This library's SGD
  step is lr·ĝ with ĝ = (1/(Nσ))·Σ zₙεₙ, so Qiu's α·(1/N)·Σ zₙεₙ is lr = α·σ = 5e-7.
- **EGGROLL** (its RWKV-7 Countdown run, as the project notes record it): 256 members, each
  answering 6 prompts, rank-1 noise (this library's default). The notes give no σ, lr or
  shaping for that run, so those stay at ``train llm``'s defaults and are listed as missing.
"""
from __future__ import annotations

from dataclasses import dataclass, field

QIU_ALPHA, QIU_SIGMA = 5e-4, 1e-3


@dataclass(frozen=True)
class LLMPreset:
    """One protocol: ``options`` (``train llm`` options), ``es`` (``ESConfig`` fields), ``strategy``
    (None: the default), the ``source`` of the numbers and the settings it does not document."""
    source: str
    options: dict = field(default_factory=dict)
    es: dict = field(default_factory=dict)
    strategy: str | None = None
    missing: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line for ``--help`` and the docs: every value the preset sets."""
        parts = [f"--strategy {self.strategy}"] if self.strategy else []
        parts += [f"{k}={v}" for k, v in {**self.options, **self.es}.items()]
        gaps = f"; not documented there, left at the defaults: {', '.join(self.missing)}" if self.missing else ""
        return f"{self.source}: {', '.join(parts)}{gaps}"


LLM_PRESETS: dict[str, LLMPreset] = {
    "qiu": LLMPreset(
        source="Qiu et al. arXiv 2509.24372",
        options={"train_problems": 200, "prompts": 200, "temperature": 0.0},
        es={"population": 30, "antithetic": False, "sigma": QIU_SIGMA, "lr": QIU_ALPHA * QIU_SIGMA,
            "optimizer": "sgd", "shaping": "z_score", "group_fitness": "mean"},
        strategy="open_es"),
    "eggroll": LLMPreset(
        source="EGGROLL, RWKV-7 Countdown (project notes)",
        options={"prompts": 6},
        es={"population": 256, "rank": 1},
        missing=("sigma", "lr", "optimizer", "shaping")),
}


def get_preset(name: str) -> LLMPreset | None:
    """The preset called ``name`` ('' for none); a ValueError names the bad value and the choices."""
    if not name:
        return None
    if name not in LLM_PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(LLM_PRESETS)}")
    return LLM_PRESETS[name]
