"""A user's own prompts: a JSONL file, one ``{"prompt": ..., other fields}`` object a line.

``train llm --dataset FILE.jsonl --reward FILE.py:FN`` trains on these. Each line's other fields
reach the reward as keyword arguments, ``FN(prompt, completion, **fields)``, as TRL passes dataset
columns: an ``"answer"`` field becomes ``answer=``. Nothing is appended to a prompt: it is given to
the model exactly as written (a chat template, an answer format: write them into the prompt).

The held-out split is chosen by content, as the built-in problem sets do (``base.split_of``): a
prompt whose hash lands in the test bucket (one in eight) is held out whatever line it is on, so
reordering or growing the file never moves a prompt between training and evaluation. The rest
trains, in file order, cycling when the steps outrun it. A file that cannot be used (missing, not
JSON, a line without a ``"prompt"`` string, no prompt left to train on or to hold out) is refused
when it is read, in one line naming the file and the line, before any run starts.
"""
from __future__ import annotations

import json
from pathlib import Path

from .base import split_of

RESERVED = ("completion", "completions", "prompts")  # names the reward's own arguments take


class PromptFile:
    """The prompts of a JSONL file, split by content into ``"train"`` and ``"test"``, and their fields."""

    def __init__(self, path: str | Path):
        self.path = Path(path).expanduser()
        self._fields: dict[str, dict] = {}
        for number, line in self._lines():
            self._add(number, line)
        if not self._fields:
            raise ValueError(f"dataset {str(self.path)!r} holds no prompts (one JSON object a line, "
                             "with a \"prompt\" string)")
        self.splits = {"train": [], "test": []}
        for prompt in self._fields:
            self.splits["test" if split_of(prompt) == "test" else "train"].append(prompt)
        for split, what in (("train", "to train on"), ("test", "held out (one prompt in 8, chosen by content)")):
            if not self.splits[split]:
                raise ValueError(f"dataset {str(self.path)!r}: none of its {len(self._fields)} prompts is {what}; "
                                 "add more lines")

    def _lines(self):
        if not self.path.is_file():
            raise ValueError(f"dataset {str(self.path)!r} does not exist (a JSONL file of prompts)")
        try:
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"cannot read dataset {str(self.path)!r}: {e}") from None
        return [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]

    def _add(self, number: int, line: str) -> None:
        where = f"dataset {str(self.path)!r} line {number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where} is not JSON ({e.msg}): {line[:60]!r}") from None
        if not isinstance(row, dict):
            raise ValueError(f"{where} is not a JSON object with a \"prompt\": {line[:60]!r}")
        prompt = row.pop("prompt", None)
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError(f"{where} has no \"prompt\" string (got {prompt!r})")
        clash = [k for k in row if k in RESERVED]
        if clash:
            raise ValueError(f"{where}: the field {clash[0]!r} would clash with the reward's own argument; rename it")
        if self._fields.get(prompt, row) != row:
            raise ValueError(f"{where} repeats an earlier prompt with other fields: {prompt[:60]!r}")
        self._fields.setdefault(prompt, row)

    def __len__(self) -> int:
        return len(self._fields)

    def prompts(self, split: str, start: int = 0, count: int = 1) -> list[str]:
        """Prompts ``start, ..., start + count - 1`` of ``split`` (``"train"`` or ``"test"``), wrapping."""
        if split not in self.splits:
            raise ValueError(f"unknown split {split!r}; a dataset has {sorted(self.splits)}")
        rows = self.splits[split]
        return [rows[(start + i) % len(rows)] for i in range(count)]

    def held_out(self, count: int) -> list[str]:
        """The first ``count`` held-out prompts (all of them when there are fewer)."""
        return self.splits["test"][:count]

    def fields(self, prompt: str) -> dict:
        """The other fields of ``prompt``'s line (what the reward receives as keyword arguments)."""
        try:
            return dict(self._fields[prompt])
        except (KeyError, TypeError):
            raise KeyError(f"{str(prompt)[:80]!r} is not a prompt of dataset {str(self.path)!r}") from None
