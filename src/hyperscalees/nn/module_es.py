"""ES for any ``nn.Module``: ``es = EGGROLL(model, ...)``, ``with es.perturbed(): model(x)``, ``es.tell(f)``.

The facade owns nothing but a strategy (the maths) and the model it updates in place;
it never copies weights per member. Inputs of a perturbed forward are member-major:
the batch dimension holds ``members`` groups, group i belonging to member lo + i.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable

import torch
from torch import Tensor, nn

from ..noise.population import Population
from ..strategies.base import AbstractStrategy
from ..strategies.config import ESConfig
from ..strategies.eggroll import EggRollStrategy
from ..strategies.open_es import OpenESStrategy
from .es_map import derive_specs, owned_parameters
from .perturb import perturbation


class AbstractModuleES:
    """Module-level ES; concrete classes pick the strategy."""

    strategy_cls: type[AbstractStrategy]

    def __init__(self, model: nn.Module, population: int = 256, sigma: float = 0.01, rank: int = 1,
                 lr: float = 0.01, optimizer: str = "adam", seed: int = 0, shaping="centered_rank",
                 es_map: dict | None = None, lr_schedule: Callable[[int], float] | None = None,
                 sigma_schedule: Callable[[int], float] | None = None, **config):
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        self.model = model
        shaping_name = shaping if isinstance(shaping, str) else "raw"
        factory = None
        if not isinstance(optimizer, str):  # a torch.optim class or any params -> optimizer callable
            factory = optimizer if not isinstance(optimizer, type) else (lambda ps, cls=optimizer: cls(ps, lr=lr))
            optimizer = "custom"
        self.config = ESConfig(population=population, sigma=sigma, rank=rank, lr=lr, optimizer=optimizer,
                               seed=seed, shaping=shaping_name, **config)
        self.specs = derive_specs(model, es_map)
        params = {name: p for _, _, name, p in owned_parameters(model)}
        self.strategy = self.strategy_cls(params, self.specs, self.config, lr_schedule=lr_schedule,
                                          sigma_schedule=sigma_schedule, shaping=shaping,
                                          optimizer_factory=factory)

    @property
    def step(self) -> int:
        return self.strategy.step

    @property
    def population(self) -> int:
        return self.config.population

    def ask(self) -> Population:
        return self.strategy.ask()

    @contextmanager
    def perturbed(self, members: slice | tuple[int, int] | None = None):
        """Run members ``members`` (default: all) of the current population in one forward."""
        lo, hi = _member_range(members, self.config.population)
        with perturbation(self.model, self.strategy, self.ask(), lo, hi):
            yield self

    def evaluate(self, fitness_fn: Callable[[nn.Module, int, int], Tensor], chunk: int | None = None) -> Tensor:
        """Fitness of the whole population, evaluated ``chunk`` members at a time.

        ``fitness_fn(model, lo, hi)`` runs the perturbed model on member-major inputs for
        members [lo, hi) and returns their (hi - lo,) scores.
        """
        n = self.config.population
        chunk = n if chunk is None else chunk
        if chunk < 2 or chunk % 2:
            raise ValueError(f"chunk must be an even number >= 2 (whole antithetic pairs), got {chunk}")
        out = []
        for lo in range(0, n, chunk):
            hi = min(n, lo + chunk)
            with self.perturbed((lo, hi)):
                f = torch.as_tensor(fitness_fn(self.model, lo, hi)).reshape(-1)
            if f.numel() != hi - lo:
                raise ValueError(f"fitness_fn returned {f.numel()} scores for members [{lo}, {hi})")
            out.append(f.float().cpu())
        return torch.cat(out)

    def tell(self, fitness) -> dict[str, float]:
        """Shape ``fitness`` (population,), higher is better, and update the model in place."""
        return self.strategy.tell(fitness)

    def gradient_estimate(self, fitness) -> dict[str, Tensor]:
        """The raw ES estimate of ∇ E[fitness] per parameter name, without updating."""
        return self.strategy.gradient_estimate(fitness)

    def state_dict(self) -> dict:
        return {"model": {k: v.detach().clone() for k, v in self.model.state_dict().items()},
                "strategy": self.strategy.state_dict()}

    def load_state_dict(self, sd: dict) -> None:
        self.model.load_state_dict(sd["model"])
        self.strategy.load_state_dict(sd["strategy"])


def _member_range(members, population: int) -> tuple[int, int]:
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

    strategy_cls = EggRollStrategy


class OpenES(AbstractModuleES):
    """Full-rank ES with the same API (the naive baseline)."""

    strategy_cls = OpenESStrategy
