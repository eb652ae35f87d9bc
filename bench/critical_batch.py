"""What predicts ES's training cost on an LLM: steps to a fixed held-out reward gain at several populations.

McCandlish et al. (arXiv 1812.06162, section 2.3) measure the critical batch without any noise
statistic: train at several batch sizes B, count the steps S(B) each needs to reach one fixed
target, and fit S = S_min + E_min / B (equivalently (S/S_min − 1)(E/E_min − 1) = 1 with E = B·S
the completions spent). B_crit = E_min / S_min is the batch beyond which more completions a step
stop buying fewer steps. Unlike B_simple (``llm_signal.py``'s statistic) this is a statement about
training itself, and it is what their "about B/n times the steps" means.

Here a batch is one ES step's completions, members × prompts (``subspace``: K evolves a fixed random
K-dimensional subspace, as ``train llm --subspace K``); each population trains with
``train llm`` (the library's own loop and evaluator) from the same start, its held-out mean reward
read every few steps, until it rises by ``gain`` over the start or ``max_steps`` pass.
``llm_signal.py --critical JSON`` runs it; the pure parts (:func:`steps_to_gain`,
:func:`critical_batch`) are tested on their own.
"""
from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

from hyperscalees.benchmarks.base import BenchSetupError

DEFAULTS = {"populations": [8, 32, 128], "prompts": 4, "sigma": 1e-2, "lr": 1e-4, "optimizer": "sgd",
            "gain": 0.02, "max_steps": 200, "eval_every": 10, "eval_prompts": 128, "train_problems": 0, "subspace": 0}
QUICK = {"populations": [2, 4], "prompts": 1, "max_steps": 2, "eval_every": 1, "eval_prompts": 2, "gain": 0.0}


def steps_to_gain(curve: list[tuple[int, float]], gain: float) -> float:
    """The first step at which the held-out reward is ``gain`` or more above its value at step 0 (inf
    if none); ``curve`` is (step, reward) pairs, step 0 among them."""
    points = sorted(curve)
    if not points or points[0][0] != 0:
        raise ValueError("the curve must start at step 0 (the start's reward)")
    start = points[0][1]
    return next((float(step) for step, r in points[1:] if r >= start + gain), math.inf)


def critical_batch(points: list[tuple[float, float]]) -> dict[str, float]:
    """S_min, E_min and B_crit = E_min/S_min from ``points`` (batch B, steps S) by least squares of
    S = S_min + E_min·(1/B); points that never reached the gain (S inf) are left out. nan where fewer
    than two finite points remain or the fit is not positive (no trade-off seen)."""
    pts = [(1.0 / b, s) for b, s in points if math.isfinite(s) and b > 0]
    nan = {"s_min": math.nan, "e_min": math.nan, "b_crit": math.nan, "points": len(pts)}
    if len({x for x, _ in pts}) < 2:
        return nan
    mx, my = sum(x for x, _ in pts) / len(pts), sum(y for _, y in pts) / len(pts)
    slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    s_min, e_min = my - slope * mx, slope
    if not (s_min > 0 and e_min > 0):
        return {**nan, "s_min": s_min, "e_min": e_min}
    return {"s_min": s_min, "e_min": e_min, "b_crit": e_min / s_min, "points": len(pts)}


def settings(given, quick: bool) -> dict:
    """``--critical``'s JSON over the defaults, each value checked."""
    c = {**DEFAULTS, **(QUICK if quick else {})}
    bad = sorted(set(given) - set(DEFAULTS))
    if bad:
        raise BenchSetupError(f"--critical: unknown key {bad[0]!r}; keys are {sorted(DEFAULTS)}")
    c.update(given)
    pops = c["populations"]
    if not isinstance(pops, list) or len(pops) < 2 or any(isinstance(n, bool) or not isinstance(n, int) or n < 2
                                                          or n % 2 for n in pops):
        raise BenchSetupError(f"--critical: populations must list two or more even sizes, got {pops!r}")
    for key, low in (("prompts", 1), ("max_steps", 1), ("eval_every", 1), ("eval_prompts", 1), ("train_problems", 0),
                     ("subspace", 0)):
        if isinstance(c[key], bool) or not isinstance(c[key], int) or c[key] < low:
            raise BenchSetupError(f"--critical: {key} must be a whole number >= {low}, got {c[key]!r}")
    if c["subspace"] == 1:
        raise BenchSetupError("--critical: subspace must be 0 (the block matrices) or a size >= 2, got 1")
    if not (isinstance(c["gain"], (int, float)) and c["gain"] >= 0):
        raise BenchSetupError(f"--critical: gain must be a number >= 0, got {c['gain']!r}")
    return c


def _curve(directory: Path) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [(int(r["step"]), float(r["reward"])) for r in rows if r.get("reward") is not None]


def measure(model: str, task: str, task_options: dict, c: dict, seed: int = 0, log=print) -> dict:
    """Train once per population (``train llm``), read steps to the gain, fit the critical batch."""
    from hyperscalees.engine import make_config, run
    rows = []
    for n in c["populations"]:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = make_config("llm", es={"population": n, "sigma": c["sigma"], "lr": c["lr"],
                                         "optimizer": c["optimizer"], "seed": seed},
                              engine={"steps": c["max_steps"], "out": tmp, "eval_every": c["eval_every"],
                                      "json": True, "overwrite": True},
                              options={"model": model, "task": task, "task_options": json.dumps(task_options),
                                       "prompts": c["prompts"], "eval_prompts": c["eval_prompts"],
                                       "train_problems": c["train_problems"], "subspace": c["subspace"],
                                       "export": False})
            run(cfg)
            curve = _curve(Path(tmp))
        steps = steps_to_gain(curve, c["gain"])
        batch = n * c["prompts"]
        rows.append({"population": n, "batch": batch, "steps": steps, "completions": steps * batch, "curve": curve})
        log(f"critical batch: {n} members x {c['prompts']} prompts: {steps} steps to +{c['gain']} held-out reward")
    return {"settings": c, "rows": rows, **critical_batch([(r["batch"], r["steps"]) for r in rows])}
