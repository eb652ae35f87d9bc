"""EGGROLL: rank-r noise on matrices and embeddings, full-rank noise on the rest."""
from ..noise.spec import ESMode, ParamSpec
from .base import AbstractStrategy


class EGGROLLStrategy(AbstractStrategy):
    name = "eggroll"

    def is_lowrank(self, spec: ParamSpec) -> bool:
        return spec.mode in (ESMode.MM_PARAM, ESMode.EMB_PARAM)
