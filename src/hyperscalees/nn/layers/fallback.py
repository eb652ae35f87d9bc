"""Any other module: its forward under ``torch.vmap`` with per-member copies of its own parameters.

Correct for anything written in torch ops, and cheap for what it is meant for: a module's
own small tensors (a conv kernel, a time-mix vector next to its Linear children). Each
member gets a copy of those tensors, so a forward costs members x their bytes; above
``fallback_mib`` the fallback refuses, naming the module, instead of silently making
P weight copies -- register a layer for the type, or exclude its parameters.

Children the module calls from inside the vmap (its Linear projections, say) still run
as whole populations: their installed forwards see batched tensors and go through
:func:`population_call`, whose vmap rule hands them the member-major batch.
"""
from __future__ import annotations

import functools

import torch
from torch import Tensor, nn
from torch.utils._pytree import tree_flatten, tree_unflatten

from ...ops.member import get_noisy_standard
from .base import AbstractLayer, PopulationContext, own_parameters

try:  # private, but the only way to ask "am I inside a vmap?"; without it children simply run per call
    from torch._C._functorch import is_batchedtensor
except ImportError:  # pragma: no cover - older or newer torch
    def is_batchedtensor(t) -> bool:
        return False


_SLOT = object()  # marks where a tensor goes back into a module's output structure


class _PopulationCall(torch.autograd.Function):
    """Runs a population forward on the member-major batch of an enclosing vmap (its vmap rule)."""

    @staticmethod
    def forward(fn, *args):
        return fn(*args)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def vmap(info, in_dims, fn, *args):
        p = info.batch_size
        rows, flat = None, []
        for a, d in zip(args, in_dims[1:]):
            if not isinstance(a, Tensor):
                flat.append(a)
                continue
            a = a.movedim(d, 0) if d is not None else a.expand(p, *a.shape)  # (P, ...) one slice per member
            rows = a.dim() >= 3 if rows is None else rows
            flat.append(a.reshape(-1, *a.shape[2:]) if a.dim() >= 3 else a)   # member-major rows
        out = fn(*flat)
        outs = out if isinstance(out, tuple) else (out,)
        back = tuple(o.reshape(p, -1, *o.shape[1:]) if rows else o.reshape(p, *o.shape[1:]) for o in outs)
        if isinstance(out, tuple):
            return back, tuple(0 for _ in back)
        return back[0], 0


def population_call(forward):
    """Wrap an installed population forward so that it also works when called inside a vmap
    (a parent module run by the fallback calling its perturbed children)."""
    @functools.wraps(forward)
    def call(*args, **kwargs):
        if any(isinstance(a, Tensor) and is_batchedtensor(a) for a in args):
            return _PopulationCall.apply(functools.partial(forward, **kwargs), *args)
        return forward(*args, **kwargs)
    return call


class FallbackLayer(AbstractLayer):
    """Any module's own parameters, full-rank, through ``torch.vmap`` over members."""

    def params(self, module):
        return tuple(own_parameters(module))

    def forward(self, ctx: PopulationContext, module: nn.Module, active: dict[str, str]):
        own = own_parameters(module)
        bad = [a for a in active if not own[a].is_floating_point()]
        if bad:
            raise ValueError(f"{type(module).__name__} parameter(s) {[active[a] for a in bad]} are "
                             f"{own[bad[0]].dtype}: the generic layer adds float noise to per-member copies. Register a "
                             "layer for this module type (hyperscalees.nn.register_layer) or exclude them via es_map")
        nbytes = ctx.members * sum(own[a].numel() * own[a].element_size() for a in active)
        if nbytes > ctx.fallback_bytes:
            raise ValueError(
                f"{type(module).__name__} ({sorted(active.values())}) has no layer of its own, and the generic "
                f"vmap layer would make {ctx.members} per-member copies of its parameters ({nbytes / 2**20:.3g} MiB "
                f"> fallback_mib {ctx.fallback_bytes / 2**20:g} MiB). Register a layer for it "
                "(hyperscalees.nn.register_layer), exclude it via es_map={" + repr(sorted(active.values())[0]) +
                ": 'excluded'}, use smaller chunks, or raise fallback_mib")
        original = module.forward  # the class's forward (or the user's instance-level one)
        inside = [False]

        def vmapped(*args, **kwargs):
            members = {}
            for attr, name in active.items():
                n = ctx.noise(name)
                members[attr] = get_noisy_standard(own[attr], n.eps, n.signs, n.scale)  # (P, *shape)
            split = [ctx.check_rows(a, type(module).__name__).reshape(ctx.members, -1, *a.shape[1:])
                     if isinstance(a, Tensor) else a for a in args]
            in_dims = tuple(0 if isinstance(a, Tensor) else None for a in split)
            skeleton = {}

            def one(params, *xs):
                leaves, spec = tree_flatten(torch.func.functional_call(module, params, xs, kwargs))
                skeleton["spec"] = spec
                skeleton["const"] = [_SLOT if isinstance(v, Tensor) else v for v in leaves]
                return tuple(v for v in leaves if isinstance(v, Tensor))

            inside[0] = True
            try:
                tensors = torch.vmap(one, in_dims=(0, *in_dims), randomness="different")(members, *split)
            finally:
                inside[0] = False
            it = iter(t.reshape(-1, *t.shape[2:]) for t in tensors)
            return tree_unflatten([next(it) if c is _SLOT else c for c in skeleton["const"]], skeleton["spec"])

        routed = population_call(vmapped)  # a fallback child of a fallback parent: population again

        def forward(*args, **kwargs):
            if inside[0]:  # our own vmap calling the module: its original forward, per member
                return original(*args, **kwargs)
            return routed(*args, **kwargs)

        forward.handles_vmap = True
        return forward
