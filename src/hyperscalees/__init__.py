"""hyperscalees: evolution strategies at the hyperscale, in PyTorch (EGGROLL, arXiv:2511.16652).

``import hyperscalees`` loads the core only (noise, ops, strategies, nn): the backends, the
training engine, the tasks and the command line load on first use of a name that needs
them (PEP 562), so a user's own loop never pays for Ray, gymnasium or matplotlib.
"""
from __future__ import annotations

import importlib

from .nn import EGGROLL, AbstractLayer, OpenES, perturbation, register_layer
from .nn.evaluate import evaluate
from .noise import ESMode, NoiseStore, ParamSpec, Population
from .strategies import AbstractUpdateRule, ESConfig, centered_rank, group_normalize, pair_sign, z_score

__version__ = "0.1.0"

# name -> module that defines it, imported when the name is first used
_LAZY = {"LocalBackend": ".distributed.local", "RayBackend": ".distributed.ray", "AbstractBackend": ".distributed.base",
         "GraphedStep": ".nn.graph", **dict.fromkeys(("add_adapters", "merge_adapters"), ".nn.adapters"),
         **dict.fromkeys(("install_subspace", "merge_subspace"), ".nn.subspace"),
         **dict.fromkeys(("norms_and_biases", "evolved_numbers", "merged_copy"), ".nn.select")}  # small evolving sets (issue 40)


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hyperscalees' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["AbstractBackend", "AbstractLayer", "AbstractUpdateRule", "EGGROLL", "ESConfig", "ESMode", "GraphedStep",
           "LocalBackend", "NoiseStore", "OpenES", "ParamSpec", "Population", "RayBackend", "centered_rank",
           "evaluate", "group_normalize", "pair_sign", "perturbation", "register_layer", "z_score", "__version__",
           "add_adapters", "evolved_numbers", "install_subspace", "merge_adapters", "merge_subspace", "merged_copy",
           "norms_and_biases"]
