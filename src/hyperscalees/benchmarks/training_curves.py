"""One engine training run read back as a held-out curve: what ``rank`` and ``population-loss`` compare.

The benches of issue 42 train the library's own tasks through ``engine.run`` (no training loop of
their own) and read the run's ``metrics.jsonl``: the held-out metric at every evaluation, against
the step and against the seconds since the run started. A task is built once per process before
any timed run (``warm``), so the first run does not pay for imports (scikit-learn, gymnasium) and
reading the corpus that the later runs skip.

Tasks, by the names the benches use: ``digits`` (MLP 64→64→10 on scikit-learn's 8x8 digits;
held-out accuracy during the run, held-out cross-entropy ``loss``), ``egg`` (the ``lm`` task's integer
recurrent model from its bigram start; ``val_bpb`` during the run, ``test_bpb`` once at the end) and
``cartpole`` (``rl`` on CartPole-v1; ``eval_return``).
"""
from __future__ import annotations

import json
import math
import statistics
import tempfile
from pathlib import Path

from ..engine import make_config, read_rows, run as run_engine
from ..tasks import get_task
from .base import BenchSetupError

# bench task name -> engine task, its options, the metric read per evaluation and the final held-out loss
TASKS = {
    "digits": dict(task="digits", options={}, metric="accuracy", loss="loss"),
    "egg": dict(task="lm", options={"model": "egg", "sample_every": 0}, metric="val_bpb", loss="test_bpb"),
    "cartpole": dict(task="rl", options={"env": "CartPole-v1"}, metric="eval_return", loss=None),
}
STRATEGY_NAMES = {"eggroll": "eggroll", "openes": "open_es"}  # bench method -> engine strategy
_warmed: set = set()


def check_tasks(names, allowed=tuple(TASKS), allow_empty: bool = False) -> list[str]:
    names = list(names)
    bad = [n for n in names if n not in allowed]
    if bad or not (names or allow_empty):
        raise BenchSetupError(f"unknown task {bad[0] if bad else names!r}; choose from {list(allowed)}")
    return names


def json_object(text, what: str = "--settings") -> dict:
    """A dict from JSON text (or a dict), refused with the bad text otherwise."""
    try:
        value = json.loads(text) if isinstance(text, str) else text
    except json.JSONDecodeError as e:
        raise BenchSetupError(f"{what} must be a JSON object, got {text!r} ({e.msg})") from None
    if not isinstance(value, dict):
        raise BenchSetupError(f"{what} must be a JSON object, got {text!r}")
    return dict(value)


def with_settings(c: dict, settings, what: str = "--settings") -> dict:
    """``c`` with the keys ``settings`` (JSON text or a dict) names replaced; an unknown key is refused."""
    given = json_object(settings if settings is not None else {}, what)
    bad = sorted(set(given) - set(c))
    if bad:
        raise BenchSetupError(f"{what}: unknown key {bad[0]!r}; keys are {sorted(c)}")
    return {**c, **given}


def options_for(name: str, extra: dict | None = None) -> dict:
    return {**TASKS[name]["options"], **(extra or {})}


def warm(name: str, options: dict, device: str) -> None:
    """Build the task once (imports, data) so that no timed run pays for it."""
    key = (name, json.dumps(options, sort_keys=True), device)
    if key not in _warmed:
        get_task(TASKS[name]["task"])(seed=0, device=device, options=options)
        _warmed.add(key)


def train(name: str, method: str, es: dict, steps: int, eval_every: int, device: str = "cpu",
          options: dict | None = None, time_budget: float | None = None, keep: Path | None = None,
          chunk: int | None = None) -> dict:
    """Train one run; return its curve [(step, seconds, metric)], final metrics, steps and s/step.

    ``es``: ESConfig fields over the task's defaults (population, rank, seed, antithetic ...).
    ``keep``: a run directory to keep (default: a temporary one, removed after reading it).
    ``chunk``: members per forward (None: all at once), so a large population fits in memory.
    """
    spec = TASKS[name]
    opts = options_for(name, options)
    warm(name, opts, device)
    with tempfile.TemporaryDirectory(prefix="hs-claims-") as tmp:
        out = Path(keep) if keep is not None else Path(tmp) / "run"
        engine = {"steps": steps, "eval_every": eval_every, "out": str(out), "json": True, "device": device,
                  "checkpoint_minutes": 0, "time_budget": time_budget, "overwrite": keep is not None,
                  "chunk": chunk}
        cfg = make_config(spec["task"], strategy=STRATEGY_NAMES[method], es=es, engine=engine, options=opts)
        summary = run_engine(cfg)
        rows = read_rows(out / "metrics.jsonl")
    metric = spec["metric"]
    curve = [(r["step"], r["time"], r[metric]) for r in rows if r.get(metric) is not None]
    times = [r["time"] for r in rows]
    s_per_step = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else (times[0] if times else math.nan)
    final = summary["metrics"]
    loss = final.get(spec["loss"]) if spec["loss"] else None
    return {"curve": curve, "metric": metric, "final": final.get(metric, math.nan),
            "loss": math.nan if loss is None else float(loss), "steps": summary["steps"],
            "seconds": times[-1] if times else 0.0, "s_per_step": s_per_step, "stopped": summary["stopped"]}


def mean_sd(xs) -> tuple[float, float]:
    """Mean and sample standard deviation of the finite values (nan where there are none)."""
    xs = [float(x) for x in xs if x is not None and math.isfinite(x)]
    if not xs:
        return math.nan, math.nan
    return statistics.fmean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0


def noise_label(antithetic: bool) -> str:
    return "antithetic" if antithetic else "independent"
