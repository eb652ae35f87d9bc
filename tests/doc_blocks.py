"""The fenced code blocks of a Markdown page, for the tests that run the docs.

A ```python block runs unless the line right before its fence is ``<!-- skip: reason -->``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
SKIP = re.compile(r"<!--\s*skip:(.*?)-->\s*$")


@dataclass(frozen=True)
class Block:
    lang: str
    source: str
    line: int                 # first code line, 1-based, in the page
    skip: str | None          # the reason given, "" for a marker without one, None if the block runs


def blocks(path: Path) -> list[Block]:
    text = path.read_text()
    found = []
    for m in FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = SKIP.search(before)
        found.append(Block(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 2,
                           skip.group(1).strip() if skip else None))
    return found


def run_blocks(path: Path, namespace: dict) -> None:
    """Run the page's python blocks that are not skipped, in order, in ``namespace``."""
    for b in blocks(path):
        if b.lang == "python" and b.skip is None:
            # pad with newlines so tracebacks point at the line in the page
            exec(compile("\n" * (b.line - 1) + b.source, str(path), "exec"), namespace)


def pages() -> list[Path]:
    """README.md and every page under docs/ (the generated results.md has no code)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
