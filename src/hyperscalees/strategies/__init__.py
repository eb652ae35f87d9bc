"""Ask/tell ES algorithms over named parameters; they never import ``nn``."""
from .base import AbstractStrategy
from .config import ESConfig
from .eggroll import EggRollStrategy
from .open_es import OpenESStrategy
from .param_spec import ESMode, ParamSpec
from .shaping import SHAPINGS, centered_rank, group_normalize, pair_sign, raw, z_score

REGISTRY = {"eggroll": EggRollStrategy, "open_es": OpenESStrategy}

__all__ = ["AbstractStrategy", "ESConfig", "ESMode", "EggRollStrategy", "OpenESStrategy", "ParamSpec",
           "REGISTRY", "SHAPINGS", "centered_rank", "group_normalize", "pair_sign", "raw", "z_score"]
