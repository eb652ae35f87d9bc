"""A training run as data: which task, which strategy, ES hyper-parameters and engine knobs.

``TrainConfig`` is made of parts (task options, ``ESConfig``, ``EngineConfig``), each flat
and frozen, so the CLI can generate one flag per field and every checkpoint can store
``asdict(cfg)`` and rebuild the exact same run from it.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import torch

from ..strategies import STRATEGIES
from ..strategies.config import ESConfig
from ..mup.rules import FAMILY as MUP_OPTIMIZERS
from ..tasks import TASKS, get_task
from ..tasks.base import make_options

ES_TASK_DEFAULTS = ("population", "sigma", "rank", "lr", "optimizer")
ENGINE_TASK_DEFAULTS = ("eval_every", "eval_at_start")  # engine settings a task's `defaults` may choose
_NULLABLE_ENGINE = ("time_budget", "out", "resume", "device", "chunk", "tensorboard")  # None is a meaningful value here


@dataclass(frozen=True)
class EngineConfig:
    steps: int = 100                    # total ES steps; a resumed run continues up to this count
    time_budget: float | None = None    # seconds the steps and validations may take (engine/evaluations.py)
    eval_every: int = 10                # held-out metrics every k steps (and always at the end)
    eval_at_start: bool = False         # also held-out metrics before a fresh run's first step (its start)
    checkpoint_every: int = 0           # steps between checkpoints; 0: by time only (checkpoint_minutes)
    checkpoint_minutes: float = 5.0     # also checkpoint when this much wall time passed since the last (0: never)
    snapshot_minutes: float = 0.0       # export the model every this much wall time, for a curve (0: never)
    out: str | None = None              # run directory: checkpoint, metrics.jsonl/.csv, curve.png
    resume: str | None = None           # a previous run directory to continue from
    device: str | None = None           # None: cuda if available, else cpu
    json: bool = False                  # one JSON summary line, no progress bar
    chunk: int | None = None            # members evaluated per forward (even); None: all at once
    overwrite: bool = False             # replace a run already in `out` instead of refusing
    tensorboard: str | None = None      # also log each step's metric row as TensorBoard scalars here
    restart_patience: int = 0           # restart after this many steps without a better evaluation (0: never)
    restart_min_delta: float = 0.0      # "better": by more than this, in the task metric's units

    def __post_init__(self):
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps!r}")
        if self.time_budget is not None and not (math.isfinite(self.time_budget) and self.time_budget > 0):
            raise ValueError(f"time_budget must be a finite number of seconds > 0, got {self.time_budget!r}")
        if self.eval_every < 1:
            raise ValueError(f"eval_every must be >= 1, got {self.eval_every!r}")
        if self.checkpoint_every < 0:
            raise ValueError(f"checkpoint_every must be >= 0, got {self.checkpoint_every!r}")
        if not (math.isfinite(self.checkpoint_minutes) and self.checkpoint_minutes >= 0):
            raise ValueError(f"checkpoint_minutes must be a finite number >= 0, got {self.checkpoint_minutes!r}")
        if not (math.isfinite(self.snapshot_minutes) and self.snapshot_minutes >= 0):
            raise ValueError(f"snapshot_minutes must be a finite number >= 0, got {self.snapshot_minutes!r}")
        if self.restart_patience < 0:
            raise ValueError(f"restart_patience must be >= 0 steps (0: never restart), got {self.restart_patience!r}")
        if not (math.isfinite(self.restart_min_delta) and self.restart_min_delta >= 0):
            raise ValueError(f"restart_min_delta must be a finite number >= 0, got {self.restart_min_delta!r}")
        if self.chunk is not None and (self.chunk < 2 or self.chunk % 2):
            raise ValueError(f"chunk must be an even number >= 2 (whole antithetic pairs), got {self.chunk!r}")
        if self.device is not None:
            try:
                torch.device(self.device)
            except RuntimeError as e:
                raise ValueError(f"invalid device {self.device!r}: {e}") from None
        if self.checkpoint_every and self.out is None and self.resume is None:
            raise ValueError("checkpoint_every needs an output directory (--out)")

    @property
    def resolved_device(self) -> torch.device:
        if self.device is not None:
            return torch.device(self.device)
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def check_device(device: torch.device) -> torch.device:
    """Fail early, naming the device, instead of deep inside the first ``.to(device)``.

    Done when a run is built (not in the config), so a checkpoint written on a GPU machine
    still loads its config on a CPU-only one.
    """
    device = torch.device(device)
    backend = getattr(torch, device.type, None)
    is_available = getattr(backend, "is_available", None)
    if device.type == "mps":
        is_available = torch.backends.mps.is_available
    if device.type not in ("cpu", "meta") and is_available is not None and not is_available():
        raise ValueError(f"device {str(device)!r} is not available on this machine")
    return device


@dataclass(frozen=True)
class TrainConfig:
    task: str
    strategy: str = "eggroll"
    es: ESConfig = field(default_factory=ESConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    options: dict[str, Any] = field(default_factory=dict)  # task-specific: every field of the task's Options
    mup_base: int | None = None  # muP anchored at this width of the task's width option (None: standard)

    def __post_init__(self):
        task_cls = get_task(self.task)
        check_mup_base(task_cls, self.mup_base, self.es)
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {self.strategy!r}; choose one of {sorted(STRATEGIES)}")
        # completed with the task's defaults, so a config made from flags and one made in
        # Python describe the same run with the same dict (and a resume can compare them)
        object.__setattr__(self, "options", asdict(make_options(task_cls.Options, self.options)))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        """The config ``to_dict`` wrote; a ValueError says what is missing or unknown."""
        try:
            return cls(task=d["task"], strategy=d["strategy"], es=ESConfig(**_renamed_es(d["es"])),
                       engine=EngineConfig(**d["engine"]), options=dict(d.get("options", {})),
                       mup_base=d.get("mup_base"))
        except KeyError as e:
            raise ValueError(f"config has no {e.args[0]!r} entry") from None
        except TypeError as e:  # an unknown or misspelt field, or a part that is not a mapping
            raise ValueError(f"config does not match this version: {e}") from None


def check_mup_base(task_cls, base, es: ESConfig) -> None:
    """muP needs a width to scale (the task's ``width_option``), a positive base width and an
    optimizer it has a rule for (``mup/rules.py``)."""
    if base is None:
        return
    if task_cls.width_option is None:
        able = sorted(n for n, t in TASKS.items() if t.width_option is not None)
        raise ValueError(f"mup_base does not apply to task {task_cls.name!r}: its model has no width option "
                         f"(muP applies to {', '.join(able)})")
    if isinstance(base, bool) or not isinstance(base, int) or base < 1:
        raise ValueError(f"mup_base must be a positive integer (a {task_cls.width_option}), got {base!r}")
    if es.update_rule != "optimizer" or es.optimizer not in MUP_OPTIMIZERS:
        rule = es.optimizer if es.update_rule == "optimizer" else f"update_rule {es.update_rule!r}"
        raise ValueError(f"mup_base does not apply to {rule}: muP's rules cover the optimizers "
                         f"{sorted(MUP_OPTIMIZERS)} (with update_rule 'optimizer')")


# ES settings renamed or moved since checkpoints were first written: old name -> new name (None: gone)
ES_RENAMES = {"update": "estimator", "fallback_mib": None}


def _renamed_es(es: dict) -> dict:
    """A saved run's ES settings under today's names (runs written before a rename still resume)."""
    out = dict(es)
    for old, new in ES_RENAMES.items():
        if old in out:
            value = out.pop(old)
            if new is not None:
                out.setdefault(new, value)
    return out


def make_config(task: str, strategy: str | None = None, es: dict | None = None, engine: dict | None = None,
                options: dict | None = None, mup_base: int | None = None) -> TrainConfig:
    """A ``TrainConfig`` with the task's defaults under any explicit (non-None) overrides.

    The task supplies population, sigma, rank, lr, optimizer and steps that are known to
    work for it (and, with ``strategy=None``, the strategy its options call for); everything else falls back to the dataclass defaults. ``mup_base``: train under
    muP anchored at that width (``train TASK --mup``), where σ and lr were tuned.
    """
    task_cls = get_task(task)
    es = {k: v for k, v in (es or {}).items() if v is not None}
    engine = {k: v for k, v in (engine or {}).items() if v is not None or k in _NULLABLE_ENGINE}
    options = {k: v for k, v in (options or {}).items() if v is not None}
    options = {**task_cls.option_defaults(options), **options}
    strategy = strategy or task_cls.strategy_default(options) or "eggroll"  # None: what the task's options ask
    es_fields = {f.name for f in fields(ESConfig)}
    for k, v in task_cls.model_es_defaults(options).items():
        es.setdefault(k, v)
    for k in ES_TASK_DEFAULTS:
        if k in task_cls.defaults:
            es.setdefault(k, task_cls.defaults[k])
    bad = sorted(set(es) - es_fields)
    if bad:
        raise ValueError(f"unknown ES setting(s) {bad}; choose from {sorted(es_fields)}")
    for k, v in task_cls.engine_defaults(options).items():
        engine.setdefault(k, v)
    if engine.get("steps") is None:
        engine["steps"] = task_cls.defaults.get("steps", EngineConfig.steps)
    for k in ENGINE_TASK_DEFAULTS:
        if engine.get(k) is None and k in task_cls.defaults:
            engine[k] = task_cls.defaults[k]
    return TrainConfig(task=task, strategy=strategy, es=ESConfig(**es), engine=EngineConfig(**engine),
                       options=options, mup_base=mup_base)
