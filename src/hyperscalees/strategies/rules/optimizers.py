"""The one registry of torch optimizers an ES estimate can drive: ``OPTIMIZERS[name](groups, momentum)``.

Each entry builds a list of ``torch.optim`` optimizers over torch-style parameter groups
(two for Muon: Muon on matrices, AdamW on the rest). ``ESConfig.optimizer`` is checked
against these names, the optimizer rule (``torch_optim.py``) builds from them, and the
functional API's solvers (``functional/solver.py``) are their single-class entries.
Adding an optimizer is one builder here plus its line in ``OPTIMIZERS``.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

_FUSED_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def fused_options(params: list[Tensor]) -> dict:
    """``fused=True`` where torch has a one-pass kernel for these tensors (Adam's default path
    makes ~10 passes over every parameter; the fused kernel is one). On CUDA also
    ``capturable=True``: the step count stays on the device, so a CUDA graph can replay the
    step (nn/graph.py) and no step reads a device value on the host."""
    kinds = {p.device.type for p in params}
    ok = kinds <= {"cpu", "cuda"} and len(kinds) == 1 and all(p.dtype in _FUSED_DTYPES for p in params)
    if not ok:
        return {}
    return {"fused": True, "capturable": True} if kinds == {"cuda"} else {"fused": True}


def _tensors(groups: list[dict]) -> list[Tensor]:
    return [p for g in groups for p in g["params"]]


def _sgd(groups: list[dict], momentum: float) -> list:
    return [torch.optim.SGD(groups, momentum=momentum)]


def _adam(groups: list[dict], momentum: float) -> list:
    return [torch.optim.Adam(groups, **fused_options(_tensors(groups)))]


def _adamw(groups: list[dict], momentum: float) -> list:
    return [torch.optim.AdamW(groups, **fused_options(_tensors(groups)))]


def _muon(groups: list[dict], momentum: float) -> list:
    split = lambda keep: [dict(g, params=[p for p in g["params"] if keep(p)]) for g in groups]
    mats = [g for g in split(lambda p: p.dim() == 2) if g["params"]]
    rest = [g for g in split(lambda p: p.dim() != 2) if g["params"]]
    opts = [torch.optim.Muon(mats)] if mats else []
    return opts + (_adamw(rest, momentum) if rest else [])


OPTIMIZERS: dict[str, Callable[[list[dict], float], list]] = {"sgd": _sgd, "adam": _adam, "adamw": _adamw,
                                                               "muon": _muon}
# the functional API's solvers: one torch.optim class each, built as ``cls(params, lr=..., **kw)``
SOLVER_CLASSES = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}
assert set(SOLVER_CLASSES) <= set(OPTIMIZERS)
