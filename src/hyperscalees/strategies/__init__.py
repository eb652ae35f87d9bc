"""Ask / shape / update ES algorithms over named parameters; they never import ``nn``."""
from ..noise.spec import ESMode, ParamSpec
from .base import AbstractStrategy
from .config import ESConfig
from .eggroll import EggRollStrategy
from .groups import ParamGroup
from .open_es import OpenESStrategy
from .rules import RULES, AbstractUpdateRule, OptimizerRule
from .metrics import StepMetrics
from .shaping import SHAPINGS, centered_rank, group_normalize, pair_sign, raw, z_score

REGISTRY = {"eggroll": EggRollStrategy, "open_es": OpenESStrategy}

__all__ = ["AbstractStrategy", "AbstractUpdateRule", "ESConfig", "ESMode", "EggRollStrategy", "OpenESStrategy",
           "OptimizerRule", "ParamGroup", "ParamSpec", "REGISTRY", "RULES", "SHAPINGS", "StepMetrics", "centered_rank",
           "group_normalize", "pair_sign", "raw", "z_score"]
