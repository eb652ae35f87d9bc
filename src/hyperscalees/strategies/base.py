"""Ask/tell over named parameters: the state every strategy shares.

A strategy holds references to parameters (torch.optim's shape), never copies per
member. ``ask`` returns a :class:`Population` (a few scalars); ``tell`` shapes the
fitness, turns it into an ES estimate per parameter, writes ``-ĝ`` into ``.grad`` of
fp32 master weights and steps a stock optimizer. Concrete strategies only choose which
parameters get low-rank noise.
"""
from __future__ import annotations

import copy
import math
from typing import Callable

import torch
from torch import Tensor

from ..noise.population import Population
from .config import ESConfig
from .noise_terms import Noise, gradient, member_noise, noise_nbytes
from .optim import OptimizerGroup, build_optimizer
from .param_spec import ESMode, ParamSpec
from .shaping import check_fitness, get_shaping, sanitize

LOW_PRECISION = (torch.float16, torch.bfloat16)
Schedule = Callable[[int], float]


class AbstractStrategy:
    """Shared ask/tell machinery; subclasses set :meth:`is_lowrank`."""

    name = "abstract"

    def __init__(self, params: dict[str, Tensor], specs: dict[str, ParamSpec], config: ESConfig,
                 lr_schedule: Schedule | None = None, sigma_schedule: Schedule | None = None,
                 shaping=None, optimizer_factory: Callable | None = None):
        self.config = config
        self.params = dict(params)
        self.specs = dict(specs)
        self.step = 0
        self.shaping = get_shaping(shaping if shaping is not None else config.shaping)
        self.sigma_schedule = sigma_schedule
        self.trainable = [n for n, s in self.specs.items() if s.mode != ESMode.EXCLUDED]
        # fp32 masters keep tiny ES steps from vanishing in bf16/fp16 rounding
        self.masters = {n: (p.detach().float().clone() if p.dtype in LOW_PRECISION else p) for n, p in
                        ((n, self.params[n]) for n in self.trainable)}
        masters = [self.masters[n] for n in self.trainable]
        # any torch.optim class (or callable params -> optimizer) can replace the named ones
        self.optimizer = (OptimizerGroup([optimizer_factory(masters)]) if optimizer_factory
                          else build_optimizer(masters, config))
        decay = config.lr_decay
        self._lr_factor = (lambda s: decay ** s * (lr_schedule(s) if lr_schedule else 1.0))
        self._base_lrs = [g["lr"] for g in self.optimizer.param_groups]
        self._apply_lr()
        self._clear_cache()

    # -- which parameters get which noise ------------------------------------------------
    def is_lowrank(self, spec: ParamSpec) -> bool:
        raise NotImplementedError

    # -- ask -----------------------------------------------------------------------------
    def sigma_at(self, step: int) -> float:
        s = self.config.sigma * self.config.sigma_decay ** step
        return s * self.sigma_schedule(step) if self.sigma_schedule else s

    def ask(self) -> Population:
        c = self.config
        return Population(step=self.step, seed=c.seed, size=c.population, sigma=self.sigma_at(self.step),
                          rank=c.rank, noise_reuse=c.noise_reuse, distribution=c.distribution,
                          baseline_every=c.baseline_every)

    def noise(self, name: str, pop: Population, lo: int, hi: int) -> Noise:
        """Perturbation of ``name`` for members [lo, hi).

        While the budget allows, a parameter's whole-population draw is made once per step,
        served to every evaluation chunk as a slice and reused by ``tell``: few large ops
        instead of many small ones, and no regeneration. Past the budget, chunks are drawn
        on their own and ``tell`` regenerates, so memory stays bounded for any population.
        """
        whole = self._whole_noise(name, pop)
        if whole is not None:
            return whole if (lo, hi) == (0, pop.size) else whole.slice(lo // 2, hi // 2)
        spec = self.specs[name]
        return member_noise(spec, pop, lo, hi, self.is_lowrank(spec), self.params[name].device)

    def _whole_noise(self, name: str, pop: Population) -> Noise | None:
        if self._cache_pop != pop:
            self._clear_cache(pop)
        if name not in self._cache:
            spec = self.specs[name]
            nbytes = noise_nbytes(spec, pop, self.is_lowrank(spec))
            if self._cache_bytes + nbytes > self.config.noise_cache_mib * 2**20:
                return None
            self._cache[name] = member_noise(spec, pop, 0, pop.size, self.is_lowrank(spec), self.params[name].device)
            self._cache_bytes += nbytes
        return self._cache[name]

    def cached_noise(self, name: str, pop: Population) -> Noise | None:
        """The whole-population draw of ``name`` for this step if it fits the cache budget."""
        return self._whole_noise(name, pop)

    def memo(self, pop: Population, key, nbytes: int, make: Callable[[], object]):
        """A value derived from this step's noise (a layer's GEMM plan), made once per step.

        Made only when asked for a second time in the step (a later chunk, or the next
        environment step of a policy): a value used once would only take cache budget
        from the noise itself. Dropped with the noise cache and counted against the same
        ``noise_cache_mib`` budget; returns None when not made, and the caller works without.
        """
        if self._cache_pop != pop:
            self._clear_cache(pop)
        if key not in self._memo:
            if key not in self._memo_asked:
                self._memo_asked.add(key)
                return None
            if self._cache_bytes + nbytes > self.config.noise_cache_mib * 2**20:
                return None
            self._memo[key] = make()
            self._cache_bytes += nbytes
        return self._memo[key]

    def _clear_cache(self, pop: Population | None = None) -> None:
        self._cache, self._memo, self._memo_asked, self._cache_pop, self._cache_bytes = {}, {}, set(), pop, 0

    # -- tell ----------------------------------------------------------------------------
    def shape_fitness(self, fitness, pop: Population) -> tuple[Tensor, int]:
        f = check_fitness(fitness, pop.size)
        f, n_bad = sanitize(f)
        if pop.baseline_every:
            g = f.view(-1, pop.baseline_every)
            f = (g - g[:, :2].mean(dim=1, keepdim=True)).reshape(-1)
        return self.shaping(f), n_bad

    def gradient_estimate(self, fitness, pop: Population | None = None) -> dict[str, Tensor]:
        """Raw ES estimate ĝ = (1/(Nσ)) Σ f_i ε_i of ∇ E[fitness], per parameter name."""
        pop = pop or self.ask()
        shaped, _ = self.shape_fitness(fitness, pop)
        return self._estimate(shaped, pop)

    def _estimate(self, shaped: Tensor, pop: Population, consume: bool = False) -> dict[str, Tensor]:
        """ĝ per parameter; with ``consume`` each cached draw is dropped once used, so the
        cache shrinks while the estimates grow and the two never peak together."""
        sign_update = self.config.update == "sign"
        cache = self._cache if self._cache_pop == pop else {}
        out = {}
        for n in self.trainable:
            spec = self.specs[n]
            cached = cache.pop(n, None) if consume else cache.get(n)
            out[n] = gradient(spec, pop, shaped, self.is_lowrank(spec), self.params[n].device,
                              self.config.update_chunk, sign_update, cached)
            del cached
        return out

    def tell(self, fitness, pop: Population | None = None) -> dict[str, float]:
        pop = pop or self.ask()
        if pop.step != self.step:
            raise ValueError(f"tell got the population of step {pop.step}, but the strategy is at step {self.step}")
        raw = check_fitness(fitness, pop.size)
        shaped, n_bad = self.shape_fitness(raw, pop)
        grads = self._estimate(shaped, pop, consume=True)
        self._clear_cache()
        grad_norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads.values()])))
        for n in list(grads):
            # the estimate is a fresh tensor: negate it in place and hand it over, no copy
            g = grads.pop(n).neg_()
            self.masters[n].grad = g if g.dtype == self.masters[n].dtype else g.to(self.masters[n].dtype)
        del g
        self.optimizer.step()
        self.optimizer.zero_grad()  # set_to_none: the estimates are freed before the next forward
        with torch.no_grad():
            for n in self.trainable:
                if self.masters[n] is not self.params[n]:
                    self.params[n].copy_(self.masters[n])
        self.step += 1
        self._apply_lr()
        self._clear_cache()
        finite = raw[torch.isfinite(raw)]
        return {"step": self.step, "fitness_mean": float(finite.mean()) if finite.numel() else math.nan,
                "fitness_max": float(finite.max()) if finite.numel() else math.nan,
                "grad_norm": grad_norm,
                "sigma": pop.sigma, "lr": self.optimizer.param_groups[0]["lr"], "nonfinite": n_bad}

    def _apply_lr(self):
        f = self._lr_factor(self.step)
        for g, base in zip(self.optimizer.param_groups, self._base_lrs):
            g["lr"] = base * f

    # -- checkpointing -------------------------------------------------------------------
    def state_dict(self) -> dict:
        # torch optimizers hand out live references to their moments: copy so the snapshot stays put
        return {"step": self.step, "optimizer": copy.deepcopy(self.optimizer.state_dict()),
                "masters": {n: m.detach().clone() for n, m in self.masters.items() if m is not self.params[n]}}

    def load_state_dict(self, sd: dict) -> None:
        self.step = int(sd["step"])
        self.optimizer.load_state_dict(sd["optimizer"])
        with torch.no_grad():
            for n, m in sd.get("masters", {}).items():
                self.masters[n].copy_(m)
        self._apply_lr()
        self._clear_cache()
