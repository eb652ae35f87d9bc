"""``python bench/llm_vs_grpo.py --tune``: pick each method's settings on tuning seeds, by validation accuracy.

The protocol, the same for ES and GRPO:

- each method has a grid of the same size (:data:`ES_GRID`: lr, sigma, population, optimizer, prompts per
  step; :data:`GRPO_GRID`: learning rate, generations per prompt, prompts per step), chosen the same way
  for both (the best of an equal number of settings explored on a seed never reported), best first;
- every setting trains on every tuning seed (disjoint from the reported seeds) for the same
  wall-clock budget as a reported run, so both methods get the same tuning budget: grid size x
  tuning seeds x budget seconds;
- a setting's score is its mean **validation** accuracy over the tuning seeds: greedy answers to
  the first V problems of the task's validation split. Problems are assigned to a split by
  content, so no validation problem is a training problem (neither the warm start nor the run has
  seen one: the score rewards what generalises, not what was memorised) or a test problem (the
  reported accuracy is on the test split, never looked at while tuning);
- the best mean wins; ties (and settings whose runs failed, scored as missing) go to the earlier
  entry.

:func:`tune` holds the selection only: it calls ``train(method, seed, settings) -> validation
accuracy or None`` (a failed run) for every cell, so it is tested with a fake;
``llm_runs.run_grid`` gives it real runs. Nothing here imports the runners.
"""
from __future__ import annotations

import statistics
from typing import Callable

from hyperscalees.strategies import STRATEGIES
from hyperscalees.strategies.rules.optimizers import OPTIMIZERS
from hyperscalees.strategies.shaping import GROUP_FITNESS, SHAPINGS
from hyperscalees.tasks.llm_presets import LLM_PRESETS

TUNING_SEEDS = (0,)
# Each grid: the four best of six settings per side explored on seed 0 (never a reported seed; saved in
# bench/results/cpu/llm_demo1_explore_2026-11-27.txt), best first. train llm's defaults (sigma 1e-3) left 79% of
# ES steps with every member tied on the char Llama, so every ES setting here has sigma 1e-2; TRL's default
# learning rate (1e-6) changed no answer in 240 s (llm_demo1_2026-11-27e.txt). Each side's worst setting at
# 240 s (llm_demo1_2026-11-27g.txt: ES with 16 prompts per step, GRPO at lr 1e-5, both 45.3%) later gave way
# to a variant of its best: ES members sampling at temperature 0.5 (ES's winner at 1200 s,
# llm_demo1_2026-11-28.txt), GRPO at lr 3e-4 with 16 completions (between its two winners).
ES_GRID = ({"lr": 3e-4, "sigma": 1e-2, "population": 32},
           {"lr": 1e-3, "sigma": 1e-2, "population": 32},
           {"lr": 1e-4, "sigma": 1e-2, "population": 32, "optimizer": "sgd"},
           {"lr": 3e-4, "sigma": 1e-2, "population": 32, "temperature": 0.5})
GRPO_GRID = ({"learning_rate": 1e-4, "generations": 16},
             {"learning_rate": 3e-4, "generations": 8},
             {"learning_rate": 3e-4, "generations": 8, "prompts": 16},
             {"learning_rate": 3e-4, "generations": 16})
GRIDS = {"es": ES_GRID, "grpo": GRPO_GRID}
# What a setting may hold, per method (a grid entry or ``--settings``), and what each must be.
_POSITIVE = ("a number > 0", lambda v: not isinstance(v, bool) and isinstance(v, (int, float)) and 0 < v < float("inf"))
_COUNT = ("a whole number >= 1", lambda v: not isinstance(v, bool) and isinstance(v, int) and v >= 1)
_PAIRS = ("an even whole number >= 2 (antithetic pairs)",
          lambda v: not isinstance(v, bool) and isinstance(v, int) and v >= 2 and v % 2 == 0)
_GROUP = ("a whole number >= 2 (GRPO compares completions within a group)",
          lambda v: not isinstance(v, bool) and isinstance(v, int) and v >= 2)
SETTING_KEYS = {
    "es": {"lr": _POSITIVE, "sigma": _POSITIVE, "population": _PAIRS, "prompts": _COUNT, "temperature": _POSITIVE,
           "optimizer": (f"one of {', '.join(OPTIMIZERS)}", lambda v: v in OPTIMIZERS),
           # the anchors' protocol and what evolves (issue 40's pre-registrations), passed to train llm as flags
           "subspace": _COUNT, "adapters": _COUNT, "train_problems": _COUNT,
           "evolve": ("'norms' or glob patterns", lambda v: isinstance(v, str) and v.strip() != ""),
           "shaping": (f"one of {', '.join(sorted(SHAPINGS))}", lambda v: v in SHAPINGS),
           "group_fitness": (f"one of {', '.join(GROUP_FITNESS)}", lambda v: v in GROUP_FITNESS),
           "preset": (f"one of {', '.join(LLM_PRESETS)}", lambda v: v in LLM_PRESETS),
           # how a step is computed, not what it computes: the noise's kind, members per forward, caches
           "strategy": (f"one of {', '.join(STRATEGIES)}", lambda v: v in STRATEGIES),
           "chunk": _PAIRS, "subspace_cache_mib": _COUNT, "noise_cache_mib": _COUNT},
    "grpo": {"learning_rate": _POSITIVE, "generations": _GROUP, "prompts": _COUNT},
}
PROTOCOL = ("each method's grid (same size) trained on tuning seeds {seeds} for {budget:g} s per setting and seed, "
            "chosen by mean validation accuracy: {chosen}")
VALIDATION = ("the first {count} distinct problems of the task's validation split, greedy; disjoint from the training "
              "and test problems by content")


def check_settings(method: str, settings) -> dict:
    """``settings`` for ``method`` (a grid entry, or given by ``--settings``), refused with
    the bad key or value: a typo must not silently run a method's defaults."""
    if method not in SETTING_KEYS:
        raise ValueError(f"no settings for method {method!r}: the methods are {sorted(SETTING_KEYS)}")
    if not isinstance(settings, dict):
        raise ValueError(f"{method} settings must be a JSON object, got {settings!r}")
    for key, value in settings.items():
        if key not in SETTING_KEYS[method]:
            raise ValueError(f"{method} setting {key!r} is not one of {sorted(SETTING_KEYS[method])}")
        what, ok = SETTING_KEYS[method][key]
        if not ok(value):
            raise ValueError(f"{method} setting {key!r} must be {what}, got {value!r}")
    return dict(settings)


def check_grids(grids: dict[str, tuple[dict, ...]]) -> None:
    """Equal tuning budgets: every method's grid has the same number of settings (at least one)."""
    for m, g in grids.items():
        for settings in g:
            check_settings(m, settings)
    sizes = {m: len(g) for m, g in grids.items()}
    if len(set(sizes.values())) > 1 or min(sizes.values(), default=0) < 1:
        raise ValueError(f"every method needs a grid of the same size (the same tuning budget), got {sizes}")


def tune(grids: dict[str, tuple[dict, ...]], seeds, train: Callable[[str, int, dict], float | None],
         log=lambda msg: None) -> dict:
    """``{method: {"grid": [{"settings", "validation": [per seed], "mean"}...], "chosen": settings,
    "chosen_index": i}}``: every setting of every method trained on every tuning seed, the best mean
    validation accuracy chosen (ties and failures go to the earlier entry)."""
    check_grids(grids)
    seeds = tuple(seeds)
    if not seeds:
        raise ValueError("tuning needs at least one tuning seed")
    out = {}
    for method, grid in grids.items():
        cells, best = [], None
        for i, settings in enumerate(grid):
            scores = [train(method, seed, dict(settings)) for seed in seeds]
            known = [s for s in scores if s is not None]
            mean = statistics.fmean(known) if len(known) == len(scores) else None  # a failed seed disqualifies
            cells.append({"settings": dict(settings), "validation": scores, "mean": mean})
            log(f"  tuning {method} {settings}: validation accuracy {scores}")
            if mean is not None and (best is None or mean > cells[best]["mean"]):
                best = i
        best = 0 if best is None else best
        out[method] = {"grid": cells, "chosen": dict(grid[best]), "chosen_index": best}
    return out
