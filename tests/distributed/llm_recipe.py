"""A population-generation recipe for the Ray tests: a tiny Llama folder, a reward, RewardFitness.

Registered with Ray's cloudpickle by value (as faulty.py is): workers need not import this file.
"""
from __future__ import annotations

import sys

import hyperscalees as hs
from hyperscalees import llm

PROMPTS = ["12+3=", "ab", "hello world"]


def letter_a(prompt: str, completion: str) -> float:
    return completion.count("a") - 0.1 * len(completion)


class LLMRecipe:
    def __init__(self, folder: str):
        self.folder = folder

    def __call__(self):
        model, tok = llm.load_causal_lm(self.folder)
        es = hs.EGGROLL(model, population=8, sigma=0.05, lr=0.02, es_map=llm.evolving(model),
                        group_fitness="per_group")
        return es, llm.RewardFitness(tok, self.prompts, letter_a, llm.Sampling(max_new_tokens=8))

    @staticmethod
    def prompts(step: int) -> list[str]:
        return [PROMPTS[step % 3], PROMPTS[(step + 1) % 3]]


def by_value() -> None:
    import ray.cloudpickle as cloudpickle
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
