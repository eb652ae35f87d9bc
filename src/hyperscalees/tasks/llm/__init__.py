"""Tasks with verifiable rewards for LLM fine-tuning, the SFT fitness, and a safe user-reward wrapper.

``LLM_TASKS`` maps a name to its task class (:class:`base.VerifiableTask`):

    task = LLM_TASKS["countdown"](seed=0, options={"max_numbers": 3})
    prompts = task.prompts("train", start=0, count=8)     # "test": the held-out split
    fitness = llm.RewardFitness(tokenizer, prompts, task.reward)   # 1.0 correct, 0.1 format, 0

``SafeReward("pkg.mod:fn", timeout=5.0)`` wraps any ``reward(prompt, completion) -> float``;
``SFTFitness(tokenizer, pairs)`` scores members by the log-likelihood of reference completions.
Nothing here imports transformers; a tokenizer and a model are passed in.
"""
from .arithmetic import ArithmeticOptions, ArithmeticTask
from .base import CORRECT_REWARD, FORMAT_REWARD, SPLITS, Problem, Score, VerifiableTask, answer_tag
from .countdown import CountdownOptions, CountdownTask
from .gsm8k import DataError, Gsm8kOptions, Gsm8kTask
from .reward import RewardLoadError, SafeReward
from .sft import SFTFitness, completion_loglik

LLM_TASKS: dict[str, type[VerifiableTask]] = {t.name: t for t in (CountdownTask, ArithmeticTask, Gsm8kTask)}


def get_llm_task(name: str) -> type[VerifiableTask]:
    """The task class called ``name``; a ValueError names the bad value and the choices."""
    if name not in LLM_TASKS:
        raise ValueError(f"unknown LLM task {name!r}; choose one of {sorted(LLM_TASKS)}")
    return LLM_TASKS[name]


__all__ = ["ArithmeticOptions", "ArithmeticTask", "CORRECT_REWARD", "CountdownOptions", "CountdownTask", "DataError",
           "FORMAT_REWARD", "Gsm8kOptions", "Gsm8kTask", "LLM_TASKS", "Problem", "RewardLoadError", "SFTFitness",
           "SPLITS", "SafeReward", "Score", "VerifiableTask", "answer_tag", "completion_loglik", "get_llm_task"]
