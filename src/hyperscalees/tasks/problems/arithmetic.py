"""Multi-step arithmetic word problems with one whole-number answer, generated from a seed.

A problem starts with a count ("Ana has 7 marbles.") and applies 2-4 steps, each a sentence:
buy ``b`` more (+b), give ``b`` away (-b), buy ``b`` bags of ``c`` (+b·c), double or triple
(×2, ×3), split equally into ``k`` groups and keep one (÷k). Operands are small integers
(at most ``max_number``); every intermediate count is a whole number from 1 to 999, so the
answer is one exactly. The problem's ``solution`` works the steps ("7 + 3 = 10. ...") and ends
``<answer>N</answer>``: the reference completion for SFT warm starts.

The verdict is numeric (``numeric.check_numeric``): the last number in the last answer tag,
else the last number in the completion, compared exactly with the answer. Reward: 1.0
correct, 0.1 for a wrong number inside an answer tag, 0.0 otherwise. The validation and test
splits are disjoint from the training split and each other by content (names and objects aside;
see ``base.split_of``).
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from ..base import option
from .base import NUMBER_INSTRUCTION, Problem, Score, ProblemSet, check_template, split_of
from .numeric import check_numeric

NAMES = ("Ana", "Ben", "Carla", "Dev", "Emma", "Farid", "Gita", "Hugo", "Iris", "Jon", "Kemal", "Lena")
THINGS = ("apples", "marbles", "stickers", "coins", "books", "pencils", "cards", "shells")
STEPS = ("add", "sub", "bags", "scale", "split")
LIMIT = 999  # every count stays in 1..LIMIT


@dataclass(frozen=True)
class ArithmeticOptions:
    min_steps: int = option(2, "fewest steps after the starting count (>= 1)")
    max_steps: int = option(4, "most steps after the starting count")
    max_number: int = option(20, "largest operand in a step or starting count (>= 2)")
    train_size: int = option(10_000, "distinct training problems (indices wrap)")
    test_size: int = option(1_000, "distinct problems in the test split, and in the validation split (indices wrap)")
    template: str = option("{question}\n", "prompt template with one {question}, e.g. a chat wrapper")

    def __post_init__(self):
        for name in ("min_steps", "max_steps", "max_number", "train_size", "test_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if self.max_steps < self.min_steps:
            raise ValueError(f"need min_steps <= max_steps, got {self.min_steps}..{self.max_steps}")
        if not 2 <= self.max_number <= 99:
            raise ValueError(f"max_number must be from 2 to 99, got {self.max_number}")
        check_template(self.template)


def _step(rng: random.Random, kind: str, x: int, top: int, name: str, thing: str):
    """(sentence, worked line, new count, canonical key) of one step from count ``x``, or None
    if this kind of step cannot apply to ``x``."""
    if kind == "add":
        b = rng.randint(1, top)
        y, text, work = x + b, f"{name} buys {b} more {thing}.", f"{x} + {b} = {x + b}."
    elif kind == "sub":
        if x < 2:
            return None
        b = rng.randint(1, min(top, x - 1))
        y, text, work = x - b, f"{name} gives {b} {thing} to a friend.", f"{x} - {b} = {x - b}."
    elif kind == "bags":
        b, c = rng.randint(2, min(5, top)), rng.randint(2, top)
        y = x + b * c
        text = f"{name} buys {b} bags with {c} {thing} in each bag."
        work = f"{b} * {c} = {b * c}. {x} + {b * c} = {y}."
        b = f"{b}x{c}"
    elif kind == "scale":
        b = rng.choice((2, 3))
        y, text, work = x * b, f"{name} {'doubles' if b == 2 else 'triples'} the number of {thing}.", f"{x} * {b} = {x * b}."
    else:
        ks = [k for k in range(2, 6) if x % k == 0]
        if not ks:
            return None
        b = rng.choice(ks)
        y = x // b
        text, work = f"{name} splits the {thing} equally into {b} groups and keeps one group.", f"{x} / {b} = {y}."
    if not 1 <= y <= LIMIT:
        return None
    return text, work, y, f"{kind}{b}"


class ArithmeticProblems(ProblemSet):
    """Seeded multi-step word problems; see the module docstring."""

    name = "arithmetic"
    Options = ArithmeticOptions

    def size(self, split: str) -> int:
        return self.options.train_size if split == "train" else self.options.test_size  # test and validation

    def _make(self, split: str, index: int) -> Problem:
        o = self.options
        rng = random.Random(f"arithmetic/{self.seed}/train/{index}" if split == "train" else f"arithmetic/{split}/{index}")
        for _ in range(10_000):
            name, thing = rng.choice(NAMES), rng.choice(THINGS)
            x = rng.randint(2, o.max_number)
            sentences, work, key = [f"{name} has {x} {thing}."], [], [str(x)]
            for _ in range(rng.randint(o.min_steps, o.max_steps)):
                step = None
                while step is None:  # some kind always applies: "sub" for x >= 2, "add" for x = 1
                    step = _step(rng, rng.choice(STEPS), x, o.max_number, name, thing)
                sentence, line, x, k = step
                sentences.append(sentence)
                work.append(line)
                key.append(k)
            if split_of("arithmetic:" + ",".join(key)) != split:
                continue
            story = " ".join(sentences) + f" How many {thing} does {name} have now? " + NUMBER_INSTRUCTION
            return Problem(prompt=o.template.format(question=story), answer=str(x),
                           solution=" ".join(work) + f" <answer>{x}</answer>")
        raise RuntimeError(f"no {split} arithmetic problem found")  # 1 in 8 lands in test: unreachable

    def check(self, problem: Problem, completion: str) -> Score:
        return check_numeric(problem, completion)
