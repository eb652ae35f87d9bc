"""Ask / shape / update ES algorithms over named parameters; they never import ``nn``."""
from ..noise.spec import ESMode, ParamSpec
from .base import AbstractStrategy
from .config import ESConfig
from .eggroll import EGGROLLStrategy
from .groups import ParamGroup
from .open_es import OpenESStrategy
from .rules import RULES, AbstractUpdateRule, OptimizerRule
from .metrics import StepMetrics
from .shaping import SHAPINGS, centered_rank, group_normalize, pair_sign, raw, z_score

STRATEGIES = {s.name: s for s in (EGGROLLStrategy, OpenESStrategy)}  # the one registry of strategies

__all__ = ["AbstractStrategy", "AbstractUpdateRule", "ESConfig", "ESMode", "EGGROLLStrategy", "OpenESStrategy",
           "OptimizerRule", "ParamGroup", "ParamSpec", "STRATEGIES", "RULES", "SHAPINGS", "StepMetrics", "centered_rank",
           "group_normalize", "pair_sign", "raw", "z_score"]
