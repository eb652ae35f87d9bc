"""Checkpointed state is safetensors + JSON: the RL task's state reads back exactly, and nothing in the
library unpickles (or writes pickles) on any path."""
import ast
from pathlib import Path

import pytest
import torch

import hyperscalees as hs
from hyperscalees.engine import build, load_checkpoint, make_config, save_checkpoint
from hyperscalees.engine.tree_io import same_tree

SRC = Path(hs.__file__).parent
PICKLERS = {"pickle", "_pickle", "cPickle", "dill", "cloudpickle", "joblib", "shelve", "marshal", "copyreg"}
# calls that unpickle (or pickle) whatever the module: torch.load/save, numpy's allow_pickle, pandas' read_pickle
CALLS = {("torch", "load"), ("torch", "save"), ("torch", "serialization"), ("pd", "read_pickle"),
         ("pandas", "read_pickle")}


def pickle_uses(source: str, name: str = "<src>") -> list[str]:
    """'file:line what' for every import of a pickling module or call that (un)pickles in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Import):
            found += [f"{name}:{node.lineno} import {a.name}" for a in node.names if a.name.split(".")[0] in PICKLERS]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PICKLERS | {"torch"}:
            names = [a.name for a in node.names]
            if node.module.split(".")[0] in PICKLERS or {"load", "save", "serialization"} & set(names) \
                    or node.module == "torch.serialization":
                found.append(f"{name}:{node.lineno} from {node.module} import {', '.join(names)}")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                (node.value.id, node.attr) in CALLS:
            found.append(f"{name}:{node.lineno} {node.value.id}.{node.attr}")
        elif isinstance(node, ast.keyword) and node.arg in ("allow_pickle", "weights_only", "pickle_module"):
            found.append(f"{name}:{node.lineno} {node.arg}=")
    return found


# Pickles that never touch a file: SafeReward talks to its own child process over pipes.
PIPE_ONLY = {"llm/reward.py", "llm/_reward_worker.py"}


def test_no_pickle_is_read_from_disk_in_the_library():
    files = sorted(f for f in SRC.rglob("*.py") if f.relative_to(SRC).as_posix() not in PIPE_ONLY)
    assert len(files) > 50 and SRC / "engine" / "checkpoint.py" in files
    found = [hit for f in files for hit in pickle_uses(f.read_text(), str(f.relative_to(SRC)))]
    assert found == [], "\n".join(found)


@pytest.mark.parametrize("code", [
    "import torch\nx = torch.load(p, weights_only=True)", "import pickle", "from pickle import loads",
    "import cloudpickle as c", "from torch import load", "from torch.serialization import load",
    "import numpy as np\nnp.load(p, allow_pickle=True)", "import torch\ntorch.save(x, p)",
])
def test_the_scan_finds_what_it_looks_for(code):
    assert pickle_uses(code)


def test_rl_task_state_round_trips_the_checkpoint_exactly(tmp_path):
    pytest.importorskip("gymnasium")
    cfg = make_config("rl", es={"seed": 2, "population": 16}, engine={"steps": 2, "device": "cpu"},
                      options={"env": "CartPole-v1"})
    task, model, es = build(cfg)
    with torch.no_grad():
        for _ in range(2):
            es.tell(hs.evaluate(es, lambda m, lo, hi, step: task.fitness(m, lo, hi, step=step)))
    state = task.state_dict()
    assert float(state["stats"]["count"]) > 0 and state["env_steps"] > 0   # something to lose
    save_checkpoint(tmp_path, es, cfg.to_dict(), task_state=state)
    ck = load_checkpoint(tmp_path)
    assert same_tree(ck.task, state)
    assert same_tree(ck.strategy, es.state_dict()["strategy"])
    fresh = build(cfg)[0]
    fresh.load_state_dict(ck.task)
    assert same_tree(fresh.state_dict(), state)
