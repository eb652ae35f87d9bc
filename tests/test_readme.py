"""README.md's usage code cannot rot: its ```python blocks run in order, in one namespace."""
import re
from pathlib import Path

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
