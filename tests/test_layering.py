"""Dependencies run one way: a subpackage imports only its own layer and the layers before it."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

import hyperscalees

ROOT = Path(hyperscalees.__file__).parent
LAYERS = ["noise", "ops", "strategies", "nn", "models", "functional", "tasks", "engine", "distributed", "benchmarks",
          "cli"]
TOP = len(LAYERS)  # top-level modules (hyperscalees/__init__.py, __main__.py) may import anything
HEAVY = {"ray": {"distributed/ray.py"}, "transformers": {"nn/hf.py"}, "vllm": {"distributed/ray.py", "nn/hf.py"},
         "argparse": {f"cli/{p.name}" for p in (ROOT / "cli").glob("*.py")}}
FILES = sorted(ROOT.rglob("*.py"))


def layer_of(parts: list[str]) -> int:
    """Layer of a module path inside hyperscalees, e.g. ['ops', 'update'] -> 1."""
    if not parts:
        return root_layer()
    if parts[0] not in LAYERS:
        if (ROOT / f"{parts[0]}.py").exists():
            return TOP                       # a top-level module such as __main__.py
        if not (ROOT / parts[0]).is_dir():   # a name defined in __init__.py, e.g. __version__
            return root_layer()
        raise AssertionError(f"unknown subpackage {parts[0]!r}: give it a place in LAYERS")
    return LAYERS.index(parts[0])


def root_layer() -> int:
    """Importing the package root (`from .. import __version__`) imports what its __init__ imports."""
    init = ROOT / "__init__.py"
    if not init.exists():
        return -1
    return max([layer_of(p) for _, p, _ in imports(init) if p] or [-1])


def imports(path: Path):
    """(line, absolute module parts inside hyperscalees or None, top-level external name) per import."""
    package = list(path.relative_to(ROOT).parent.parts)
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "hyperscalees":
                    yield node.lineno, parts[1:], None
                else:
                    yield node.lineno, None, parts[0]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                parts = base + (node.module.split(".") if node.module else [])
            elif node.module.split(".")[0] == "hyperscalees":
                parts = node.module.split(".")[1:]
            else:
                yield node.lineno, None, node.module.split(".")[0]
                continue
            if not parts:                    # `from .. import noise` names subpackages
                for alias in node.names:
                    yield node.lineno, [alias.name], None
            else:
                yield node.lineno, parts, None


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_respect_layers(path):
    rel = path.relative_to(ROOT)
    own = layer_of(list(rel.parts[:-1]) or ([rel.stem] if rel.stem != "__init__" else []))
    if len(rel.parts) == 1:
        own = TOP
    bad = []
    for line, parts, external in imports(path):
        if parts is not None and layer_of(parts) > own:
            bad.append(f"line {line}: {'.'.join(['hyperscalees', *parts])} (layer {layer_of(parts)} > {own})")
        if external in HEAVY and rel.as_posix() not in HEAVY[external]:
            bad.append(f"line {line}: {external} may only be imported in {sorted(HEAVY[external])}")
    assert not bad, f"{rel}:\n" + "\n".join(bad)


def test_checker_catches_a_violation(tmp_path, monkeypatch):
    """The walker itself works: an ops module importing strategies is flagged."""
    fake = tmp_path / "ops"
    fake.mkdir()
    (fake / "bad.py").write_text("from ..strategies import ESConfig\nimport argparse\n")
    (tmp_path / "__init__.py").write_text("from .nn import EGGROLL\n__version__ = '0'\n")
    (tmp_path / "strategies").mkdir()
    (tmp_path / "strategies" / "bad.py").write_text("from .. import __version__\n")
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "ok.py").write_text("from .. import __version__\nfrom ..nn import x\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    with pytest.raises(AssertionError, match="strategies.*layer 2 > 1"):
        test_imports_respect_layers(fake / "bad.py")
    with pytest.raises(AssertionError, match="argparse may only"):
        test_imports_respect_layers(fake / "bad.py")
    with pytest.raises(AssertionError, match="hyperscalees.__version__ .layer 3 > 2"):
        test_imports_respect_layers(tmp_path / "strategies" / "bad.py")   # the root imports nn: a cycle
    test_imports_respect_layers(tmp_path / "engine" / "ok.py")


def test_import_needs_only_torch():
    code = ("import sys, hyperscalees; heavy = {'ray', 'transformers', 'vllm'} & set(sys.modules);"
            "print(sorted(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# Arrows the layer order would allow but the design forbids (module path prefix -> layer it may not import).
NEVER = [
    ("nn/layers/", "strategies"),  # layers read the step's NoiseStore, never the algorithm
    ("nn/perturb.py", "strategies"),
    ("nn/es_map.py", "strategies"),
    ("ops/", "noise"),             # pure tensor maths: no seeds, no draws
    ("tasks/", "strategies"), ("tasks/", "nn"), ("tasks/", "functional"),
    ("models/", "nn"), ("models/", "strategies"),
    ("engine/", "distributed"),    # the engine receives a backend; the CLI builds it
]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_forbidden_arrows(path):
    rel = path.relative_to(ROOT).as_posix()
    bad = [f"line {line}: {rel} may not import hyperscalees.{parts[0]}"
           for line, parts, _ in imports(path) if parts
           for prefix, banned in NEVER if rel.startswith(prefix) and parts[0] == banned]
    assert not bad, "\n".join(bad)
