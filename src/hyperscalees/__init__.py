"""hyperscalees: evolution strategies at the hyperscale, in PyTorch (EGGROLL, arXiv:2511.16652)."""
from .nn import EGGROLL, OpenES, perturbation
from .noise import Population
from .strategies import ESConfig, ESMode, centered_rank, group_normalize, pair_sign, z_score

__version__ = "0.1.0"

__all__ = ["EGGROLL", "ESConfig", "ESMode", "OpenES", "Population", "centered_rank", "group_normalize",
           "pair_sign", "perturbation", "z_score", "__version__"]
