"""Run any ``nn.Module`` as a whole population in one forward, without rewriting it.

Inside :func:`perturbation`, every module owning a perturbed parameter has its forward
replaced by the one its layer builds (``nn/layers``: Linear, Conv1D, Embedding, norms,
attention, recurrent modules, a vmap fallback). Replacements are instance attributes
removed on exit -- also after an exception -- and a user's own instance-level forward is
put back, so the class is untouched.

Each forward marks the parameters whose noise it applied in the step's
:class:`NoiseStore`; the update refuses parameters whose noise never reached a forward
(a weight used outside its module's forward, a fused path that bypassed the module).
torch's fused attention fast path (``TransformerEncoderLayer`` in eval mode) bypasses
every submodule, so it is switched off inside the block.

Dimensions: P members in the slice, K = P/2 pairs, M rows per member. Inputs are
member-major along dim 0: rows [i*M, (i+1)*M) belong to member lo + i.
"""
from __future__ import annotations

from collections import defaultdict
from contextlib import contextmanager

import torch
from torch import nn

from ..noise.store import NoiseStore
from .es_map import owned_parameters
from .layers import PopulationContext, layer_for, population_call, registered_layer


@contextmanager
def perturbation(model: nn.Module, store: NoiseStore, lo: int = 0, hi: int | None = None,
                 fallback_mib: float = 64.0, repeated: bool = False):
    """Within the block, ``model`` evaluates members [lo, hi) of ``store.pop`` in one forward.

    ``repeated`` says the block will call the model many times (a generate calls every layer once
    per token): layers then build what they derive from the step's noise (a matrix layer's GEMM
    plan) on their first call. Otherwise a plan is made on its second use in the step, so a
    forward that runs once spends no time or memory on one. Either way the outputs are the same.
    """
    if not isinstance(store, NoiseStore):
        raise TypeError(f"perturbation needs the step's NoiseStore (strategy.store(pop)), got {type(store).__name__}")
    hi = store.pop.size if hi is None else hi
    store.pop.check_members(lo, hi)
    ctx = PopulationContext(store, lo, hi, fallback_mib * 2**20, repeated=repeated)
    by_module = defaultdict(dict)
    for mod, attr, name, _ in owned_parameters(model):
        if store.is_perturbed(name):
            by_module[mod][attr] = name
    perturbed = set(by_module)
    for mod in model.modules():  # a module whose own forward would bypass its perturbed children
        if mod in perturbed:
            continue
        layer = registered_layer(mod, ())
        if layer is not None and layer.routes_children(mod) and any(sub in perturbed for sub in mod.modules()):
            by_module[mod] = {}
    patched = []
    fastpath = torch.backends.mha.get_fastpath_enabled()
    try:
        torch.backends.mha.set_fastpath_enabled(False)
        for mod, active in by_module.items():
            fwd = layer_for(mod, active).forward(ctx, mod, active)
            patched.append((mod, mod.__dict__.get("forward")))
            mod.forward = fwd if getattr(fwd, "handles_vmap", False) else population_call(fwd)
        store.note_forward()
        with torch.no_grad():
            yield ctx
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
        for mod, previous in patched:
            del mod.forward
            if previous is not None:  # an instance-level forward of the user's own
                mod.forward = previous
