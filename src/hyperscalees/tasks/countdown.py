"""Countdown's verifier at its short address, ``hyperscalees.tasks.countdown.verify(numbers, target,
expression) -> bool``. The task, its rules and its reward live in ``tasks/llm/countdown.py``."""
from .llm.countdown import CountdownOptions, CountdownTask, ExpressionError, evaluate, parses, verify

__all__ = ["CountdownOptions", "CountdownTask", "ExpressionError", "evaluate", "parses", "verify"]
