"""ES for any ``nn.Module``: ``es = EGGROLL(model, ...)``, ``with es.perturbed(): model(x)``, ``es.tell(f)``.

The facade owns nothing but a strategy (the maths) and the model it updates in place;
it never copies weights per member. Inputs of a perturbed forward are member-major:
the batch dimension holds ``members`` groups, group i belonging to member lo + i.
Evaluating a population chunk by chunk is a backend's job (``hyperscalees.evaluate``,
``hyperscalees.distributed.LocalBackend``).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable

import torch
from torch import Tensor, nn

from ..noise.population import Population
from ..noise.store import NoiseStore
from ..strategies.base import AbstractStrategy
from ..strategies.config import ESConfig
from ..strategies.eggroll import EGGROLLStrategy
from ..strategies.metrics import StepMetrics
from ..strategies.open_es import OpenESStrategy
from .es_map import derive_specs, owned_parameters
from .perturb import perturbation


class AbstractModuleES:
    """Module-level ES; concrete classes pick the strategy.

    ``groups``: torch-style parameter groups ``[{"params": [names or globs], "lr": .., "weight_decay": ..,
    "sigma_scale": ..}]``; ``update_rule``: a name in ``strategies.rules.RULES`` or a class or factory
    ``(params, groups, config) -> rule`` replacing the torch.optim rule; ``fallback_mib``: MiB of
    per-member parameter copies the generic vmap layer (``nn/layers/fallback.py``) may make per forward.
    """

    strategy_cls: type[AbstractStrategy]

    def __init__(self, model: nn.Module, population: int = 256, sigma: float = 0.01, rank: int = 1,
                 lr: float = 0.01, optimizer: str = "adam", seed: int = 0, shaping="centered_rank",
                 es_map: dict | None = None, lr_schedule: Callable[[int], float] | None = None,
                 sigma_schedule: Callable[[int], float] | None = None, groups: list[dict] | None = None,
                 update_rule: str | Callable | None = None, fallback_mib: float = 64.0, **config):
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not fallback_mib >= 0:
            raise ValueError(f"fallback_mib must be >= 0, got {fallback_mib!r}")
        self.model = model
        self.fallback_mib = float(fallback_mib)  # MiB of per-member parameter copies the vmap layer may make
        shaping_name = shaping if isinstance(shaping, str) else "raw"
        factory = None
        if not isinstance(optimizer, str):  # a torch.optim class or any param groups -> optimizer callable
            factory = optimizer if not isinstance(optimizer, type) else (lambda ps, cls=optimizer: cls(ps, lr=lr))
            optimizer = "custom"
        if isinstance(update_rule, str):  # a name in strategies.rules.RULES
            config["update_rule"], update_rule = update_rule, None
        elif update_rule is not None:
            config["update_rule"] = "custom"
        self.config = ESConfig(population=population, sigma=sigma, rank=rank, lr=lr, optimizer=optimizer,
                               seed=seed, shaping=shaping_name, **config)
        self.specs = derive_specs(model, es_map)
        params = {name: p for _, _, name, p in owned_parameters(model)}
        self.strategy = self.strategy_cls(params, self.specs, self.config, lr_schedule=lr_schedule,
                                          sigma_schedule=sigma_schedule, shaping=shaping,
                                          optimizer_factory=factory, groups=groups, update_rule=update_rule)

    @property
    def step(self) -> int:
        return self.strategy.step

    @property
    def population(self) -> int:
        return self.config.population

    def ask(self) -> Population:
        return self.strategy.ask()

    def store(self) -> NoiseStore:
        """This step's noise store (what perturbed forwards read and the update consumes)."""
        return self.strategy.store(self.ask())

    @contextmanager
    def perturbed(self, members: slice | tuple[int, int] | None = None, repeated: bool = False):
        """Run members ``members`` (default: all) of the current population in one forward.

        ``repeated``: the block will run the model many times (a generate, an episode), so layers
        prepare their step plans on their first call instead of their second (see :func:`perturbation`).
        """
        lo, hi = member_range(members, self.config.population)
        with perturbation(self.model, self.store(), lo, hi, self.fallback_mib, repeated=repeated):
            yield self

    @contextmanager
    def materialized(self, member: int):
        """Write member ``member``'s weights W + E_i into the model, exactly; W is restored on exit.

        The dense twin of the batched forward: ``model(x)`` inside the block is what row group
        ``member`` computes inside :meth:`perturbed` (the same maths, another arithmetic path).
        It also exports a member (``save_pretrained`` inside the block). W + E_i is summed in
        float64 and rounded once to the parameter's dtype; the restore is a copy of W, bit for bit.
        """
        store = self.store()
        if isinstance(member, bool) or not isinstance(member, int) or not 0 <= member < store.pop.size:
            raise ValueError(f"member must be an index in [0, {store.pop.size}), got {member!r}")
        params = {name: p for _, _, name, p in owned_parameters(self.model)}
        ints = [n for n in store.specs if not params[n].is_floating_point()]
        if ints:
            raise ValueError(f"materialized() writes float noise; {ints[0]} is {params[ints[0]].dtype} "
                             "(integer models: evaluate the member through perturbed(), one member wide)")
        saved = {}
        try:
            with torch.no_grad():
                for name in store.specs:
                    p = params[name]
                    saved[name] = p.detach().clone()
                    p.copy_((p.double() + member_delta(store, name, member)).to(p.dtype))
            yield self.model
        finally:
            with torch.no_grad():
                for name, w in saved.items():
                    params[name].copy_(w)

    def shape(self, fitness, weights=None) -> Tensor:
        """Raw fitness (population,) or (population, G) -> shaped (population,), for :meth:`update`."""
        return self.strategy.shape(self.ask(), fitness, weights)

    def update(self, shaped, names: list[str] | None = None) -> StepMetrics:
        """Move the model by shaped fitness (what every replica of a distributed run applies);
        ``names``: only these parameters, exactly as the whole update moves them (``strategy.update``)."""
        return self.strategy.update(self.ask(), shaped, names)

    def tell(self, fitness, weights=None) -> StepMetrics:
        """Shape ``fitness`` (population,) or (population, G), higher is better, and update the model.

        The metrics are device scalars until read (strategies/metrics.py): a step that nobody
        inspects never makes the host wait for the device."""
        return self.strategy.tell(fitness, weights=weights)

    def gradient_estimate(self, fitness, weights=None) -> dict[str, Tensor]:
        """The raw ES estimate of ∇ E[fitness] per parameter name, without updating."""
        return self.strategy.gradient_estimate(fitness, weights=weights)

    def state_dict(self) -> dict:
        return {"model": {k: v.detach().clone() for k, v in self.model.state_dict().items()},
                "strategy": self.strategy.state_dict()}

    def load_state_dict(self, sd: dict) -> None:
        self.model.load_state_dict(sd["model"])
        self.strategy.load_state_dict(sd["strategy"])


def member_delta(store: NoiseStore, name: str, member: int) -> Tensor:
    """Member ``member``'s perturbation of ``name`` in the parameter's stored shape, in float64:
    s·(σ/√r)·A Bᵀ for a low-rank parameter, s·σ·ε for a full-rank one."""
    g = store.pop.per_draw
    first = g * (member // g)
    n = store.noise(name, first, first + g)
    sign = n.signs[0, member % g].double()
    unit = n.a[0].double() @ n.b[0].double().T if n.lowrank else n.eps[0].double()
    return sign * n.scale * unit


def member_range(members, population: int) -> tuple[int, int]:
    """(lo, hi) of ``members``: None (all), a slice with step 1, or a (lo, hi) pair."""
    if members is None:
        return 0, population
    if isinstance(members, slice):
        lo, hi, step = members.indices(population)
        if step != 1:
            raise ValueError(f"members slice must have step 1, got {step}")
        return lo, hi
    lo, hi = members
    return int(lo), int(hi)


class EGGROLL(AbstractModuleES):
    """Low-rank ES (arXiv:2511.16652) for any module."""

    strategy_cls = EGGROLLStrategy


class OpenES(AbstractModuleES):
    """Full-rank ES with the same API (the naive baseline)."""

    strategy_cls = OpenESStrategy


def facade_for(name: str) -> type[AbstractModuleES]:
    """The module-level ES class of the strategy registered as ``name`` (``strategies.STRATEGIES``):
    the public class where there is one (EGGROLL, OpenES), else a facade made for it."""
    from ..strategies import STRATEGIES
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; choose one of {sorted(STRATEGIES)}")
    for cls in AbstractModuleES.__subclasses__():
        if cls.strategy_cls is STRATEGIES[name]:
            return cls
    return type(f"ModuleES_{name}", (AbstractModuleES,), {"strategy_cls": STRATEGIES[name]})
