"""README.md's usage code cannot rot: its ```python blocks run in order, in one namespace.

A block marked ``<!-- skip: reason -->`` (the Ray loop, which tests/distributed runs) is left out.
"""
from doc_blocks import ROOT, blocks, run_blocks

DOC = ROOT / "README.md"


def test_readme_python_blocks_run():
    code = [b for b in blocks(DOC) if b.lang == "python"]
    assert len(code) >= 2 and sum(b.skip is None for b in code) >= 1
    namespace = {"__name__": "readme"}
    run_blocks(DOC, namespace)
    assert namespace["es"].step == 100          # the first example ran its 100 steps
