"""README.md's usage code cannot rot: its ```python blocks run in order, in one namespace."""
import re
from pathlib import Path

import torch

from hyperscalees.nn import unregister_layer

DOC = Path(__file__).resolve().parents[1] / "README.md"
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def test_readme_python_blocks_run():
    text = DOC.read_text()
    blocks = [(m.group(1), text.count("\n", 0, m.start()) + 2) for m in FENCE.finditer(text)]
    assert len(blocks) >= 3
    namespace = {"__name__": "readme"}
    try:
        for src, line in blocks:
            exec(compile("\n" * (line - 1) + src, str(DOC), "exec"), namespace)
    finally:
        if "GainLayer" in namespace:  # the example registers a layer: leave the registry as found
            from hyperscalees.nn.layers.base import _REGISTRY
            for _, layer in list(_REGISTRY):
                if type(layer) is namespace["GainLayer"]:
                    unregister_layer(layer)
    assert namespace["es"].step == 0


def xor_loss(namespace) -> float:
    model, x, y = namespace["model"], namespace["X"], namespace["Y"]
    with torch.no_grad():
        return float(((model(x) - y) ** 2).mean())


def test_readme_first_example_trains():
    """The first example is what a newcomer copies: run as written, it learns (the loss falls well
    below where the same seed starts); with its loop cut to no steps, it does not."""
    src = FENCE.search(DOC.read_text()).group(1)
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
