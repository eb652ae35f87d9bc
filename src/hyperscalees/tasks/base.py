"""What a task is: a model to build, a fitness for a slice of the population, held-out metrics.

Dimensions: P members in the slice [lo, hi), B examples per member, D input features.
A fitness call receives a model inside ``es.perturbed((lo, hi))`` and must feed it
member-major inputs (rows [i*B, (i+1)*B) belong to member lo + i). Every member of one
step sees the *same* examples -- antithetic twins must differ only by their noise sign,
or the pair difference measures the data instead of the direction. Per-step data is
derived from ``(seed, step)`` alone, so a resumed run draws exactly what an
uninterrupted one would.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

import torch
from torch import Tensor, nn

from ..models.mlp import ACTIVATIONS
from ..noise.keys import fold_in


@dataclass(frozen=True)
class NoOptions:
    """Tasks without options of their own use this empty options dataclass."""


class AbstractTask:
    """A fitness function plus its model and metrics; concrete tasks are final.

    Class attributes every task sets:
      ``name``: registry key; ``metric``: the key of :meth:`evaluate` that the progress bar
      shows; ``goal``: "min" or "max" for that metric; ``target``: the value counted as solved;
      ``defaults``: population, sigma, rank, lr, optimizer and steps that work for this task;
      ``Options``: a frozen dataclass of task-specific knobs (become CLI flags).
    """

    name: ClassVar[str] = "abstract"
    metric: ClassVar[str] = "loss"
    goal: ClassVar[str] = "min"
    target: ClassVar[float | None] = None
    defaults: ClassVar[dict] = {}
    Options: ClassVar[type] = NoOptions

    def __init__(self, seed: int = 0, device: str | torch.device | None = None, options=None):
        self.seed = int(seed)
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        if options is None:
            options = self.Options()
        elif isinstance(options, dict):
            options = make_options(self.Options, options)
        self.options = options

    # -- what concrete tasks implement --------------------------------------------------
    def make_model(self) -> nn.Module:
        raise NotImplementedError

    def fitness(self, model: nn.Module, lo: int, hi: int, step: int = 0) -> Tensor:
        """Scores (hi - lo,) of members [lo, hi) at ``step``; higher is better."""
        raise NotImplementedError

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Metrics of the unperturbed model; must contain ``self.metric``."""
        raise NotImplementedError

    def es_options(self, model: nn.Module) -> dict:
        """Extra keyword arguments of the ES facade for this model (e.g. ``groups``); none by default."""
        return {}

    @classmethod
    def model_es_defaults(cls, options: dict) -> dict:
        """ES settings (``ESConfig`` fields) that depend on the options, e.g. on the chosen model;
        they replace ``defaults`` for settings the user did not give. None by default."""
        return {}

    # -- shared helpers ----------------------------------------------------------------
    def build_model(self) -> nn.Module:
        """The task's model, initialised from ``seed`` only (global RNG left untouched)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            model = self.make_model()
        return model.to(self.device)

    def solved(self, metrics: dict[str, float]) -> bool:
        if self.target is None or self.metric not in metrics:
            return False
        v = metrics[self.metric]
        return v <= self.target if self.goal == "min" else v >= self.target

    def generator(self, *stream: int) -> torch.Generator:
        """A CPU generator keyed on (seed, *stream): same stream, same numbers, any device."""
        return torch.Generator().manual_seed(fold_in(self.seed, *stream) & 0x7FFF_FFFF_FFFF)

    def final_evaluate(self, model: nn.Module) -> dict[str, float]:
        """Metrics scored once, at the end of a run (a held-out test split); none by default."""
        return {}

    def metric_names(self) -> tuple[str, ...]:
        """Keys :meth:`evaluate` returns, for fixed CSV columns."""
        return (self.metric,)

    def progress(self, step_seconds: float) -> dict[str, str]:
        """Extra progress-bar fields after a step that took ``step_seconds`` (RL: env steps/s)."""
        return {}

    # -- state a resumed run must restore ----------------------------------------------
    def state_dict(self) -> dict:
        """What the task has accumulated while training (e.g. observation statistics, a data
        cursor); saved in every checkpoint so a resumed run continues bit for bit.

        Tensors, dicts (str or int keys), lists, tuples and None/bool/int/float/str only: the
        checkpoint stores it as safetensors + JSON (``engine/tree_io.py``), never as a pickle.
        Tasks whose fitness depends only on (seed, step), like the built-in ones, keep none.
        """
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned; stateless tasks have nothing to restore."""

    # -- distributed runs: a task whose fitness accumulates state -------------------------
    # Workers evaluate chunks; the coordinator runs no fitness, yet must end each step with the
    # state an in-process run would have. Such a task sets ``record_chunks`` on workers, returns
    # what one fitness call added from :meth:`chunk_log`, and :meth:`apply_chunk_log` adds it on
    # the coordinator (chunks in member order, so the same operations in the same order).
    # :meth:`begin_step` is what fitness does first at a step (the coordinator calls it).
    def begin_step(self, model: nn.Module, step: int) -> None:
        """Per-step set-up a fitness call would do (nothing by default)."""

    def chunk_log(self) -> dict | None:
        """What the last fitness call added to the task state (None: stateless)."""
        return None

    def apply_chunk_log(self, log: dict) -> None:
        raise NotImplementedError(f"task {self.name!r} cannot merge state accumulated on workers")

    @classmethod
    def merges_chunks(cls) -> bool:
        return cls.apply_chunk_log is not AbstractTask.apply_chunk_log


def make_options(cls: type, values: dict):
    """Build a task's Options from a dict, naming unknown keys and the valid ones."""
    known = {f.name for f in fields(cls)}
    bad = sorted(set(values) - known)
    if bad:
        raise ValueError(f"unknown option(s) {bad} for this task; choose from {sorted(known)}")
    return cls(**values)


def check_options(options, positive: tuple[str, ...] = (), activation: str | None = None) -> None:
    """Refuse option values a task cannot build from, naming the option and the value.

    Called from an Options ``__post_init__``, so ``--batch 0`` fails where it is parsed,
    not as a reshape error deep inside the first fitness call.
    """
    for name in positive:
        v = getattr(options, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if activation is not None and activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}")


def member_major(x: Tensor, members: int) -> Tensor:
    """(B, ...) -> (members*B, ...): the same examples for every member, member-major."""
    return x.repeat(members, *([1] * (x.dim() - 1)))
