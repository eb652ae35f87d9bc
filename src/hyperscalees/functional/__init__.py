"""The functional, HyperscaleES-shaped API: stateless noisers and models over plain trees.

For porting JAX HyperscaleES code. Same call shapes (``init_noiser``, ``do_mm``,
``convert_fitnesses``, ``do_updates``, ``Model.rand_init``/``forward``, ``simple_es_tree_key``),
two deliberate differences: keys are Python ints, and a forward runs many threads at once
(``iterinfo = (epoch, thread_ids)`` with member-major inputs) instead of being vmapped.
The noiser classes carry a ``Noiser`` suffix (``EGGROLLNoiser``, ``OpenESNoiser``, ...) so
that no name here collides with the module-level API (``hs.EGGROLL``, ``hs.OpenES``);
``all_noisers`` keeps HyperscaleES's string keys. Every leaf's noise comes from the core's
``NoiseStore``, the products from ``ops`` and the update from ``strategies.estimate``.

    init = MLP.rand_init(0, 3, 1, [16, 16])                 # int keys, not JAX keys
    keys = simple_es_tree_key(init.params, 1, init.scan_map)
    noiser = EGGROLLNoiser                                   # or all_noisers["eggroll"]
    fnp, np_ = noiser.init_noiser(init.params, 0.2, 0.1, solver="adam", rank=4)
    params = init.params
    for epoch in range(120):
        it = (epoch, torch.arange(256))                      # 256 threads in one call
        y = MLP.forward(noiser, fnp, np_, init.frozen_params, params, keys, it, x)  # x (256*M, 3)
        f = noiser.convert_fitnesses(fnp, np_, score(y))     # (256,)
        np_, params = noiser.do_updates(fnp, np_, params, keys, f, it, init.es_map)
"""
from .eggroll import AbstractEGGROLLNoiser, AltEGGROLLNoiser, EGGROLLBSNoiser, EGGROLLNoiser
from .models import (EMB_PARAM, EXCLUDED, MLP, MM, MM_PARAM, PARAM, TMM, CommonInit, CommonParams, Embedding,
                     Linear, Model, Parameter, call_submodule)
from .noiser import AbstractNoiser, NoopNoiser
from .open_es import OpenESNoiser
from .tree import simple_es_tree_key, tree_items, tree_map

all_noisers = {
    "noop": NoopNoiser,
    "eggroll": EGGROLLNoiser,
    "reeggroll": EGGROLLNoiser,  # HyperscaleES alias
    "open_es": OpenESNoiser,
    "eggrollbs": EGGROLLBSNoiser,
    "alteggroll": AltEGGROLLNoiser,
}

__all__ = ["AbstractEGGROLLNoiser", "AbstractNoiser", "AltEGGROLLNoiser", "CommonInit", "CommonParams", "EMB_PARAM",
           "EXCLUDED", "EGGROLLBSNoiser", "EGGROLLNoiser", "Embedding", "Linear", "MLP", "MM", "MM_PARAM", "Model",
           "NoopNoiser", "OpenESNoiser", "PARAM", "Parameter", "TMM", "all_noisers", "call_submodule",
           "simple_es_tree_key", "tree_items", "tree_map"]
