"""hyperscalees: evolution strategies at the hyperscale, in PyTorch (EGGROLL, arXiv:2511.16652)."""
from .distributed import GraphedStep, LocalBackend, evaluate
from .nn import EGGROLL, AbstractLayer, OpenES, perturbation, register_layer
from .noise import ESMode, NoiseStore, ParamSpec, Population
from .strategies import AbstractUpdateRule, ESConfig, centered_rank, group_normalize, pair_sign, z_score

__version__ = "0.1.0"

__all__ = ["AbstractLayer", "AbstractUpdateRule", "EGGROLL", "ESConfig", "ESMode", "GraphedStep", "LocalBackend", "NoiseStore",
           "OpenES", "ParamSpec", "Population", "centered_rank", "evaluate", "group_normalize", "pair_sign",
           "perturbation", "register_layer", "z_score", "__version__"]
