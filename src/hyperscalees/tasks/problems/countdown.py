"""Countdown: reach a target from given numbers with + - * / and parentheses; an exact verifier.

**The rules** :func:`verify` applies (each is tested):

- The expression uses any subset of the given numbers, each at most as often as it is given
  (``[2, 2, 3]`` allows ``2 * 2 * 3``; ``[2, 3]`` refuses ``2 * 2``). Not every number is needed.
- Integers as written: digits only, no sign, no decimal point, no leading zero (``0`` itself is
  fine when it is given). A literal that is not among the given numbers is invalid, however
  large.
- Binary ``+ - * /`` only (``×``, ``÷`` and ``−`` are read as ``*``, ``/`` and ``-``), and
  parentheses. **No unary minus or plus** (``-3 + 5``, ``3 * -2`` and ``+3`` are invalid):
  the game combines the numbers it is given, and a sign would let ``a - b`` be written
  ``-b + a``. No ``**`` or ``^``, no implicit multiplication, no ``=``, no other character
  but spaces and tabs.
- Usual precedence; equal precedence evaluates left to right (``8 / 4 / 2`` is 1,
  ``8 - 4 - 2`` is 2).
- Exact rational arithmetic (``fractions.Fraction``): intermediate fractions are allowed
  (``(1 + 1 / 2) * 4`` is 6); the value must equal the target exactly. Division by zero
  is invalid.
- Bounded work whatever the input: more than 200 characters is invalid before anything is
  read (a megabyte string costs one ``len``), parentheses nest at most 32 deep (checked
  before the parser descends, so no RecursionError), and since every literal must be a
  given number there are at most as many operands as numbers: no exponent, no huge
  intermediate value. Nothing is ``eval``-ed and no ``ast`` is built.

**The reward** of a completion: 1.0 if the last ``<answer>...</answer>`` holds an expression
that :func:`verify` accepts, else 0.1 if that tag's content parses as an expression under the
grammar above (numbers, value and length limits aside: right format, wrong answer), else 0.0.

**The problems**: ``n`` numbers (``min_numbers..max_numbers``) drawn from
``min_value..max_value``; the target is the value of a random expression over all of them
(``use_all``) or over a random subset of at least two, where every intermediate value is a
positive integer; it lies in ``min_target..max_target`` and is none of the numbers. That
expression is the problem's ``solution``, so every problem is solvable (tested). The validation
and test splits are disjoint from the training split and each other by content (see ``base.split_of``).

Why not ``reasoning-gym``'s Countdown: its scorer ``eval``s through sympy (``**``, no size bound),
compares floats, requires every number, and its seeds' problems overlap; the LLM guide says where.
"""
from __future__ import annotations

import operator
import random
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

from ..base import option
from .base import Problem, Score, ProblemSet, answer_tag, check_template, split_of

MAX_CHARS = 200
MAX_DEPTH = 32
OPERATORS = "+-*/"
ALIASES = {"×": "*", "÷": "/", "−": "-"}
SPACES = " \t"


class ExpressionError(ValueError):
    """An expression the verifier refuses; the message says why."""


def tokenize(expression: str) -> list[str]:
    """Integer literals, operators and parentheses; refuses anything else, and too long input."""
    if not isinstance(expression, str):
        raise ExpressionError(f"an expression is a string, got {type(expression).__name__}")
    if len(expression) > MAX_CHARS:
        raise ExpressionError(f"longer than {MAX_CHARS} characters")
    tokens, i, n = [], 0, len(expression)
    while i < n:
        c = ALIASES.get(expression[i], expression[i])
        if c in SPACES:
            i += 1
        elif "0" <= c <= "9":
            j = i
            while j < n and "0" <= expression[j] <= "9":
                j += 1
            literal = expression[i:j]
            if len(literal) > 1 and literal[0] == "0":
                raise ExpressionError(f"number with a leading zero: {literal!r}")
            tokens.append(literal)
            i = j
        elif c in OPERATORS or c in "()":
            tokens.append(c)
            i += 1
        else:
            raise ExpressionError(f"character {expression[i]!r} is not allowed")
    if not tokens:
        raise ExpressionError("empty expression")
    return tokens


class _Parser:
    """expr := term (('+' | '-') term)* ; term := factor (('*' | '/') factor)* ;
    factor := INTEGER | '(' expr ')'. Evaluates as it parses, left to right."""

    def __init__(self, tokens: list[str], numbers: Sequence[int] | None):
        self.tokens, self.pos, self.depth = tokens, 0, 0
        self.left: dict[int, int] | None = None
        if numbers is not None:
            self.left = {}
            for x in numbers:
                self.left[x] = self.left.get(x, 0) + 1

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str | None:
        token = self.peek()
        self.pos += 1
        return token

    def parse(self) -> Fraction | None:
        value = self.expr()
        if self.pos != len(self.tokens):
            raise ExpressionError(f"unexpected {self.tokens[self.pos]!r} at token {self.pos}")
        return value

    def expr(self):
        value = self.term()
        while self.peek() in ("+", "-"):
            op, right = self.take(), self.term()
            if value is not None:
                value = value + right if op == "+" else value - right
        return value

    def term(self):
        value = self.factor()
        while self.peek() in ("*", "/"):
            op, right = self.take(), self.factor()
            if value is None:
                continue
            if op == "*":
                value = value * right
            elif right == 0:
                raise ExpressionError("division by zero")
            else:
                value = value / right
        return value

    def factor(self):
        token = self.take()
        if token == "(":
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise ExpressionError(f"parentheses nested deeper than {MAX_DEPTH}")
            value = self.expr()
            if self.take() != ")":
                raise ExpressionError("unbalanced parentheses")
            self.depth -= 1
            return value
        if token is None:
            raise ExpressionError("expression ends where a number or '(' should be")
        if not token.isdigit():
            what = "unary minus/plus" if token in "+-" else repr(token)
            raise ExpressionError(f"{what} where a number or '(' should be (token {self.pos - 1})")
        if self.left is None:  # syntax only
            return None
        value = int(token)  # at most MAX_CHARS digits
        if self.left.get(value, 0) == 0:
            raise ExpressionError(f"{token} is not among the given numbers (or is used more often than given)")
        self.left[value] -= 1
        return Fraction(value)


def evaluate(expression: str, numbers: Sequence[int]) -> Fraction:
    """The exact value of ``expression`` under the rules, using only ``numbers``; an
    ExpressionError says why an expression is refused."""
    numbers = _check_numbers(numbers)
    return _Parser(tokenize(expression), numbers).parse()


def parses(expression: str) -> bool:
    """Whether ``expression`` is well formed (grammar, characters, length and depth limits),
    whatever numbers it uses and whatever its value."""
    try:
        _Parser(tokenize(expression), None).parse()
    except ExpressionError:
        return False
    return True


def verify(numbers: Sequence[int], target: int, expression: str) -> bool:
    """Whether ``expression`` reaches ``target`` from ``numbers`` under the module's rules."""
    try:
        return evaluate(expression, numbers) == target
    except ExpressionError:
        return False


def _check_numbers(numbers) -> list[int]:
    """The given numbers as Python ints (NumPy integers are fine); floats, bools and negatives are refused."""
    try:
        ints = [operator.index(x) for x in numbers if not isinstance(x, bool)]
    except TypeError:
        ints = []
    if len(ints) != len(numbers) or any(x < 0 for x in ints):
        raise ValueError(f"numbers must be integers >= 0, got {list(numbers)!r}")
    return ints


# -- problems ---------------------------------------------------------------------------------
PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}
DEFAULT_TEMPLATE = "{question}\n"


@dataclass(frozen=True)
class CountdownOptions:
    min_numbers: int = option(3, "fewest numbers given in a problem (>= 2)")
    max_numbers: int = option(4, "most numbers given in a problem")
    min_value: int = option(1, "smallest number drawn (>= 1)")
    max_value: int = option(100, "largest number drawn")
    min_target: int = option(100, "smallest target (>= 1)")
    max_target: int = option(999, "largest target")
    use_all: bool = option(True, "build the target from every number (else from a random subset of at least two); "
                                 "answers may use any subset either way")
    train_size: int = option(10_000, "distinct training problems (indices wrap)")
    test_size: int = option(1_000, "distinct problems in the test split, and in the validation split (indices wrap)")
    template: str = option(DEFAULT_TEMPLATE, "prompt template with one {question}, e.g. a chat wrapper")

    def __post_init__(self):
        for name in ("min_numbers", "max_numbers", "min_value", "max_value", "min_target", "max_target",
                     "train_size", "test_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if self.min_numbers < 2 or self.max_numbers < self.min_numbers:
            raise ValueError(f"need 2 <= min_numbers <= max_numbers, got {self.min_numbers}..{self.max_numbers}")
        if self.max_value < self.min_value:
            raise ValueError(f"need min_value <= max_value, got {self.min_value}..{self.max_value}")
        if self.max_target < self.min_target:
            raise ValueError(f"need min_target <= max_target, got {self.min_target}..{self.max_target}")
        if self.max_numbers * (len(str(self.max_value)) + 5) > MAX_CHARS:
            raise ValueError(f"{self.max_numbers} numbers of up to {self.max_value} may not fit the verifier's "
                             f"{MAX_CHARS}-character limit")
        check_template(self.template)


def question(numbers: Sequence[int], target: int) -> str:
    """The task statement for ``numbers`` and ``target``."""
    return (f"Using the numbers {', '.join(map(str, numbers))}, write an arithmetic expression that equals {target}. "
            "Use only + - * / and parentheses, and each number at most once. "
            "Give the expression inside <answer></answer>.")


def _combine(rng: random.Random, items: list[tuple[int, str, int]]) -> None:
    """Replace two random items (value, text, precedence) by their combination under a random
    operator whose result is a positive integer (``+`` and ``*`` always are)."""
    i, j = rng.sample(range(len(items)), 2)
    (a, ta, pa), (b, tb, pb) = items[i], items[j]
    if a < b:
        (a, ta, pa), (b, tb, pb) = (b, tb, pb), (a, ta, pa)
    ops = ["+", "*"] + (["-"] if a > b else []) + (["/"] if a % b == 0 else [])
    op = rng.choice(ops)
    value = {"+": a + b, "-": a - b, "*": a * b, "/": a // b}[op]
    p = PRECEDENCE[op]
    left = f"({ta})" if pa < p else ta
    right = f"({tb})" if pb < p or (pb == p and op in "-/") else tb
    for k in sorted((i, j), reverse=True):
        items.pop(k)
    items.append((value, f"{left} {op} {right}", p))


class CountdownProblems(ProblemSet):
    """Countdown problems with the exact verifier; see the module docstring for rules and rewards."""

    name = "countdown"
    Options = CountdownOptions
    MAX_TRIES = 20_000

    def size(self, split: str) -> int:
        return self.options.train_size if split == "train" else self.options.test_size  # test and validation

    def _make(self, split: str, index: int) -> Problem:
        o = self.options
        rng = random.Random(f"countdown/{self.seed}/train/{index}" if split == "train" else f"countdown/{split}/{index}")
        for _ in range(self.MAX_TRIES):
            n = rng.randint(o.min_numbers, o.max_numbers)
            numbers = [rng.randint(o.min_value, o.max_value) for _ in range(n)]
            used = numbers if o.use_all else rng.sample(numbers, rng.randint(2, n))
            items = [(x, str(x), 3) for x in used]
            while len(items) > 1:
                _combine(rng, items)
            target, expression, _ = items[0]
            if not o.min_target <= target <= o.max_target or target in numbers:
                continue
            if split_of(f"countdown:{sorted(numbers)}:{target}") != split:
                continue
            rng.shuffle(numbers)
            return Problem(prompt=o.template.format(question=question(numbers, target)), answer=str(target),
                           solution=f"<answer>{expression}</answer>", numbers=tuple(numbers))
        raise ValueError(f"no {split} problem found in {self.MAX_TRIES} tries: targets {o.min_target}..{o.max_target} "
                         f"are out of reach of {o.min_numbers}..{o.max_numbers} numbers in "
                         f"{o.min_value}..{o.max_value}; widen the ranges")

    def check(self, problem: Problem, completion: str) -> Score:
        tag = answer_tag(completion)
        if tag is None:
            return Score(formatted=False, correct=False)
        return Score(formatted=parses(tag), correct=verify(problem.numbers, int(problem.answer), tag))
