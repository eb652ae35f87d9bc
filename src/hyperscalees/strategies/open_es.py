"""OpenES: naive full-rank ES with the same API -- the baseline EGGROLL is measured against."""
from ..noise.spec import ParamSpec
from .base import AbstractStrategy


class OpenESStrategy(AbstractStrategy):
    name = "open_es"

    def is_lowrank(self, spec: ParamSpec) -> bool:
        return False
