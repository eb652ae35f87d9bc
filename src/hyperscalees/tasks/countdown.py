"""Countdown's verifier at its short address, ``hyperscalees.tasks.countdown.verify(numbers, target,
expression) -> bool``. The task, its rules and its reward live in ``tasks/problems/countdown.py``."""
from .problems.countdown import CountdownOptions, CountdownProblems, ExpressionError, evaluate, parses, verify

__all__ = ["CountdownOptions", "CountdownProblems", "ExpressionError", "evaluate", "parses", "verify"]
