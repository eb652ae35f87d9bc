"""README.md's usage code cannot rot: its ```python blocks run in order, in one namespace, and the
first example, the one a newcomer copies, trains.

A block marked ``<!-- skip: reason -->`` (the Ray loop, which tests/distributed runs) is left out.
"""
import re

import torch

from doc_blocks import ROOT, blocks, run_blocks

DOC = ROOT / "README.md"


def test_readme_python_blocks_run():
    code = [b for b in blocks(DOC) if b.lang == "python"]
    assert len(code) >= 2 and sum(b.skip is None for b in code) >= 1
    namespace = {"__name__": "readme"}
    run_blocks(DOC, namespace)
    assert namespace["es"].step == 100          # the first example ran its 100 steps


def xor_loss(namespace) -> float:
    model, x, y = namespace["model"], namespace["X"], namespace["Y"]
    with torch.no_grad():
        return float(((model(x) - y) ** 2).mean())


def test_readme_first_example_trains():
    """Run as written, the first example learns (the loss falls well below where the same seed
    starts); with its loop cut to no steps, it does not."""
    first = next(b for b in blocks(DOC) if b.lang == "python" and b.skip is None)
    src = first.source
    loops = re.findall(r"range\((\d+)\)", src)
    assert loops, "the first example has no training loop"
    runs = {}
    for name, code in (("untrained", re.sub(r"range\(\d+\)", "range(0)", src, count=1)), ("trained", src)):
        torch.manual_seed(0)
        namespace = {"__name__": "readme"}
        exec(compile(code, str(DOC), "exec"), namespace)
        runs[name] = (xor_loss(namespace), namespace["es"].step)
    (before, steps0), (after, steps) = runs["untrained"], runs["trained"]
    assert steps0 == 0 and steps == int(loops[0])
    assert after < 0.1 * before, (before, after)
