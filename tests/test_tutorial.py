"""docs/tutorial.md cannot rot: run every ```python block in order, in one namespace."""
import re
from pathlib import Path


DOC = Path(__file__).resolve().parents[1] / "docs" / "tutorial.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def blocks():
    text = DOC.read_text()
    for m in FENCE.finditer(text):
        yield m.group(1), m.group(2), text.count("\n", 0, m.start()) + 2  # first code line


def test_every_code_block_is_tested_python():
    langs = {lang for lang, _, _ in blocks()}
    assert langs <= {"python", "text", ""}, f"untested code fences {langs - {'python', 'text', ''}}"
    code = [src for lang, src, _ in blocks() if lang == "python"]
    assert len(code) >= 8
    assert sum(src.count("assert") for src in code) >= 15   # the doc checks its own claims


def test_tutorial_runs_and_its_asserts_pass(capsys):
    namespace = {"__name__": "tutorial"}
    for lang, src, line in blocks():
        if lang != "python":
            continue
        # pad with newlines so tracebacks point at the line in tutorial.md
        exec(compile("\n" * (line - 1) + src, str(DOC), "exec"), namespace)
    out = capsys.readouterr().out
    assert "cosine" in out and "MSE" in out
    assert namespace["es"].step == 103                       # rewound to step 100 and replayed 3 steps
    assert namespace["final"] < 0.02
