"""Numeric final answers: read the number a completion ends on and compare it exactly.

The answer is the last number inside the last ``<answer>...</answer>`` of the completion; without
such a tag (or with a tag holding no number), the last number anywhere in the completion. A
number is written ``42``, ``-7``, ``1,234`` (commas only as thousands separators) or ``3.50``;
it is compared as an exact fraction, so ``3.5`` equals ``3.50`` and ``7/2`` is read as ``2``.
A completion is *well formed* when it has an answer tag holding a number.
"""
from __future__ import annotations

import re
from fractions import Fraction

from .base import Problem, Score, answer_tag

NUMBER = re.compile(r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?!\d)")
MAX_DIGITS = 64  # a "number" longer than this is no answer (and never costs a big-integer parse)


def last_number(text: str) -> str | None:
    """The last number written in ``text`` (``-12``, ``1,234``, ``3.50``), or None."""
    found = None
    for found in NUMBER.finditer(text):
        pass
    return found.group(0) if found else None


def to_fraction(number: str) -> Fraction | None:
    """``"1,234.50"`` -> Fraction(2469, 2); None if it is not a number in the form above."""
    number = number.strip()
    if not NUMBER.fullmatch(number) or len(number) > MAX_DIGITS:
        return None
    return Fraction(number.replace(",", ""))


def extract_answer(completion: str) -> tuple[Fraction | None, bool]:
    """(the completion's final number or None, whether it came from a well-formed answer tag)."""
    if not isinstance(completion, str):
        return None, False
    tag = answer_tag(completion)
    inside = last_number(tag) if tag is not None else None
    if inside is not None:
        value = to_fraction(inside)
        return value, value is not None
    anywhere = last_number(completion)
    return (to_fraction(anywhere) if anywhere is not None else None), False


def check_numeric(problem: Problem, completion: str) -> Score:
    """Correct when the final number equals ``problem.answer`` exactly."""
    value, formatted = extract_answer(completion)
    return Score(formatted=formatted, correct=value is not None and value == to_fraction(problem.answer))
