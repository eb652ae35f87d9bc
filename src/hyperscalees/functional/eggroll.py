"""EGGROLL noisers: rank-r perturbations σ/√r·A Bᵀ on matrices, σ·ε on everything else.

Dimensions: N threads in an update, G = group_size threads per group (one prompt).
Three variants share the forward and differ only in the update or the fitness:
``EGGROLLNoiser`` (the paper's), ``AltEGGROLLNoiser`` (sign-based update) and
``EGGROLLBSNoiser`` (baseline subtraction: in each group of G threads, threads 0 and 1 run
unperturbed). The ``Noiser`` suffix keeps them apart from the module-level ``hs.EGGROLL``
and ``strategies.EGGROLLStrategy``.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..noise.spec import ESMode
from ..strategies.shaping import sanitize
from .noiser import AbstractNoiser, fitness_vector


class AbstractEGGROLLNoiser(AbstractNoiser):
    """EGGROLL's choice of noise, shared by its variants: matrices and embeddings low-rank, the rest dense."""

    @classmethod
    def kind(cls, frozen, mode):
        if mode in (ESMode.MM_PARAM, ESMode.EMB_PARAM):
            return "lowrank"
        if mode == ESMode.PARAM and not frozen["freeze_nonlora"]:
            return "full"
        return None  # EXCLUDED, or PARAM frozen by freeze_nonlora (LLM runs evolve matrices only)


class EGGROLLNoiser(AbstractEGGROLLNoiser):
    """The paper's noiser. ``freeze_nonlora=True`` evolves only MM_PARAM/EMB_PARAM leaves."""

    name = "eggroll"


class AltEGGROLLNoiser(AbstractEGGROLLNoiser):
    """Same forward; the update uses σ/√r·f·sign(A) sign(B)ᵀ (Rademacher-like, from Gaussian draws)."""

    name = "alteggroll"
    sign_update = True


class EGGROLLBSNoiser(AbstractEGGROLLNoiser):
    """Baseline subtraction: thread t with t % G in {0, 1} is unperturbed, so each group of G
    threads carries its own baseline score.

    Intended layout (HyperscaleES's multi-prompt setup): G directions, each evaluated on
    N/G prompts; evaluate with ``thread_ids = arange(N) % G`` (member-major, prompt-major),
    call :meth:`convert_fitnesses` on the N raw scores to get G per-direction fitnesses, and
    update with ``iterinfos = (epoch, range(G))``. The update's global norm is clipped to 1.
    """

    name = "eggrollbs"
    baseline = True
    max_grad_norm = 1.0

    @classmethod
    def convert_fitnesses(cls, frozen, noiser_params, raw_scores, num_episodes_list=None) -> Tensor:
        """(N,) raw scores -> (G,) fitness per direction.

        Per group (row of the (N/G, G) view): subtract the baseline thread 0's score, divide
        by the group's std sqrt(var + 1e-5); directions 0 and 1 (the baselines) get 0; then
        average over groups. ``num_episodes_list`` is not supported here.
        """
        if num_episodes_list is not None:
            raise ValueError("EGGROLLBSNoiser.convert_fitnesses does not take num_episodes_list")
        f, _ = sanitize(fitness_vector(raw_scores, "raw_scores"))
        g = frozen["group_size"]
        if f.numel() % g:
            raise ValueError(f"{f.numel()} raw scores cannot be split into groups of {g}")
        s = f.view(-1, g)  # (N/G, G)
        d = (s - s[:, :1]) / torch.sqrt(s.var(dim=1, unbiased=False, keepdim=True) + 1e-5)
        d[:, :2] = 0.0
        return d.mean(dim=0)
