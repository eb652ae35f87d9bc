"""Pretrained language models as ES populations: load, choose what evolves, generate, export.

    from hyperscalees import llm
    model, tok = llm.load_causal_lm("path/to/model")          # offline: a local folder or a .gguf file
    es = hs.EGGROLL(model, population=64, sigma=1e-3, lr=1e-3, es_map=llm.evolving(model))
    out = llm.generate(es, tok, ["2+3=", "7*6="], llm.Sampling(max_new_tokens=8))
    es.tell(reward(out))                                       # (64, 2) scores, one column per prompt
    llm.save_pretrained(model, tok, "out/")                    # loads in plain transformers

Needs the ``llm`` extra (transformers; gguf for .gguf files; rwkv7-hf for RWKV-7). Nothing here
downloads: every path is local.
"""
from .generate import Generations, Sampling, complete, generate
from .select import evolving

__all__ = ["Generations", "Sampling", "complete", "evolving", "generate", "load_causal_lm", "save_pretrained",
           "RewardFitness", "smollm2_path"]


def __getattr__(name):  # transformers loads only when a model is loaded or saved
    if name in ("load_causal_lm", "smollm2_path"):
        from . import load
        return getattr(load, name)
    if name == "save_pretrained":
        from .export import save_pretrained
        return save_pretrained
    if name == "RewardFitness":
        from .fitness import RewardFitness
        return RewardFitness
    raise AttributeError(f"module 'hyperscalees.llm' has no attribute {name!r}")
