"""The functional, HyperscaleES-shaped API: stateless noisers and models over plain trees.

For porting JAX HyperscaleES code. Same names and call shapes (``init_noiser``, ``do_mm``,
``convert_fitnesses``, ``do_updates``, ``Model.rand_init``/``forward``, ``simple_es_tree_key``),
two deliberate differences: keys are Python ints, and a forward runs many threads at once
(``iterinfo = (epoch, thread_ids)`` with member-major inputs) instead of being vmapped.
Everything is built on the core (``noise``, ``ops``, ``strategies``); see each module.

    init = MLP.rand_init(0, 3, 1, [16, 16])                 # int keys, not JAX keys
    keys = simple_es_tree_key(init.params, 1, init.scan_map)
    fnp, np_ = EggRoll.init_noiser(init.params, 0.2, 0.1, solver="adam", rank=4)
    params = init.params
    for epoch in range(120):
        it = (epoch, torch.arange(256))                      # 256 threads in one call
        y = MLP.forward(EggRoll, fnp, np_, init.frozen_params, params, keys, it, x)  # x (256*M, 3)
        f = EggRoll.convert_fitnesses(fnp, np_, score(y))    # (256,)
        np_, params = EggRoll.do_updates(fnp, np_, params, keys, f, it, init.es_map)
"""
from .eggroll import AbstractEggRoll, AltEggRoll, EggRoll, EggRollBS
from .models import (EMB_PARAM, EXCLUDED, MLP, MM, MM_PARAM, PARAM, TMM, CommonInit, CommonParams, Embedding,
                     Linear, Model, Parameter, call_submodule)
from .noiser import AbstractNoiser, Noop
from .open_es import OpenES
from .tree import simple_es_tree_key, tree_items, tree_map

all_noisers = {
    "noop": Noop,
    "eggroll": EggRoll,
    "reeggroll": EggRoll,  # HyperscaleES alias
    "open_es": OpenES,
    "eggrollbs": EggRollBS,
    "alteggroll": AltEggRoll,
}

__all__ = ["AbstractEggRoll", "AbstractNoiser", "AltEggRoll", "CommonInit", "CommonParams", "EMB_PARAM",
           "EXCLUDED", "EggRoll", "EggRollBS", "Embedding", "Linear", "MLP", "MM", "MM_PARAM", "Model", "Noop",
           "OpenES", "PARAM", "Parameter", "TMM", "all_noisers", "call_submodule", "simple_es_tree_key",
           "tree_items", "tree_map"]
