"""OpenES: naive full-rank ES with the same API -- the baseline EGGROLL is measured against."""
from .base import AbstractStrategy
from .param_spec import ParamSpec


class OpenESStrategy(AbstractStrategy):
    name = "open_es"

    def is_lowrank(self, spec: ParamSpec) -> bool:
        return False
