"""Update rules: how ES estimates move the weights. ``RULES`` maps ``ESConfig.update_rule`` to a class."""
from .base import AbstractUpdateRule
from .torch_optim import OptimizerGroup, OptimizerRule, build_optimizer

RULES: dict[str, type[AbstractUpdateRule]] = {"optimizer": OptimizerRule}

__all__ = ["AbstractUpdateRule", "OptimizerGroup", "OptimizerRule", "RULES", "build_optimizer"]
