"""Pretrained language models as ES populations: load, choose what evolves, generate, reward, export.

"My model, my prompts, my reward" in a few lines (no es_map or group_fitness to remember):

    from hyperscalees import llm
    model, tok = llm.load_causal_lm("path/to/model")          # offline: a local folder or a .gguf file
    es = llm.EGGROLL(model, population=32)                     # block matrices evolve; scores per prompt
    fitness = llm.RewardFitness(tok, ["2+3=", "7*6="], my_reward, llm.Sampling(max_new_tokens=8))
    for step in range(10):
        es.tell(fitness.population(es))                        # my_reward(prompt, completion) -> float
    llm.save_pretrained(model, tok, "out/")                    # loads in plain transformers

``llm.SafeReward("file.py:fn", timeout=5.0)`` runs an untrusted reward in a worker process.
Needs the ``llm`` extra (transformers; gguf for .gguf files; rwkv7-hf for RWKV-7). Nothing here
downloads: every path is local.
"""
from .es import EGGROLL
from .fitness import RewardFailedError, RewardFitness
from .generate import Generations, Sampling, complete, generate
from .reward import RewardLoadError, SafeReward
from .select import evolving, what_evolves

__all__ = ["EGGROLL", "Generations", "RewardFailedError", "RewardFitness", "RewardLoadError", "SafeReward",
           "Sampling", "complete", "evolving", "generate", "load_causal_lm", "save_pretrained", "smollm2_path",
           "what_evolves"]


def __getattr__(name):  # transformers loads only when a model is loaded or saved
    if name in ("load_causal_lm", "smollm2_path"):
        from . import load
        return getattr(load, name)
    if name == "save_pretrained":
        from .export import save_pretrained
        return save_pretrained
    raise AttributeError(f"module 'hyperscalees.llm' has no attribute {name!r}")
