"""Small evolving sets: norms and biases only, how many numbers a run evolves, a plain copy to export.

Zeroth-order cost grows with the number of directions explored, and a pretrained model's
*effective* dimension is small (Aghajanyan et al., arXiv:2012.13255). The cheapest useful
choice is to leave every matrix alone and evolve only what rescales and shifts features:
normalisation weights and biases (BitFit's choice for fine-tuning, here for ES). Those
vectors are small, so they get full-rank noise ("full"): low-rank noise needs a matrix.
"""
from __future__ import annotations

import copy
import math

from torch import nn

from ..noise.spec import ESMode
from .adapters import Adapter, merge_adapters
from .es_map import owned_parameters
from .subspace import has_subspace, merge_subspace

# torch's normalisation layers; a model's own norm classes (LlamaRMSNorm, ...) are found by name
_NORMS = (nn.LayerNorm, nn.RMSNorm, nn.GroupNorm, nn.modules.batchnorm._NormBase)


def is_norm(module: nn.Module) -> bool:
    """A normalisation layer: one of torch's, or a class whose name says so (``LlamaRMSNorm``)."""
    return isinstance(module, _NORMS) or "Norm" in type(module).__name__


def norms_and_biases(model: nn.Module, biases: bool = True) -> dict[str, str]:
    """An ``es_map`` evolving only the floating-point parameters of norm layers and every ``bias``.

    Everything else is excluded. ``biases=False`` keeps the norms only. Raises if the model has
    none (a bias-free model without norms has nothing this selection could evolve).
    """
    chosen = []
    for mod, attr, name, p in owned_parameters(model):
        if not p.is_floating_point() or name in chosen:
            continue
        if is_norm(mod) or (biases and attr == "bias"):
            chosen.append(name)
    if not chosen:
        what = "norm layers or biases" if biases else "norm layers"
        raise ValueError(f"{type(model).__name__} has no {what} to evolve")
    return {"*": "excluded", **{n: "full" for n in chosen}}


def evolved_numbers(es) -> int:
    """How many numbers ``es`` (a module-level ES facade) evolves: the sizes of its non-excluded parameters."""
    return sum(math.prod(s.shape) for s in es.specs.values() if s.mode != ESMode.EXCLUDED)


def holds_small_set(model: nn.Module) -> bool:
    """Whether ``model`` carries adapters or a subspace (what :func:`merged_copy` folds away)."""
    return any(isinstance(m, Adapter) or has_subspace(m) for m in model.modules())


def merged_copy(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` with its adapters and subspace folded into plain weights; ``model`` is
    untouched, so training goes on. What an export saves mid-run (inside ``es.materialized(i)``: member i)."""
    plain = copy.deepcopy(model)
    for holder in [m for m in plain.modules() if has_subspace(m)]:
        merge_subspace(holder)
    if any(isinstance(m, Adapter) for m in plain.modules()):
        merge_adapters(plain)
    return plain
