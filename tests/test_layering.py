"""Dependencies run one way: a subpackage imports only its own layer and the layers before it."""
import ast
from fnmatch import fnmatch
import json
import subprocess
import sys
from pathlib import Path

import pytest

import hyperscalees

ROOT = Path(hyperscalees.__file__).parent
LAYERS = ["noise", "ops", "strategies", "nn", "mup", "models", "functional", "llm", "distributed", "tasks", "engine",
          "benchmarks", "cli"]
TOP = len(LAYERS)  # top-level modules (hyperscalees/__init__.py, __main__.py) may import anything
# optional heavy dependencies: the only files (glob patterns) that may import each one
HEAVY = {"ray": ["distributed/ray.py", "distributed/ray_session.py"], "gymnasium": ["tasks/rl/*.py"],
         "sklearn": ["tasks/digits.py"], "matplotlib": ["engine/plotting.py"], "transformers": ["llm/*.py"],
         "rwkv7_hf": ["llm/load.py"], "vllm": [],
         "trl": [], "argparse": ["cli/*.py"]}  # trl: only the GRPO baseline of the studies, bench/grpo_run.py
FILES = sorted(ROOT.rglob("*.py"))
IMPORTERS = {"import_module", "__import__"}  # importlib.import_module("...") / __import__("...") count as imports


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


def dynamic_import(node: ast.Call, package: list[str]) -> tuple[list[str] | None, str | None] | None:
    """(parts, external) of ``import_module("name"[, __name__ / __package__])`` with a constant name."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name not in IMPORTERS or not node.args or not isinstance(node.args[0], ast.Constant) \
            or not isinstance(node.args[0].value, str):
        return None
    target = node.args[0].value
    if target.startswith("."):
        level = len(target) - len(target.lstrip("."))
        base = package[: len(package) - (level - 1)] if level > 1 else package
        return base + [p for p in target.lstrip(".").split(".") if p], None
    parts = target.split(".")
    return (parts[1:], None) if parts[0] == "hyperscalees" else (None, parts[0])


def imports(path: Path):
    """(line, absolute module parts inside hyperscalees or None, top-level external name) per import,
    ``import`` statements and ``importlib.import_module``/``__import__`` calls with a constant name."""
    package = list(path.relative_to(ROOT).parent.parts)
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            found = dynamic_import(node, package)
            if found is not None:
                yield (node.lineno, *found)
        elif isinstance(node, ast.Import):
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
            for alias in node.names:         # `from .. import noise`, `from . import wire`: maybe a module
                yield node.lineno, parts + [alias.name], None


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
        if external in HEAVY and not any(fnmatch(rel.as_posix(), pattern) for pattern in HEAVY[external]):
            bad.append(f"line {line}: {external} may only be imported in {HEAVY[external] or 'no file yet'}")
    assert not bad, f"{rel}:\n" + "\n".join(bad)


def test_checker_catches_a_violation(tmp_path, monkeypatch):
    """The walker itself works: an ops module importing strategies is flagged."""
    fake = tmp_path / "ops"
    fake.mkdir()
    (fake / "bad.py").write_text("from ..strategies import ESConfig\nimport argparse\n")
    (fake / "sneaky.py").write_text("import importlib\nm = importlib.import_module('hyperscalees.engine.loop')\n"
                                    "r = importlib.import_module('ray')\n")
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
    with pytest.raises(AssertionError, match=r"(?s)hyperscalees.engine.loop .layer 10 > 1.*ray may only"):
        test_imports_respect_layers(fake / "sneaky.py")


def test_heavy_dependency_table_names_files_that_exist():
    for dep, patterns in HEAVY.items():
        for pattern in patterns:
            assert list(ROOT.glob(pattern)), f"HEAVY[{dep!r}] names {pattern!r}, which matches no file"


def test_import_loads_only_the_core():
    """``import hyperscalees`` in a fresh process: no heavy room, no optional dependency; the lazy
    names still resolve."""
    code = ("import sys, json, hyperscalees as hs\n"
            "mods = sorted(m for m in sys.modules if m.startswith('hyperscalees.'))\n"
            "ext = sorted({'ray', 'gymnasium', 'transformers', 'matplotlib', 'sklearn', 'trl'} & set(sys.modules))\n"
            "print(json.dumps([mods, ext]))\n"
            "assert hs.LocalBackend.__name__ == 'LocalBackend' and hs.GraphedStep.__name__ == 'GraphedStep'\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    mods, external = json.loads(out.stdout)
    rooms = {m.split(".")[1] for m in mods}
    assert not rooms & {"engine", "tasks", "benchmarks", "cli", "distributed", "models", "functional", "mup"}, sorted(rooms)
    assert external == []
    assert len(mods) < 60, f"{len(mods)} modules: the core grew"


# Arrows the layer order would allow but the design forbids: (files, as a glob pattern; the room
# they may not import; files of the pattern that are exempt, with the reason).
FACADE = {"nn/module_es.py", "nn/graph.py"}  # the ES facade and its CUDA-graph step drive a strategy
NEVER = [
    ("nn/**", "strategies", FACADE),   # layers and the perturbation read the step's NoiseStore, never the algorithm
    ("ops/**", "noise", set()),        # pure tensor maths: no seeds, no draws
    ("tasks/**", "strategies", set()), ("tasks/**", "nn", set()), ("tasks/**", "functional", set()),
    ("tasks/**", "distributed", set()),  # a task's fitness object follows the recipe protocol by shape
    ("models/**", "nn", set()), ("models/**", "strategies", set()),
    ("distributed/**", "engine", set()), ("distributed/**", "tasks", set()),  # workers get a recipe, not a run
]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_forbidden_arrows(path):
    rel = path.relative_to(ROOT).as_posix()
    bad = [f"line {line}: {rel} may not import hyperscalees.{parts[0]}"
           for line, parts, _ in imports(path) if parts
           for pattern, banned, exempt in NEVER
           if fnmatch(rel, pattern) and rel not in exempt and parts[0] == banned]
    assert not bad, "\n".join(bad)


def test_engine_and_distributed_meet_one_way():
    """The only arrow between the two rooms is engine -> distributed."""
    assert LAYERS.index("distributed") < LAYERS.index("engine")
    engine_uses = any(parts and parts[0] == "distributed" for p in (ROOT / "engine").glob("*.py")
                      for _, parts, _ in imports(p))
    assert engine_uses
    for p in (ROOT / "distributed").glob("*.py"):
        assert not [parts for _, parts, _ in imports(p) if parts and parts[0] in ("engine", "tasks")], p


def module_of(parts: list[str], root: Path) -> str | None:
    """The file an import of ``hyperscalees.<parts>`` runs, relative to ``root``: a module, a package's
    ``__init__.py``, or (``from .x import name``: parts end in a name, not a module) the nearest
    enclosing one. A package's ``__init__.py`` counts like any file: what it re-exports is an edge,
    and a circle through it is a circle."""
    while True:
        for candidate in (root.joinpath(*parts).with_suffix(".py") if parts else None,
                          root.joinpath(*parts, "__init__.py")):
            if candidate is not None and candidate.exists():
                return candidate.relative_to(root).as_posix()
        if not parts:
            return None
        parts = parts[:-1]


def import_cycles(root: Path) -> list[list[str]]:
    """Strongly connected components (Tarjan) of more than one file, or a file importing itself, in the
    graph file -> file it imports; module-level and function-level imports alike."""
    files = sorted(root.rglob("*.py"))
    graph = {}
    for path in files:
        rel = path.relative_to(root).as_posix()
        found = {module_of(parts, root) for _, parts, _ in imports(path) if parts is not None}
        graph[rel] = sorted(m for m in found if m)
    index, low, stack, on_stack, sccs = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1 or v in graph.get(v, []):
                sccs.append(sorted(scc))
    for v in graph:
        if v not in index:
            visit(v)
    return sccs


# fixed by the studies/llm helpers; removed at merge
KNOWN_CYCLES: list[list[str]] = []  # none today


def test_no_import_cycles():
    """No two files of the package import each other, directly or around a circle: an import
    inside a function to dodge a circle still counts (the circle is still there at run time)."""
    cycles = [c for c in import_cycles(ROOT) if c not in KNOWN_CYCLES]
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_cycle_finder_sees_function_level_imports_and_submodules(tmp_path, monkeypatch):
    """engine/loop.py <-> engine/recipe.py as it was (the import inside a function) is a cycle;
    ``from . import wire`` is an edge to wire.py, not to the package."""
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "__init__.py").write_text("from .loop import run\n")
    (tmp_path / "engine" / "loop.py").write_text("from .recipe import TaskRecipe\ndef run(): pass\n")
    (tmp_path / "engine" / "recipe.py").write_text("class TaskRecipe:\n    def __call__(self):\n"
                                                   "        from .loop import build\n")
    (tmp_path / "distributed").mkdir()
    (tmp_path / "distributed" / "__init__.py").write_text("from .ray import RayBackend\n")
    (tmp_path / "distributed" / "ray.py").write_text("from . import wire\nRayBackend = 1\n")
    (tmp_path / "distributed" / "wire.py").write_text("x = 1\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert import_cycles(tmp_path) == [["engine/loop.py", "engine/recipe.py"]]
