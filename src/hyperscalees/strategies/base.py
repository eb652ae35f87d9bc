"""Ask / shape / update over named parameters: the machinery every strategy shares.

A strategy holds references to parameters (torch.optim's shape), never copies per
member. One step is

- ``ask()`` -> :class:`Population`, a few scalars; ``store(pop)`` is that step's
  :class:`NoiseStore`, which the perturbed forwards read;
- ``shape(pop, fitness)`` -> shaped (P,): runs where the fitness is (a coordinator);
- ``update(pop, shaped)`` -> metrics: the estimate ĝ from the store, then the update
  rule moves the weights. Its bits depend on (state, step, shaped) alone, so every
  replica that applies it stays identical;
- ``tell(fitness)`` = shape then update.

Concrete strategies only choose which parameters get low-rank noise.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from ..noise.draw import Noise
from ..noise.population import Population
from ..noise.spec import ESMode, ParamSpec
from ..noise.store import NoiseStore
from .config import ESConfig
from .estimate import coefficient, estimate
from .groups import resolve_groups
from .rules import RULES, OptimizerRule
from ..ops.precision import resolve_precision
from .metrics import StepMetrics
from .shaping import check_fitness, fitness_stats, get_shaping, shape_fitness

Schedule = Callable[[int], float]
MAX_TIE_SCALE = 1024.0  # σ grows at most this much over a run of tied steps (a fitness that never varies)


class AbstractStrategy:
    """Shared ask/shape/update machinery; subclasses set :meth:`is_lowrank`."""

    name = "abstract"

    def __init__(self, params: dict[str, Tensor], specs: dict[str, ParamSpec], config: ESConfig,
                 lr_schedule: Schedule | None = None, sigma_schedule: Schedule | None = None,
                 shaping=None, optimizer_factory: Callable | None = None, groups: list[dict] | None = None,
                 update_rule: Callable | None = None):
        self.config = config
        self.params = dict(params)
        self.specs = dict(specs)
        self.step = 0
        self.shaping = get_shaping(shaping if shaping is not None else config.shaping)
        self.sigma_schedule = sigma_schedule
        self.lr_schedule = lr_schedule
        self.trainable = [n for n, s in self.specs.items() if s.mode != ESMode.EXCLUDED]
        if not self.trainable:
            raise ValueError("no trainable parameters: everything is excluded or frozen")
        self.groups = resolve_groups(self.trainable, groups, config.lr, config.weight_decay)
        self._sigma_scales = {n: g.sigma_scale for g in self.groups for n in g.names}
        self.lowrank = frozenset(n for n in self.trainable if self.is_lowrank(self.specs[n]))
        self._rule_args = (update_rule, optimizer_factory)
        self.rule = self._new_rule()
        self._store: NoiseStore | None = None
        self.tie_scale = 1.0     # σ multiplier after steps whose pairs all tied (ESConfig.tie_sigma_growth)
        self.schedule_origin = 0  # the step σ/lr decay and schedules count from (moved by restart())
        self._precisions = {n: resolve_precision(config.update_precision, params[n].dtype, params[n].device)
                            for n in self.trainable}

    def _new_rule(self):
        """The update rule in its initial state, over the trainable parameters as they are now."""
        update_rule, optimizer_factory = self._rule_args
        trainable = {n: self.params[n] for n in self.trainable}
        if update_rule is not None:
            return update_rule(trainable, self.groups, self.config)
        if self.config.update_rule == "optimizer":
            return OptimizerRule(trainable, self.groups, self.config, optimizer_factory)
        return RULES[self.config.update_rule](trainable, self.groups, self.config)

    def restart(self) -> None:
        """Begin again from the parameters as they are now (the caller re-drew them, e.g. the training
        loop's restart after a stalled evaluation): a fresh update rule (no moments, fp32 masters copied
        from the new weights), no tie widening, σ/lr decay and schedules counted from this step. The step
        counter goes on, so the restarted run draws noise no earlier step used."""
        self.rule = self._new_rule()
        self.tie_scale = 1.0
        self.schedule_origin = self.step
        self._store = None

    # -- which parameters get which noise ------------------------------------------------
    def is_lowrank(self, spec: ParamSpec) -> bool:
        raise NotImplementedError

    # -- ask -----------------------------------------------------------------------------
    def sigma_at(self, step: int) -> float:
        step -= self.schedule_origin
        s = self.config.sigma * self.config.sigma_decay ** step
        return s * self.sigma_schedule(step) if self.sigma_schedule else s

    def lr_factor(self, step: int) -> float:
        step -= self.schedule_origin
        f = self.config.lr_decay ** step
        return f * self.lr_schedule(step) if self.lr_schedule else f

    def current_lr(self) -> float:
        """The first group's learning rate at the current step (schedules and decay applied)."""
        return self.rule.lrs(self.lr_factor(self.step))[0]

    def ask(self) -> Population:
        c = self.config
        sigma = self.sigma_at(self.step) * self.tie_scale
        return Population(step=self.step, seed=c.seed, size=c.population, sigma=sigma,
                          rank=c.rank, noise_reuse=c.noise_reuse, distribution=c.distribution,
                          baseline_every=c.baseline_every, antithetic=c.antithetic)

    def store(self, pop: Population | None = None) -> NoiseStore:
        """The :class:`NoiseStore` of ``pop`` (default: this step's), made once per step."""
        pop = pop or self.ask()
        if self._store is None or self._store.pop != pop:
            self._store = NoiseStore(pop, {n: self.specs[n] for n in self.trainable}, self.lowrank,
                                     {n: self.params[n].device for n in self.trainable},
                                     self.config.noise_cache_mib * 2**20, self._sigma_scales,
                                     self.rule.noise_overlays())
        return self._store

    def noise(self, name: str, pop: Population, lo: int, hi: int) -> Noise:
        """Perturbation of ``name`` for members [lo, hi) (whole pairs) of ``pop``."""
        return self.store(pop).noise(name, lo, hi)

    # -- shape ---------------------------------------------------------------------------
    def shape(self, pop: Population, fitness, weights=None) -> Tensor:
        """Raw fitness (P,) or (P, G) -> shaped (P,); NaN/inf count as the worst score."""
        return shape_fitness(fitness, pop.size, self.shaping, self.config.group_fitness, weights,
                             pop.baseline_every)[0]

    # -- update --------------------------------------------------------------------------
    def _check_pop(self, pop: Population) -> None:
        if pop.step != self.step:
            raise ValueError(f"got the population of step {pop.step}, but the strategy is at step {self.step}")

    def _check_applied(self, store: NoiseStore) -> None:
        """No parameter may move from noise that never reached the forward."""
        missing = store.unapplied()
        if missing:
            raise ValueError(
                f"the perturbed forwards of step {store.pop.step} never applied the noise of {missing}, so an "
                "update would move them along directions the fitness never saw. Likely causes: the weight is "
                "used outside its module's forward (e.g. F.linear(x, self.lin.weight)), a fused fast path "
                "bypassed the module, or the parameter is not used by this fitness at all. Fix: call the module "
                "itself, or exclude it, e.g. es_map={" + repr(missing[0]) + ": 'excluded'}")

    def estimate(self, pop: Population, shaped: Tensor, consume: bool = False,
                 negate: bool = False, names: list[str] | None = None) -> dict[str, Tensor]:
        """ĝ per trainable parameter (or per one of ``names``) from shaped fitness (P,); −ĝ, exactly,
        with ``negate``."""
        store = self.store(pop)
        self._check_applied(store)
        shaped = torch.as_tensor(shaped, dtype=torch.float32).reshape(-1)
        if shaped.numel() != pop.size:
            raise ValueError(f"shaped fitness must be {pop.size} values (one per member), "
                             f"got shape {tuple(shaped.shape)}")
        # A non-finite shaped value (a custom shaping's bug) moves nothing: zeroed on the device,
        # since raising would need the host to read it (a synchronisation every step).
        shaped = torch.where(torch.isfinite(shaped), shaped, torch.zeros_like(shaped))
        return estimate(store, shaped, self.trainable if names is None else names, self.config.update_chunk, self.config.estimator == "sign",
                        consume=consume, fixed=self.config.deterministic, precision=self._precisions,
                        negate=negate)

    def update(self, pop: Population, shaped: Tensor, names: list[str] | None = None) -> StepMetrics:
        """Apply the update of ``pop`` from shaped fitness (what every replica runs).

        ``names``: move only these parameters (a part of the update: the workers of one node that share
        their weights each replay one part, ``distributed/shared_weights.py``). Each moves exactly as in
        the whole update, since a parameter's estimate and step depend on its own noise and state only;
        a rule whose step couples parameters (``by_parameter`` False) refuses. ``grad_norm`` is then the part's."""
        self._check_pop(pop)
        if names is not None:
            self._check_part(names)
        store = self.store(pop)
        self.rule.prepare(pop, {n: coefficient(store, n) for n in self.trainable}, self.lowrank)
        # a rule that steps −ĝ (a torch optimizer's .grad) gets it from the estimate itself: no negation pass
        grads = self.estimate(pop, shaped, consume=True, negate=getattr(self.rule, "takes_negated_estimate", False),
                              names=names)
        self._store = None
        self._respond_to_ties(shaped)
        grad_norm = (torch.linalg.vector_norm(torch.stack(torch._foreach_norm([g.float() for g in grads.values()])))
                     if grads else torch.zeros(()))  # a part may be empty (more sharing workers than parameters)
        factor = self.lr_factor(self.step)
        self.rule.apply(grads, factor)
        self.step += 1
        return StepMetrics({"step": self.step, "grad_norm": grad_norm, "sigma": pop.sigma,
                            "lr": self.rule.lrs(self.lr_factor(self.step))[0], **self.rule.metrics()})

    def _check_part(self, names: list[str]) -> None:
        if not getattr(self.rule, "by_parameter", False):
            raise ValueError(f"{type(self.rule).__name__} cannot move a part of the parameters alone (its step "
                             "couples them, or it did not say: by_parameter = True)")
        unknown = sorted(set(names) - set(self.trainable))
        if unknown:
            raise ValueError(f"names must be trainable parameters; not: {unknown[:3]}")

    def _respond_to_ties(self, shaped: Tensor) -> None:
        """Widen the next step's σ when every antithetic pair tied (shaped fitness equal within each
        pair: the estimate is zero) -- with independent members, when all of them tied; reset it
        after a step that did not. One host read, only if on."""
        growth = self.config.tie_sigma_growth
        if growth == 1.0:
            return
        groups = torch.as_tensor(shaped).reshape(-1, 2) if self.config.antithetic else \
            torch.as_tensor(shaped).reshape(1, -1)                               # (P/2, 2) or (1, P)
        tied = bool((groups == groups[:, :1]).all())
        self.tie_scale = min(self.tie_scale * growth, MAX_TIE_SCALE) if tied else 1.0

    def gradient_estimate(self, fitness, pop: Population | None = None, weights=None) -> dict[str, Tensor]:
        """Raw ES estimate ĝ = (1/(Nσ)) Σ f_i ε_i of ∇ E[fitness], per parameter name; no update."""
        pop = pop or self.ask()
        return self.estimate(pop, self.shape(pop, fitness, weights))

    def tell(self, fitness, pop: Population | None = None, weights=None) -> StepMetrics:
        """Shape ``fitness`` (P,) or (P, G) and update: ``update(pop, shape(pop, fitness))``."""
        pop = pop or self.ask()
        self._check_pop(pop)
        raw = check_fitness(fitness, pop.size)
        metrics = self.update(pop, self.shape(pop, raw, weights))
        return metrics | fitness_stats(raw)

    def set_step(self, step: int) -> None:
        """Move to ``step`` and forget the cached noise store (it belongs to another step).

        For code that ran a step's update outside :meth:`update`, e.g. a replayed CUDA graph
        (``nn/graph.py``), or that must roll one back."""
        self.step = int(step)
        self._store = None

    # -- checkpointing -------------------------------------------------------------------
    def state_dict(self) -> dict:
        sd = {"step": self.step, "rule": self.rule.state_dict(), "tie_scale": self.tie_scale}
        if self.schedule_origin:  # only after a restart: earlier checkpoints stay as they were
            sd["schedule_origin"] = self.schedule_origin
        return sd

    def load_state_dict(self, sd: dict) -> None:
        self.step = int(sd["step"])
        self.rule.load_state_dict(sd["rule"])
        self.tie_scale = float(sd.get("tie_scale", 1.0))
        self.schedule_origin = int(sd.get("schedule_origin", 0))
        self._store = None
