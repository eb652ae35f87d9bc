"""Problem sets with verifiable rewards for LLM fine-tuning, and the SFT fitness.

A problem set is indexed problems in three splits and a verifier, not an engine task (the engine's
task that fine-tunes on one is ``tasks.finetune.FinetuneTask``, ``train llm``). ``PROBLEM_SETS`` maps
a name to its class (:class:`base.ProblemSet`):

    problems = PROBLEM_SETS["countdown"](seed=0, options={"max_numbers": 3})
    prompts = problems.prompts("train", start=0, count=8)     # "test": the held-out split
    fitness = llm.RewardFitness(tokenizer, prompts, problems.reward)   # 1.0 correct, 0.1 format, 0

``SFTFitness(tokenizer, pairs)`` scores members by the log-likelihood of reference completions.
Nothing here imports transformers; a tokenizer and a model are passed in. A user's own prompts
(a JSONL file) are :class:`prompt_file.PromptFile`; a user's reward is ``llm.SafeReward``.
"""
from .arithmetic import ArithmeticOptions, ArithmeticProblems
from .base import CORRECT_REWARD, FORMAT_REWARD, SPLITS, Problem, ProblemSet, Score, answer_tag
from .countdown import CountdownOptions, CountdownProblems
from .gsm8k import DataError, Gsm8kOptions, Gsm8kProblems
from .prompt_file import PromptFile
from .sft import SFTFitness, completion_loglik

PROBLEM_SETS: dict[str, type[ProblemSet]] = {t.name: t for t in (CountdownProblems, ArithmeticProblems, Gsm8kProblems)}


def get_problem_set(name: str) -> type[ProblemSet]:
    """The problem set called ``name``; a ValueError names the bad value and the choices."""
    if name not in PROBLEM_SETS:
        raise ValueError(f"unknown problem set {name!r}; choose one of {sorted(PROBLEM_SETS)}")
    return PROBLEM_SETS[name]


__all__ = ["ArithmeticOptions", "ArithmeticProblems", "CORRECT_REWARD", "CountdownOptions", "CountdownProblems",
           "DataError", "FORMAT_REWARD", "Gsm8kOptions", "Gsm8kProblems", "PROBLEM_SETS", "Problem", "ProblemSet",
           "PromptFile", "SFTFitness", "SPLITS", "Score", "answer_tag", "completion_loglik", "get_problem_set"]
