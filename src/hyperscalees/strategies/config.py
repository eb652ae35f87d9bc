"""The one config every strategy takes: the paper's hyper-parameters, validated up front."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..noise.distributions import check_distribution
from ..noise.population import validate_population_args
from ..ops.precision import check_precision
from .rules import RULES
from .rules.optimizers import OPTIMIZERS
from .shaping import check_group_fitness

ESTIMATORS = ("mean", "sign")
PAIR_SHAPINGS = ("pair_sign", "ternary", "pair_sign_adaptive", "pair_sign_filtered")  # read pair differences


@dataclass(frozen=True)
class ESConfig:
    population: int = 256
    sigma: float = 0.01
    rank: int = 1
    lr: float = 0.01
    optimizer: str = "adam"
    seed: int = 0
    shaping: str = "centered_rank"
    weight_decay: float = 0.0
    momentum: float = 0.0          # sgd only
    lr_decay: float = 1.0          # multiplicative per step (paper App. N.4)
    sigma_decay: float = 1.0       # multiplicative per step
    noise_reuse: int = 1           # steps sharing one draw; 0 = forever (HyperscaleES default)
    distribution: str = "gaussian"
    estimator: str = "mean"        # "sign": AltEGGROLL's sign(A) sign(B)ᵀ estimate instead of the mean
    baseline_every: int = 0        # >0: members i % k in {0,1} are unperturbed baselines
    update_chunk: int = 4096       # pairs regenerated at once in tell(); bounds its memory
    noise_cache_mib: float = 64.0  # whole-step noise kept for chunks and tell(); 0 = always regenerate
    group_fitness: str = "mean"    # (P, G) fitness: "mean" over G then shape, or "per_group" shape each column
    update_rule: str = "optimizer" # how estimates move the weights (strategies.rules.RULES)
    deterministic: bool = True     # update bits independent of the CPU thread count (its GEMMs on one thread)
    update_precision: str = "auto" # operands of the update GEMM (ops.precision): auto|fp32|tf32|bf16|fp16
    # A step whose antithetic twins all score the same moves nothing (e.g. a policy saturated so far
    # that σ·ε changes no action): the next step's σ is multiplied by this, compounding while every
    # pair keeps tying, and back to 1x after a step that does not. 1: off. Other values read one
    # bool from the device per step (a host sync), so it is off unless asked for.
    tie_sigma_growth: float = 1.0
    # bf16/fp16 parameters are stepped through fp32 master copies (the rule's state, checkpointed);
    # False adds each step to the rounded weights instead, and metrics["update_landed"] shows the loss.
    fp32_masters: bool = True
    # False: every member draws its own noise (odd populations allowed) instead of antithetic pairs
    # sharing one with opposite signs; shapings and features defined on pairs are refused then.
    antithetic: bool = field(default=True, metadata={"help": (
        "members 2k and 2k+1 share one draw with opposite signs; --no-antithetic draws every member "
        "independently (odd populations allowed; the pair_sign shapings refused; tie_sigma_growth then watches the "
        "whole population tying)")})

    def __post_init__(self):
        validate_population_args(self.population, self.sigma, self.rank, self.noise_reuse, self.antithetic)
        if not self.antithetic:
            check_independent(self)
        if isinstance(self.seed, int) and not -(1 << 63) <= self.seed < (1 << 63):  # torch seeds are 64-bit
            raise ValueError(f"seed must fit in 64 bits (from {-(1 << 63)} to {(1 << 63) - 1}), got {self.seed!r}")
        check_distribution(self.distribution)
        if self.optimizer not in (*OPTIMIZERS, "custom"):  # custom: a torch.optim class or factory was passed
            raise ValueError(f"unknown optimizer {self.optimizer!r}; choose one of {sorted(OPTIMIZERS)}")
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"unknown estimator {self.estimator!r}; choose one of {ESTIMATORS}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be a finite number > 0, got {self.lr!r}")
        if not 0 <= self.momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum!r}")
        for name in ("lr_decay", "sigma_decay"):
            v = getattr(self, name)
            if not 0 < v <= 1:
                raise ValueError(f"{name} must be in (0, 1], got {v!r}")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"weight_decay must be a finite number >= 0, got {self.weight_decay!r}")
        if not (math.isfinite(self.noise_cache_mib) and self.noise_cache_mib >= 0):
            raise ValueError(f"noise_cache_mib must be a finite number >= 0, got {self.noise_cache_mib!r}")
        if self.update_chunk < 1:
            raise ValueError(f"update_chunk must be >= 1, got {self.update_chunk!r}")
        check_group_fitness(self.group_fitness)
        check_precision(self.update_precision)
        if self.update_rule not in (*RULES, "custom"):  # custom: an update rule class or factory was passed
            raise ValueError(f"unknown update_rule {self.update_rule!r}; choose one of {sorted(RULES)}")
        if not (math.isfinite(self.tie_sigma_growth) and self.tie_sigma_growth >= 1):
            raise ValueError(f"tie_sigma_growth must be a finite number >= 1, got {self.tie_sigma_growth!r}")


def check_independent(cfg: ESConfig) -> None:
    """Settings defined on antithetic pairs have no meaning with independent members: refuse them."""
    if isinstance(cfg.shaping, str) and cfg.shaping in PAIR_SHAPINGS:
        raise ValueError(f"shaping {cfg.shaping!r} compares the two members of an antithetic pair; with "
                         "antithetic=False there are no pairs: use centered_rank, z_score or raw")
