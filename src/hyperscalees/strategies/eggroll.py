"""EGGROLL: rank-r noise on matrices and embeddings, full-rank noise on the rest."""
from .base import AbstractStrategy
from .param_spec import ESMode, ParamSpec


class EggRollStrategy(AbstractStrategy):
    name = "eggroll"

    def is_lowrank(self, spec: ParamSpec) -> bool:
        return spec.mode in (ESMode.MM_PARAM, ESMode.EMB_PARAM)
