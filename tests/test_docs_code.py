"""Every ```python block in README.md and docs/ runs in the suite; skips are marked and explained.

Each page's blocks run in order, in one namespace, in a fresh interpreter (a page may register
layers or set torch state). README.md and docs/tutorial.md run in test_readme.py and
test_tutorial.py, which also check what their code computed.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from doc_blocks import ROOT, blocks, pages

OWN_TESTS = {"README.md": "test_readme.py", "tutorial.md": "test_tutorial.py"}
LANGS = {"python", "bash", "text", ""}   # only python runs; bash and text are shown, not run
MAX_SKIPS = 3


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_fences_are_known_and_skips_explained():
    skips = []
    for page in pages():
        for b in blocks(page):
            assert b.lang in LANGS, f"{rel(page)}:{b.line}: unknown fence language {b.lang!r}"
            if b.skip is not None:
                assert b.lang == "python", f"{rel(page)}:{b.line}: only python blocks are run, so only they can skip"
                assert len(b.skip) >= 10, f"{rel(page)}:{b.line}: <!-- skip: ... --> needs a reason"
                skips.append(f"{rel(page)}:{b.line}")
    assert len(skips) <= MAX_SKIPS, f"keep skipped blocks few: {skips}"


def test_pages_with_their_own_test_have_one():
    for page in pages():
        if page.name in OWN_TESTS:
            assert (ROOT / "tests" / OWN_TESTS[page.name]).exists()


RUNNER = """
import sys
from pathlib import Path
from doc_blocks import run_blocks
run_blocks(Path(sys.argv[1]), {"__name__": "docs"})
"""


@pytest.mark.parametrize("page", [p for p in pages() if p.name not in OWN_TESTS
                                  and any(b.lang == "python" and b.skip is None for b in blocks(p))],
                         ids=rel)
def test_page_code_runs(page):
    env = dict(os.environ)
    paths = [str(ROOT / "tests"), str(ROOT / "src"), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    done = subprocess.run([sys.executable, "-W", "error", "-c", RUNNER, str(page)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{rel(page)} failed:\n{done.stderr[-4000:]}"
