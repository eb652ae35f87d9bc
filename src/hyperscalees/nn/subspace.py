"""Evolve a random subspace: every chosen weight is θ₀ + P·z, and ES evolves z ∈ ℝᵏ alone.

``install_subspace(model, k)`` (in place) gives the model one more parameter, z =
``hs_subspace_z`` (zeros, so the model is unchanged at the start), freezes the chosen weights as
θ₀ and wraps their modules' forwards so they compute with θ₀ + P·z (P: ``nn/fastfood.py``, one
key per parameter, regenerated, never stored). It returns the ``es_map`` evolving z only, with
full-rank noise: z is a short vector. ``merge_subspace(model)`` writes θ₀ + P·z into
the weights and removes every trace, so the model saves as plain weights.

The model keeps its class, names and methods (a Hugging Face model still generates), and
everything ES does to a parameter -- noise, shaping, update rules, checkpoints, resume, Ray --
happens to z like to any other parameter.

Population forward: members differ only through z_i = z + s·σ·ε_i, hence in every chosen
weight at once (P ε_i is dense). Inside ``es.perturbed()`` each wrapped module splits its
member-major rows by member and runs once per member with θ₀ + P z_i: members × (one
projection of each chosen weight + the module on that member's rows). That is the price of a
dense perturbation; it buys exactness: member i's rows are computed by the same code, on the
same z_i, as ``es.materialized(i)`` computes them (z_i rounded once, as materialized does).
Within one population call the members' projected weights are computed once and reused by every
later call with the same z_i (a generation's every token), up to ``cache_bytes`` for the whole
model (default :data:`CACHE_BYTES`); past it they are projected again per call, which on a large model
costs one full projection per member per token. The values are the same either way. Size it to hold
one block: members per call × the chosen weights' bytes (``train llm --subspace-cache-mib``).
Outside a perturbation every call projects again (z may have changed): fine for training, slow
for long unperturbed generation -- merge first. A weight read outside its module's forward
(torch's MultiheadAttention's ``out_proj``) cannot be in the subspace: it would silently keep θ₀.
"""
from __future__ import annotations

import functools
import inspect
from fnmatch import fnmatchcase
from typing import Iterable

import torch
from torch import Tensor, nn

from ..noise.keys import name_key
from .adapters import matrix_layers
from .es_map import owned_parameters
from .fastfood import Fastfood
from .layers import AbstractLayer, PopulationContext, register_layer, registered_layer

ATTR = "hs_subspace"   # the root's plain attribute holding the Subspace bookkeeping
Z = "hs_subspace_z"    # the root's parameter z
CACHE_BYTES = 512 * 2 ** 20  # default: the members' projected weights kept across calls, for the whole model


class Subspace:
    """z's bookkeeping, a plain object in the root module's ``__dict__`` (a child module would join
    an ``nn.Sequential``'s pipeline): k, the seed of P, and the block being evaluated, if any."""

    def __init__(self, z: nn.Parameter, seed: int, cache_bytes: int = CACHE_BYTES):
        self.z, self.k, self.seed, self.cache_bytes = z, z.numel(), seed, cache_bytes
        self.active: tuple[PopulationContext, str] | None = None  # (context, z's name) inside a perturbed call
        self.cached_bytes = 0  # what the SubspaceForwards' member caches hold, against cache_bytes

    def __getstate__(self):  # a copy (a Ray replica, deepcopy) starts with empty caches: see SubspaceForward
        return {**self.__dict__, "cached_bytes": 0}

    def member_z(self, ctx: PopulationContext, name: str) -> Tensor:
        """(members, k) z_i = z + s·σ·ε_i of the block's members, summed in float64 and rounded once
        (what ``es.materialized`` writes); ``name`` is z's parameter name."""
        n = ctx.noise(name)
        g = ctx.pop.per_draw
        rows = []
        for j in range(ctx.members):
            sign = n.signs[j // g, j % g].double()
            rows.append((self.z.double() + sign * n.scale * n.eps[j // g].double()).to(self.z.dtype))
        return torch.stack(rows)


def has_subspace(module: nn.Module) -> bool:
    return Z in module._parameters and isinstance(module.__dict__.get(ATTR), Subspace)


class SubspaceLayer(AbstractLayer):
    """The root module that owns z: its own forward, with the block's context published for the
    wrapped modules below it for the duration of the call."""

    def params(self, module):
        return (Z,)

    def forward(self, ctx: PopulationContext, module: nn.Module, active: dict[str, str]):
        state = module.__dict__[ATTR]
        original = module.forward  # the user's instance-level forward, or the class's, bound

        @functools.wraps(original)  # its signature: Hugging Face's generate passes only what forward names
        def forward(*args, **kwargs):
            outer, state.active = state.active, (ctx, active[Z])
            try:
                return original(*args, **kwargs)
            finally:
                state.active = outer
        forward.handles_vmap = True
        return forward


register_layer(has_subspace, SubspaceLayer)


class SubspaceForward:
    """The forward installed on a module with weights in the subspace (a plain object, so deepcopy
    and pickle carry it with the module)."""

    def __init__(self, module: nn.Module, holder: Subspace, projected: dict[str, Fastfood], previous):
        self.module, self.holder, self.projected, self.previous = module, holder, projected, previous
        self.requires = {a: module._parameters[a].requires_grad for a in projected}  # put back by merge
        self.cache: tuple | None = None  # (members' z, their weights, bytes, θ₀'s identity) of the last call

    def __getstate__(self):
        return {**self.__dict__, "cache": None}

    @property
    def __signature__(self) -> inspect.Signature:
        """The module's own forward's: callers that read it (Hugging Face's generate) see no change."""
        return inspect.signature(self.previous or type(self.module).forward.__get__(self.module))

    def __call__(self, *args, **kwargs):
        active = self.holder.active
        if active is None:
            return self.run(self.weights(self.holder.z.detach()[None], self.factors()), args, kwargs)
        ctx, name = active
        ws = self.member_weights(self.holder.member_z(ctx, name))  # zs: (members, k)
        what = type(self.module).__name__
        split = [per_member(ctx, a, what) for a in args]
        ksplit = {key: per_member(ctx, v, what) for key, v in kwargs.items()}
        outs = [self.run(ws[i], [s[i] for s in split], {key: v[i] for key, v in ksplit.items()})
                for i in range(ctx.members)]
        return join_members(outs)

    def factors(self) -> dict:
        """P's factors of each projected attribute, on θ₀'s device: drawn only where a projection needs
        them (on a cache hit, a generation's later tokens draw nothing)."""
        own = self.module._parameters
        return {a: f.factors(own[a].device) for a, f in self.projected.items()}

    def member_weights(self, zs: Tensor) -> list[dict[str, Tensor]]:
        """θ₀ + P z_i of every member: the last call's when its z_i are these (a generation calls once per
        token with the same members), else projected now and kept while the model's caches fit."""
        own = self.module._parameters
        theta0 = tuple((own[a].data_ptr(), own[a]._version, own[a].dtype) for a in self.projected)  # θ₀ unchanged
        c = self.cache
        if c is not None and c[3] == theta0 and c[0].shape == zs.shape and c[0].dtype == zs.dtype \
                and c[0].device == zs.device and torch.equal(c[0], zs):
            return c[1]
        factors = self.factors()
        ws = [self.weights(zs[i:i + 1], factors) for i in range(zs.shape[0])]
        size = sum(w.numel() * w.element_size() for member in ws for w in member.values())
        held = self.holder.cached_bytes - (c[2] if c is not None else 0)
        if held + size <= self.holder.cache_bytes:
            self.cache, self.holder.cached_bytes = (zs.clone(), ws, size, theta0), held + size
        return ws

    def weights(self, z: Tensor, factors: dict) -> dict[str, Tensor]:
        """θ₀ + P z for each projected attribute, in θ₀'s dtype."""
        own = self.module._parameters
        out = {}
        for attr, ff in self.projected.items():
            theta0 = own[attr]
            work = torch.float64 if theta0.dtype == torch.float64 else torch.float32
            delta = ff.project(z.to(work), factors[attr]).view(theta0.shape)
            out[attr] = (theta0.detach().to(work) + delta).to(theta0.dtype)
        return out

    def run(self, values: dict[str, Tensor], args, kwargs):
        """The module's own forward with ``values`` standing in for its parameters."""
        own = self.module._parameters
        saved = {a: own[a] for a in values}
        try:
            own.update(values)
            if self.previous is not None:
                return self.previous(*args, **kwargs)
            return type(self.module).forward(self.module, *args, **kwargs)
        finally:
            own.update(saved)


def per_member(ctx: PopulationContext, value, what: str) -> list:
    """Member i's part of an argument: its rows of a member-major tensor, anything else as is."""
    if isinstance(value, Tensor):
        return list(ctx.check_rows(value, what).chunk(ctx.members))
    return [value] * ctx.members


def join_members(outs: list):
    """The members' outputs back in member-major order (tensors concatenated, tuples element-wise)."""
    first = outs[0]
    if isinstance(first, Tensor):
        return torch.cat(outs)
    if isinstance(first, (tuple, list)):
        return type(first)(join_members(list(col)) for col in zip(*outs))
    return first


def routed_children(model: nn.Module) -> set[int]:
    """ids of modules whose parent's forward reads their weights directly (never calling them)."""
    out = set()
    for mod in model.modules():
        layer = registered_layer(mod, ())
        if layer is not None and layer.routes_children(mod):
            out |= {id(sub) for sub in mod.modules() if sub is not mod}
    return out


def subspace_weights(model: nn.Module, include: Iterable[str] | None = None) -> list[tuple[nn.Module, str, str]]:
    """(module, attribute, name) of the weights to project: ``include`` globs over parameter names,
    default the weights of every Linear/Conv1D but the input embedding and the output head."""
    owned = [(mod, attr, name, p) for mod, attr, name, p in owned_parameters(model) if p.is_floating_point()]
    if include is None:
        default = {f"{m}.weight" for m in matrix_layers(model)}
        chosen = [(mod, attr, name) for mod, attr, name, _ in owned if name in default]
    else:
        include = list(include)
        unmatched = [p for p in include if not any(fnmatchcase(o[2], p) for o in owned)]
        if unmatched:
            raise ValueError(f"subspace patterns {unmatched} match no float parameter; names are e.g. "
                             f"{[o[2] for o in owned[:4]]}")
        chosen = [(mod, attr, name) for mod, attr, name, _ in owned if any(fnmatchcase(name, p) for p in include)]
    routed = routed_children(model)
    bad = [name for mod, _, name in chosen if id(mod) in routed]
    if bad:
        raise ValueError(f"{bad[0]} is read by its parent's forward, not its own module's: it cannot be projected")
    if not chosen:
        raise ValueError(f"no weight of {type(model).__name__} was chosen for the subspace")
    return chosen


def install_subspace(model: nn.Module, k: int, include: Iterable[str] | None = None, seed: int = 0,
                     cache_bytes: int | None = None) -> dict[str, str]:
    """Make the chosen weights θ₀ + P·z with z ∈ ℝᵏ (zeros), the parameter ``model.hs_subspace_z``;
    returns the ``es_map`` that evolves z alone. ``seed`` keys P (one key per parameter name);
    ``cache_bytes`` bounds the members' projected weights kept across calls (default :data:`CACHE_BYTES`)."""
    cache_bytes = CACHE_BYTES if cache_bytes is None else cache_bytes
    if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, int) or cache_bytes < 0:
        raise ValueError(f"cache_bytes must be a whole number >= 0 (0: project on every call), got {cache_bytes!r}")
    if ATTR in model.__dict__:
        raise ValueError(f"{type(model).__name__} already has a subspace; merge_subspace it first")
    chosen = subspace_weights(model, include)
    first = chosen[0][0]._parameters[chosen[0][1]]
    z = nn.Parameter(torch.zeros(k, dtype=torch.float64 if first.dtype == torch.float64 else torch.float32,
                                 device=first.device))
    holder = Subspace(z, seed, cache_bytes)
    by_module: dict[nn.Module, dict[str, Fastfood]] = {}
    for mod, attr, name in chosen:
        p = mod._parameters[attr]
        by_module.setdefault(mod, {})[attr] = Fastfood(name_key(seed, name), p.numel(), k)
    model.register_parameter(Z, z)
    model.__dict__[ATTR] = holder
    for mod, projected in by_module.items():
        mod.forward = SubspaceForward(mod, holder, projected, mod.__dict__.get("forward"))
        for attr in projected:
            mod._parameters[attr].requires_grad_(False)
    return {"*": "excluded", f"*{Z}": "full"}  # "*": also when the model sits inside another module


def merge_subspace(model: nn.Module) -> nn.Module:
    """Write θ₀ + P·z into the projected weights and remove the subspace (in place); returns ``model``."""
    if not has_subspace(model):
        raise ValueError(f"{type(model).__name__} has no subspace to merge")
    holder = model.__dict__[ATTR]
    for mod in model.modules():
        fwd = mod.__dict__.get("forward")
        if not isinstance(fwd, SubspaceForward) or fwd.holder is not holder:
            continue
        own = mod._parameters
        with torch.no_grad():
            for attr, value in fwd.weights(holder.z.detach()[None], fwd.factors()).items():
                own[attr].copy_(value)
                own[attr].requires_grad_(fwd.requires[attr])
        del mod.forward
        if fwd.previous is not None:
            mod.forward = fwd.previous
    del model._parameters[Z], model.__dict__[ATTR]
    return model
