"""Update rules: how ES estimates move the weights. ``RULES`` maps ``ESConfig.update_rule`` to a class."""
from .base import AbstractUpdateRule
from .integer import INTEGER_RULES, AbstractIntegerRule, AdamWRule, MuonRule, ThresholdSGDRule, ZTestRule
from .torch_optim import OptimizerGroup, OptimizerRule, build_optimizer

RULES: dict[str, type[AbstractUpdateRule]] = {"optimizer": OptimizerRule, **INTEGER_RULES}

__all__ = ["AbstractIntegerRule", "AbstractUpdateRule", "AdamWRule", "INTEGER_RULES", "MuonRule", "ThresholdSGDRule",
           "ZTestRule", "OptimizerGroup", "OptimizerRule", "RULES", "build_optimizer"]
