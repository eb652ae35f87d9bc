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

from dataclasses import dataclass, field, fields, replace
from typing import Callable, ClassVar

import torch
from torch import Tensor, nn

from ..models.mlp import ACTIVATIONS
from ..noise.keys import fold_in

RESTART_STREAM = 0x52455354  # "REST": the key stream of re-drawn initialisations


def option(default, help: str, choices=None, metavar: str | None = None):
    """A task option: a dataclass field whose help text and choices (a tuple, or a callable that
    returns one when the flags are built) travel with it, so ``train TASK --help`` is made from
    the task's own Options and two tasks may give one flag name different meanings."""
    meta = {"help": help}
    if choices is not None:
        meta["choices"] = choices
    if metavar is not None:
        meta["metavar"] = metavar
    return field(default=default, metadata=meta)


ACTIVATION_HELP = "nonlinearity between layers"


class EvaluationStopped(Exception):
    """An evaluation cut short because its run was asked to stop (Ctrl-C, SIGTERM, the time budget).

    Raised by :meth:`AbstractTask.check_stop`. An evaluation calls that before it changes anything
    it keeps (counters, cached results), so one cut short leaves the task as if it never began: the
    checkpoint written next holds the step's own state, and resuming it is exact.
    """


@dataclass(frozen=True)
class NoOptions:
    """Tasks without options of their own use this empty options dataclass."""


class AbstractTask:
    """A fitness function plus its model and metrics; concrete tasks are final.

    Class attributes every task sets:
      ``name``: registry key; ``metric``: the key of :meth:`evaluate` that the progress bar
      shows; ``goal``: "min" or "max" for that metric; ``target``: the value counted as solved;
      ``defaults``: population, sigma, rank, lr, optimizer and steps that work for this task (and
        optionally eval_every, and eval_at_start: held-out metrics before the first step too);
      ``Options``: a frozen dataclass of task-specific knobs (become CLI flags).
    """

    name: ClassVar[str] = "abstract"
    metric: ClassVar[str] = "loss"
    goal: ClassVar[str] = "min"
    target: ClassVar[float | None] = None
    defaults: ClassVar[dict] = {}
    Options: ClassVar[type] = NoOptions
    # options that say where the input data lives, not what the run is: stored as absolute paths,
    # they may be given anew (``--data NEW``) to resume, evaluate or use a run whose data has moved
    # (the task checks, from its saved state, that the data is the same)
    data_options: ClassVar[tuple[str, ...]] = ()
    # the option that sets the model's width, where muP applies (``train TASK --mup``); None: it does not
    width_option: ClassVar[str | None] = None
    # set by whoever runs the task (the training loop): True when an evaluation should stop now
    stop_check: Callable[[], bool] | None = None

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

    def samples(self) -> list[dict]:
        """Examples from the last complete :meth:`evaluate` (e.g. a held-out prompt, the model's
        answer and its reward) that the run appends to ``samples.jsonl`` and shows one of; none by default."""
        return []

    def es_options(self, model: nn.Module) -> dict:
        """Extra keyword arguments of the ES facade for this model (e.g. ``groups``); none by default."""
        return {}

    @classmethod
    def option_defaults(cls, options: dict) -> dict:
        """Task options that depend on other options, e.g. the width and start a chosen model trains
        best from; they replace the Options defaults for options the user did not give. Applied
        before :meth:`model_es_defaults`, which sees them. None by default."""
        return {}

    @classmethod
    def model_es_defaults(cls, options: dict) -> dict:
        """ES settings (``ESConfig`` fields) that depend on the options, e.g. on the chosen model;
        they replace ``defaults`` for settings the user did not give. None by default."""
        return {}

    @classmethod
    def strategy_default(cls, options: dict) -> str | None:
        """The strategy the options call for (e.g. a preset's full-rank noise), used when none is
        given; None: the usual default."""
        return None

    @classmethod
    def defaults_help(cls) -> str:
        """What ``train TASK --help`` adds after the flags: defaults that depend on an option (the
        flag defaults shown above are the task's own); nothing by default."""
        return ""

    @classmethod
    def without_data(cls, seed: int, device, options, state: dict) -> "AbstractTask | None":
        """The task rebuilt from a run's saved ``state`` without reading its data, enough to use the
        saved model (``generate``), or None where the state does not hold what that needs; then the
        task is built as usual (tasks that read no data, and runs saved before a task kept it)."""
        return None

    # -- shared helpers ----------------------------------------------------------------
    def check_stop(self) -> None:
        """Raise :class:`EvaluationStopped` when the run was asked to stop.

        Long evaluations call it between their pieces (a window of tokens, an env step), so
        Ctrl-C or the end of the time budget cuts them within a fraction of a second instead of
        a whole validation pass later.
        """
        if self.stop_check is not None and self.stop_check():
            raise EvaluationStopped()

    def build_model(self) -> nn.Module:
        """The task's model, initialised from ``seed`` only (global RNG left untouched)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            model = self.make_model()
        return model.to(self.device)

    def model_at_width(self, width: int) -> nn.Module:
        """The task's model with ``width_option`` set to ``width``, from the same seed: muP's base model."""
        if self.width_option is None:
            raise ValueError(f"muP does not apply to task {self.name!r}: its model has no width option")
        saved = self.options
        self.options = replace(saved, **{self.width_option: width})
        try:
            return self.build_model()
        finally:
            self.options = saved

    def redraw_parameters(self, model: nn.Module, draw: int) -> None:
        """Overwrite ``model``'s parameters with draw ``draw`` of this task's initialisation (a restart,
        ``engine/restarts.py``); buffers are kept. Draw 0 is :meth:`build_model`'s; a task whose model
        is loaded rather than drawn (a pretrained LLM) gets its loaded weights back."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(fold_in(self.seed, RESTART_STREAM, draw) & 0x7FFF_FFFF_FFFF if draw else self.seed)
            fresh = dict(self.make_model().named_parameters())
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(fresh[name])

    def restart_state(self) -> None:
        """Forget what the task learnt alongside the weights (a restart begins again: RL's observation
        statistics); data positions and counters stay. Nothing by default."""

    @classmethod
    def engine_defaults(cls, options: dict) -> dict:
        """Engine settings (``EngineConfig`` fields) that depend on the options, e.g. an env's restart
        patience; they replace the defaults for settings the user did not give. None by default."""
        return {}

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

    def export(self, model: nn.Module, directory) -> dict[str, str]:
        """Write what users take away besides the checkpoint into the run directory ``directory``
        at the end of a run (an LLM: a ``save_pretrained`` folder); {name: path}. Nothing by default."""
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

    # -- the fitness a backend runs ------------------------------------------------------
    def make_fitness(self) -> "TaskFitness":
        """The fitness object a backend's recipe hands out (``distributed/recipe.py``): this task's
        :meth:`fitness`, with its state. Tasks whose fitness accumulates state that workers must
        merge return a richer one (RL: ``tasks/rl/fitness.py``)."""
        return TaskFitness(self)


class TaskFitness:
    """A task's :meth:`~AbstractTask.fitness` as a backend's fitness object, with the task's state.

    Its ``state_dict`` is the task's: a task that accumulates state without a ``merge`` is
    refused by distributed backends (they could not keep it consistent), and runs in-process.
    """

    def __init__(self, task: AbstractTask):
        self.task = task

    def __call__(self, model: nn.Module, lo: int, hi: int, step: int) -> Tensor:
        return self.task.fitness(model, lo, hi, step=step)

    def state_dict(self) -> dict:
        return self.task.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.task.load_state_dict(state)


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
