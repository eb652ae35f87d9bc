"""What an LLM task with a verifiable reward is: indexed problems in three splits, a prompt, a check.

A task holds three splits: ``"train"``, ``"validation"`` (for choosing settings) and ``"test"``
(the held-out one, reported). Problem ``i`` of a split is a pure function of (task options, seed,
split, i): any process that builds the same task asks for the same problems, so a recipe can
rebuild it on a Ray worker and a resumed run reads what an uninterrupted one would. The seed picks
the training problems only: the validation and test splits are the same for every seed, so
accuracies of runs with different seeds compare. Generated tasks assign a problem to a split by
its content (:func:`split_of`), so a model trained on any number of training problems has never
seen a validation or test problem: tuning on validation accuracy rewards what generalises, not
what was memorised. Indices wrap at the split's size (``size(split)``), so a run can cycle
through a finite training set as the reference does.

``reward(prompt, completion) -> float`` is the ``reward`` of ``llm.RewardFitness``. It looks the
prompt up among the problems this task object has handed out (``problems`` / ``prompts``), so
give the model the prompt exactly as the task wrote it; a chat wrapper belongs in the task's
``template`` option, not around the prompt afterwards. An unknown prompt is a KeyError. The
lookup table (at most the sum of the splits' sizes) travels with a pickled task,
so a reward built from a list of prompts also scores on a Ray worker.

Every task scores a completion the same way (:class:`Score`): 1.0 if its answer is correct,
else 0.1 if it is well formed (an ``<answer>...</answer>`` whose content parses as the task's
kind of answer), else 0.0.
"""
from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass
from typing import ClassVar, Iterator, Sequence

from ..base import make_options

SPLITS = ("train", "validation", "test")
CORRECT_REWARD = 1.0
FORMAT_REWARD = 0.1
NUMBER_INSTRUCTION = "Give the final answer as a number inside <answer></answer>."


@dataclass(frozen=True)
class Problem:
    """One problem: ``prompt`` (what the model continues), ``answer`` (the truth, as text),
    ``solution`` (a completion that scores 1.0: the reference for SFT warm starts) and, for
    Countdown, ``numbers`` (the numbers given)."""
    prompt: str
    answer: str
    solution: str
    numbers: tuple[int, ...] = ()


@dataclass(frozen=True)
class Score:
    """A completion's verdict: ``formatted`` (a well-formed answer tag) and ``correct``."""
    formatted: bool
    correct: bool

    @property
    def reward(self) -> float:
        """1.0 if correct, else 0.1 if formatted, else 0.0."""
        return CORRECT_REWARD if self.correct else FORMAT_REWARD if self.formatted else 0.0


def answer_tag(completion: str) -> str | None:
    """The content of the last complete ``<answer>...</answer>`` in ``completion`` (stripped), or None."""
    if not isinstance(completion, str):
        return None
    end = completion.rfind("</answer>")
    if end < 0:
        return None
    start = completion.rfind("<answer>", 0, end)
    if start < 0:
        return None
    return completion[start + len("<answer>"):end].strip()


def split_of(key: str, holdout: int = 8) -> str:
    """The split a problem belongs to, from its content alone: by a stable hash, ``"test"`` for
    one key in ``holdout``, ``"validation"`` for another one in ``holdout``, ``"train"`` for the
    rest. Generators draw candidates until one lands in the asked split, so no training problem
    ever equals a validation or test one, whatever the seeds, indices or difficulty settings."""
    bucket = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") % holdout
    return "test" if bucket == 0 else "validation" if bucket == 1 else "train"


def check_template(template: str) -> None:
    """A prompt template must hold ``{question}`` exactly once and no other field."""
    if not isinstance(template, str) or template.count("{question}") != 1:
        raise ValueError(f"template must contain '{{question}}' once, got {template!r}")
    try:
        template.format(question="")
    except (KeyError, IndexError, ValueError) as e:
        raise ValueError(f"template {template!r} has fields other than {{question}} "
                         "(write literal braces as {{ and }})") from e


class ProblemSet:
    """Indexed problems in a train and a held-out split, and the reward of a completion.

    Subclasses set ``name`` and ``Options`` (a frozen dataclass; a dict is accepted too) and
    implement :meth:`size`, :meth:`_make` and :meth:`check`.
    """

    name: ClassVar[str] = "abstract"
    Options: ClassVar[type]

    def __init__(self, seed: int = 0, options=None):
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        self.seed = seed
        if options is None:
            options = self.Options()
        elif isinstance(options, dict):
            options = make_options(self.Options, options)
        elif not isinstance(options, self.Options):
            raise TypeError(f"options must be a {self.Options.__name__} or a dict, got {type(options).__name__}")
        self.options = options
        self._issued: dict[str, Problem] = {}

    # -- what concrete tasks implement --------------------------------------------------
    def size(self, split: str) -> int:
        """How many distinct indices ``split`` has (indices wrap at it)."""
        raise NotImplementedError

    def _make(self, split: str, index: int) -> Problem:
        """Problem ``index`` (already wrapped) of ``split``."""
        raise NotImplementedError

    def check(self, problem: Problem, completion: str) -> Score:
        """The verdict on ``completion`` as an answer to ``problem``."""
        raise NotImplementedError

    # -- shared ----------------------------------------------------------------------
    def problem(self, split: str, index: int) -> Problem:
        """Problem ``index`` of ``split`` (one of :data:`SPLITS`); indices wrap at ``size(split)``."""
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; choose one of {list(SPLITS)}")
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ValueError(f"index must be an integer >= 0, got {index!r}")
        p = self._make(split, index % self.size(split))
        self._issued.setdefault(p.prompt, p)
        return p

    def problems(self, split: str, start: int = 0, count: int = 1) -> list[Problem]:
        """Problems ``start, ..., start + count - 1`` of ``split``."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"count must be an integer >= 0, got {count!r}")
        return [self.problem(split, start + i) for i in range(count)]

    def prompts(self, split: str, start: int = 0, count: int = 1) -> list[str]:
        """The prompts of :meth:`problems`."""
        return [p.prompt for p in self.problems(split, start, count)]

    def _distinct(self, split: str) -> Iterator[Problem]:
        """``split``'s problems in index order, each repeat skipped."""
        seen = set()
        for index in range(self.size(split)):
            p = self.problem(split, index)
            if p.prompt not in seen:
                seen.add(p.prompt)
                yield p

    def distinct_problems(self, split: str, count: int) -> list[Problem]:
        """The first ``count`` distinct problems of ``split``, in index order (a repeat is skipped).

        Scoring reads these: a small problem space (3-number Countdown holds ~430 distinct test
        problems) makes indices repeat problems, and a score over repeats counts some problems twice
        and overstates its own precision. Refused, naming the split's distinct count, beyond it."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"count must be a whole number >= 1, got {count!r}")
        out = list(itertools.islice(self._distinct(split), count))
        if len(out) < count:
            raise ValueError(f"{self.name}: the {split} split holds {len(out)} distinct problems, fewer than the "
                             f"{count} asked (its options set how many; a score over repeats would count some twice)")
        return out

    def distinct_size(self, split: str) -> int:
        """How many distinct problems ``split`` holds (its ``size`` indices may repeat some)."""
        return sum(1 for _ in self._distinct(split))

    def problem_of(self, prompt: str) -> Problem:
        """The problem this task handed out with exactly this prompt."""
        try:
            return self._issued[prompt]
        except (KeyError, TypeError):
            raise KeyError(f"{self.name}: this prompt was not handed out by this task (ask for it with "
                           f"problems()/prompts() first, and pass it unchanged): {str(prompt)[:80]!r}") from None

    def score(self, prompt: str, completion: str) -> Score:
        """The verdict on ``completion`` for the problem whose prompt is ``prompt``."""
        return self.check(self.problem_of(prompt), completion)

    def reward(self, prompt: str, completion: str) -> float:
        """``score(prompt, completion).reward``: 1.0 correct, 0.1 well formed, 0.0 otherwise."""
        return self.score(prompt, completion).reward

    def accuracy(self, prompts: Sequence[str], completions: Sequence[str]) -> float:
        """The share of correct completions (one per prompt)."""
        if len(prompts) != len(completions) or not prompts:
            raise ValueError(f"need one completion per prompt, got {len(prompts)} prompts "
                             f"and {len(completions)} completions")
        return sum(self.score(p, c).correct for p, c in zip(prompts, completions)) / len(prompts)
