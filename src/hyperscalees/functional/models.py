"""HyperscaleES-style models: parameters as plain trees, forward threaded through a noiser.

A model is a class of classmethods. ``rand_init(key, ...)`` returns
``CommonInit(frozen_params, params, scan_map, es_map)``; ``forward(noiser, frozen_noiser_params,
noiser_params, frozen_params, params, es_tree_key, iterinfo, *inputs)`` runs it, perturbed
for every member named by ``iterinfo`` or unperturbed when it is None.

Dimensions: P = len(thread_ids) members, M rows per member. Inputs are member-major:
(P*M, features) or (P, M, features). A perturbed Parameter is (P, *shape), one copy per
member, so adding a bias broadcasts it over that member's M rows.

``key`` arguments are Python ints (there is no JAX key type); sub-modules get
``fold_in(key, i)``, and weights are drawn from a ``torch.Generator`` seeded with it.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..noise.keys import MASK32, fold_in
from ..noise.spec import ESMode

PARAM, MM_PARAM, EMB_PARAM, EXCLUDED = ESMode.PARAM, ESMode.MM_PARAM, ESMode.EMB_PARAM, ESMode.EXCLUDED


class CommonInit(NamedTuple):
    frozen_params: Any
    params: Any
    scan_map: Any
    es_map: Any


class CommonParams(NamedTuple):
    noiser: Any
    frozen_noiser_params: dict
    noiser_params: dict
    frozen_params: Any
    params: Any
    es_tree_key: Any
    iterinfo: Any


def _sub(tree, name):
    return tree[name] if isinstance(tree, dict) and name in tree else None


def call_submodule(module, name: str, cp: CommonParams, *inputs):
    """Run ``module`` on the ``name`` branch of every tree in ``cp``."""
    sub = cp._replace(frozen_params=_sub(cp.frozen_params, name), params=cp.params[name],
                      es_tree_key=cp.es_tree_key[name])
    return module._forward(sub, *inputs)


def _generator(key: int, device) -> torch.Generator:
    g = torch.Generator(device=device if device is not None else "cpu")
    g.manual_seed(int(key) & MASK32)
    return g


class Model:
    """Base of all models: ``forward`` packs the trees and calls ``_forward``."""

    @classmethod
    def rand_init(cls, key: int, *args, **kwargs) -> CommonInit:
        raise NotImplementedError

    @classmethod
    def forward(cls, noiser, frozen_noiser_params, noiser_params, frozen_params, params, es_tree_key,
                iterinfo, *inputs):
        cp = CommonParams(noiser, frozen_noiser_params, noiser_params, frozen_params, params, es_tree_key,
                          iterinfo)
        return cls._forward(cp, *inputs)

    @classmethod
    def _forward(cls, cp: CommonParams, *inputs):
        raise NotImplementedError


# -- atomic modules: one leaf each ---------------------------------------------------------
class Parameter(Model):
    """A free tensor (bias, norm weight): full-rank noise via ``get_noisy_standard``."""

    @classmethod
    def rand_init(cls, key, shape, *, init="zeros", dtype=torch.float32, device=None) -> CommonInit:
        if init == "zeros":
            p = torch.zeros(shape, dtype=dtype, device=device)
        elif init == "ones":
            p = torch.ones(shape, dtype=dtype, device=device)
        elif init == "normal":
            p = torch.randn(shape, generator=_generator(key, device), dtype=dtype, device=device)
        else:
            raise ValueError(f"unknown init {init!r}; choose zeros | ones | normal")
        return CommonInit(None, p, (), PARAM)

    @classmethod
    def _forward(cls, cp):
        return cp.noiser.get_noisy_standard(cp.frozen_noiser_params, cp.noiser_params, cp.params,
                                            cp.es_tree_key, cp.iterinfo)


class MM(Model):
    """x @ Wᵀ with W stored (out, in), N(0, 1)/√in init; low-rank noise via ``do_mm``."""

    @classmethod
    def rand_init(cls, key, in_dim, out_dim, *, dtype=torch.float32, device=None) -> CommonInit:
        w = torch.randn(out_dim, in_dim, generator=_generator(key, device), dtype=dtype, device=device)
        return CommonInit(None, w / in_dim ** 0.5, (), MM_PARAM)

    @classmethod
    def _forward(cls, cp, x):
        return cp.noiser.do_mm(cp.frozen_noiser_params, cp.noiser_params, cp.params, cp.es_tree_key,
                               cp.iterinfo, x)


class TMM(Model):
    """x @ W with W stored (in, out); low-rank noise via ``do_Tmm``."""

    @classmethod
    def rand_init(cls, key, in_dim, out_dim, *, dtype=torch.float32, device=None) -> CommonInit:
        w = torch.randn(in_dim, out_dim, generator=_generator(key, device), dtype=dtype, device=device)
        return CommonInit(None, w / in_dim ** 0.5, (), MM_PARAM)

    @classmethod
    def _forward(cls, cp, x):
        return cp.noiser.do_Tmm(cp.frozen_noiser_params, cp.noiser_params, cp.params, cp.es_tree_key,
                                cp.iterinfo, x)


class Embedding(Model):
    """W[idx] with W stored (vocab, dim), N(0, 1) init; low-rank noise via ``do_emb``."""

    @classmethod
    def rand_init(cls, key, vocab, dim, *, dtype=torch.float32, device=None) -> CommonInit:
        w = torch.randn(vocab, dim, generator=_generator(key, device), dtype=dtype, device=device)
        return CommonInit(None, w, (), EMB_PARAM)

    @classmethod
    def _forward(cls, cp, idx):
        return cp.noiser.do_emb(cp.frozen_noiser_params, cp.noiser_params, cp.params, cp.es_tree_key,
                                cp.iterinfo, idx)


# -- composites ----------------------------------------------------------------------------
def add_bias(y: Tensor, bias: Tensor, iterinfo) -> Tensor:
    """y (P*M.., out) + bias: (out,) unperturbed, or (P, out) one row per member."""
    if iterinfo is None:
        return y + bias
    p = bias.shape[0]
    return (y.reshape(p, -1, y.shape[-1]) + bias.unsqueeze(1)).reshape(y.shape)


def _merge(parts: dict[str, CommonInit], frozen=None) -> CommonInit:
    return CommonInit(frozen, {k: v.params for k, v in parts.items()},
                      {k: v.scan_map for k, v in parts.items()}, {k: v.es_map for k, v in parts.items()})


class Linear(Model):
    """x @ Wᵀ (+ b): an MM named "weight" and an optional zero-init Parameter named "bias"."""

    @classmethod
    def rand_init(cls, key, in_dim, out_dim, *, use_bias=True, dtype=torch.float32, device=None) -> CommonInit:
        parts = {"weight": MM.rand_init(fold_in(key, 0), in_dim, out_dim, dtype=dtype, device=device)}
        if use_bias:
            parts["bias"] = Parameter.rand_init(fold_in(key, 1), (out_dim,), dtype=dtype, device=device)
        return _merge(parts)

    @classmethod
    def _forward(cls, cp, x):
        y = call_submodule(MM, "weight", cp, x)
        if "bias" in cp.params:
            y = add_bias(y, call_submodule(Parameter, "bias", cp), cp.iterinfo)
        return y


def pqn(x: Tensor) -> Tensor:
    """relu(layernorm(x)) without an affine transform (HyperscaleES's "pqn" activation)."""
    return F.relu(F.layer_norm(x, x.shape[-1:]))


ACTIVATIONS = {"relu": F.relu, "silu": F.silu, "pqn": pqn}


class MLP(Model):
    """Linear layers "layer0".."layer{n}" with an activation between them (not after the last)."""

    @classmethod
    def rand_init(cls, key, in_dim, out_dim, hidden_dims=(), *, use_bias=True, activation="relu",
                  dtype=torch.float32, device=None) -> CommonInit:
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}")
        dims = [in_dim, *hidden_dims, out_dim]
        parts = {f"layer{i}": Linear.rand_init(fold_in(key, i), dims[i], dims[i + 1], use_bias=use_bias,
                                               dtype=dtype, device=device) for i in range(len(dims) - 1)}
        return _merge(parts, {"activation": activation, "num_layers": len(dims) - 1})

    @classmethod
    def _forward(cls, cp, x):
        act = ACTIVATIONS[cp.frozen_params["activation"]]
        n = cp.frozen_params["num_layers"]
        for i in range(n):
            x = call_submodule(Linear, f"layer{i}", cp, x)
            if i < n - 1:
                x = act(x)
        return x
