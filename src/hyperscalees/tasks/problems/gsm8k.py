"""GSM8K-style word problems from local JSONL files, scored by exact numeric match.

**File format**: one JSON object per line (blank lines are skipped) with two keys:

- ``"question"``: the problem text, a non-empty string;
- ``"answer"``: either GSM8K's worked solution ending ``#### NUMBER`` (the number after the
  last ``####`` is the answer; commas in it are thousands separators), or a bare number
  (``42``, ``-3``, ``2.5``, ``"1,234"``). Other keys are ignored.

The training split reads ``train``, the held-out split ``test`` and, if given, the validation
split ``validation`` (for choosing settings; without it the task has none): files whose
disjointness is theirs to keep. By default both are the small sample shipped with the package
(``data/gsm8k_sample_*.jsonl``: 12 + 6 made-up problems, for tests and demonstrations; the real
GSM8K is ``openai/gsm8k``'s ``main`` split saved as JSONL, which already has this format).
Nothing is downloaded. The seed shuffles the training order only; the held-out split keeps the
file's order.

The prompt is the question, a new line and "Give the final answer as a number inside
<answer></answer>." (through ``template``). The verdict is numeric (``numeric.check_numeric``):
1.0 for the right number, 0.1 for a wrong number inside an answer tag, 0.0 otherwise. A
problem's ``solution`` (the SFT reference) is the worked solution without GSM8K's ``<<...>>``
calculator notes, ending ``<answer>N</answer>``.
"""
from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

from ..base import option
from .base import NUMBER_INSTRUCTION, Problem, Score, ProblemSet, check_template
from .numeric import check_numeric, to_fraction

DATA = Path(__file__).with_name("data")
SAMPLE = {"train": DATA / "gsm8k_sample_train.jsonl", "test": DATA / "gsm8k_sample_test.jsonl"}
CALCULATOR = re.compile(r"<<[^<>]*>>")


class DataError(ValueError):
    """A JSONL file this task cannot read; the message names the file and the line."""


@dataclass(frozen=True)
class Gsm8kOptions:
    train: str = option("", "training JSONL file ({question, answer} per line); empty: the shipped sample",
                        metavar="PATH")
    test: str = option("", "held-out JSONL file; empty: the shipped sample", metavar="PATH")
    validation: str = option("", "validation JSONL file, for tuning; empty: no validation split", metavar="PATH")
    template: str = option("{question}\n", "prompt template with one {question}, e.g. a chat wrapper")

    def __post_init__(self):
        for name in ("train", "test", "validation"):
            if not isinstance(getattr(self, name), (str, Path)):
                raise ValueError(f"{name} must be a path, got {getattr(self, name)!r}")
        check_template(self.template)


def parse_answer(answer, where: str) -> tuple[str, str]:
    """(the final answer as a plain number string, the worked solution without calculator notes or "")."""
    if isinstance(answer, int) and not isinstance(answer, bool):
        answer = str(answer)
    if not isinstance(answer, str):
        raise DataError(f"{where}: 'answer' must be a string or a number, got {answer!r}")
    work, marker, final = answer.rpartition("####")
    final = final.strip()
    if to_fraction(final) is None:
        what = "the text after '####'" if marker else "'answer' (no '####' in it)"
        raise DataError(f"{where}: {what} is not a number: {final[:40]!r}")
    return final.replace(",", ""), CALCULATOR.sub("", work).strip()


def load_jsonl(path: str | Path) -> list[tuple[str, str, str]]:
    """(question, answer, worked solution) per line of ``path``; a DataError names a bad line."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"no such JSONL file: {str(path)!r}")
    rows, seen = [], {}
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                obj = json.loads(line, parse_float=str)  # 2.5 stays exact
            except json.JSONDecodeError as e:
                raise DataError(f"{where}: not JSON ({e.msg})") from None
            if not isinstance(obj, dict) or "question" not in obj or "answer" not in obj:
                raise DataError(f"{where}: need an object with 'question' and 'answer'")
            q = obj["question"]
            if not isinstance(q, str) or not q.strip():
                raise DataError(f"{where}: 'question' must be a non-empty string")
            value, work = parse_answer(obj["answer"], where)
            q = q.strip()
            if q in seen and to_fraction(seen[q][0]) != to_fraction(value):
                raise DataError(f"{where}: repeats the question of line {seen[q][1]} with another answer")
            seen.setdefault(q, (value, n))
            rows.append((q, value, work))
    if not rows:
        raise DataError(f"{path}: no problems in it")
    return rows


class Gsm8kProblems(ProblemSet):
    """Numeric-answer word problems read from JSONL; see the module docstring for the format."""

    name = "gsm8k"
    Options = Gsm8kOptions

    def __init__(self, seed: int = 0, options=None):
        super().__init__(seed, options)
        self.files = {s: Path(getattr(self.options, s)) if getattr(self.options, s) else SAMPLE[s]
                      for s in ("train", "test")}
        if self.options.validation:
            self.files["validation"] = Path(self.options.validation)
        self.rows = {s: load_jsonl(f) for s, f in self.files.items()}
        self.order = list(range(len(self.rows["train"])))
        random.Random(f"gsm8k/{seed}").shuffle(self.order)

    def size(self, split: str) -> int:
        if split not in self.rows:
            raise ValueError(f"gsm8k has no {split} split: give its JSONL file as the task option {split!r}")
        return len(self.rows[split])

    def _make(self, split: str, index: int) -> Problem:
        q, answer, work = self.rows[split][self.order[index] if split == "train" else index]
        solution = (work + " " if work else "") + f"<answer>{answer}</answer>"
        return Problem(prompt=self.options.template.format(question=f"{q}\n{NUMBER_INSTRUCTION}"), answer=answer,
                       solution=solution)

    def check(self, problem: Problem, completion: str) -> Score:
        return check_numeric(problem, completion)
