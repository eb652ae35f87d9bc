"""State trees as safetensors + JSON: exact round trips, clear refusals, and a reader that trusts nothing."""
import collections
import json
import random

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from hyperscalees.engine.tree_io import (FORMAT, TreeFormatError, flatten, read_tree, same_tree, unflatten,
                                         write_flat, write_tree)


def every_leaf():
    """A tree with every kind of node a strategy or task state may hold."""
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    nan_payload = torch.tensor([0x7FC00123, -0x00800000], dtype=torch.int32).view(torch.float32)  # NaN, -inf bits
    return {
        "step": 7, "big": 2**70, "neg": -3, "none": None, "yes": True, "no": False, "name": "ünï/côde \"q\"",
        "floats": [0.1, -0.0, float("nan"), float("inf"), -float("inf"), 5e-324, 1.7976931348623157e308],
        "betas": (0.9, 0.999),
        "empty": {"list": [], "tuple": (), "dict": {}, "one": (1,)},
        "state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.randn(3, 4)}, 1: {"step": torch.tensor(3.0)}},
        "clash": {0: torch.ones(2), "0": torch.zeros(2)},          # int and str keys that spell one path
        "dtypes": {str(dt): (torch.arange(6) % 3 - 1).to(dt).reshape(2, 3)
                   for dt in (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool,
                              torch.float16, torch.bfloat16, torch.float32, torch.float64)},
        "scalar_int8": torch.tensor(-5, dtype=torch.int8),
        "empty_tensor": torch.zeros(0, 3, dtype=torch.float64),
        "bits": nan_payload,
        "views": [base, base[1], base.t(), base[:, ::2]],           # shared storage and non-contiguous
        "same_object": [base, base],
        "grad": torch.ones(2, requires_grad=True),
        "nested": [[{"a": (None, [torch.tensor([True, False])])}]],
    }


def test_every_leaf_type_round_trips_exactly(tmp_path):
    tree = every_leaf()
    write_tree(tmp_path / "s.safetensors", tree, metadata={"step": "7"})
    back, meta = read_tree(tmp_path / "s.safetensors")
    assert same_tree(tree, back)
    assert meta == {"step": "7", "format": FORMAT}
    assert list(back["state"]) == [0, 1] and list(back["clash"]) == [0, "0"]
    assert type(back["betas"]) is tuple and type(back["empty"]["list"]) is list
    assert back["scalar_int8"].dim() == 0 and back["state"][0]["step"].dim() == 0
    assert back["big"] == 2**70 and type(back["big"]) is int and back["floats"][1].hex() == "-0x0.0p+0"
    assert back["bits"].view(torch.int32).tolist() == [0x7FC00123, -0x00800000]  # NaN payload kept
    assert torch.equal(back["views"][2], tree["views"][2]) and back["views"][2].is_contiguous()
    assert not back["grad"].requires_grad
    with safe_open(str(tmp_path / "s.safetensors"), "pt") as f:  # plain safetensors, keys spell the path
        assert {"state/0/exp_avg", "clash/0", "clash/0#2", "views/1"} <= set(f.keys())


def test_without_copies_only_whole_storages_pass_through(tmp_path):
    """copy=False (the checkpoint's write-at-once path) copies views and repeats, and still round-trips."""
    tree = every_leaf()
    tensors, spec = flatten(tree, copy=False)
    assert tensors["state/0/exp_avg"] is not tree["state"][0]["exp_avg"]              # detached, not copied:
    assert tensors["state/0/exp_avg"].data_ptr() == tree["state"][0]["exp_avg"].data_ptr()
    assert tensors["views/0"].data_ptr() == tree["views"][0].data_ptr()              # the base passes through,
    assert tensors["views/1"].data_ptr() != tree["views"][1].data_ptr()              # its views are copied,
    assert tensors["same_object/0"].data_ptr() != tree["same_object"][0].data_ptr()  # and so is a repeat
    write_flat(tmp_path / "s.safetensors", tensors, spec)                            # no shared-memory refusal
    assert same_tree(read_tree(tmp_path / "s.safetensors")[0], tree)


def test_the_written_tree_is_a_snapshot(tmp_path):
    t = torch.zeros(3)
    tensors, spec = flatten({"t": t})
    t.add_(1)                                                       # later training must not reach the file
    assert torch.equal(unflatten(spec, tensors)["t"], torch.zeros(3))
    assert json.loads(json.dumps(spec)) == spec                     # the spec is plain JSON


def test_same_tree_sees_every_difference():
    a = {"k": (1, 0.5, torch.tensor([0.0, 1.0]))}
    assert same_tree(a, {"k": (1, 0.5, torch.tensor([0.0, 1.0]))})
    for b in ({"k": [1, 0.5, torch.tensor([0.0, 1.0])]}, {"k": (1.0, 0.5, torch.tensor([0.0, 1.0]))},
              {"k": (True, 0.5, torch.tensor([0.0, 1.0]))}, {"k": (1, 0.5, torch.tensor([-0.0, 1.0]))},
              {"k": (1, 0.5, torch.tensor([0.0, 1.0], dtype=torch.float64))}, {"j": (1, 0.5, torch.tensor([0.0, 1.0]))},
              {"k": (1, 0.5000000000000001, torch.tensor([0.0, 1.0]))}, {"k": (1, 0.5, torch.tensor([[0.0, 1.0]]))}):
        assert not same_tree(a, b), b
    assert not same_tree({0: 1}, {"0": 1}) and same_tree(collections.OrderedDict(a=1), {"a": 1})


@pytest.mark.parametrize("tree,where,what", [
    ({"a": {"b": [1, object()]}}, "a/b/1", "builtins.object"),
    ({"x": {1, 2}}, "x", "builtins.set"),
    ({"n": collections.namedtuple("P", "x")(1)}, "n", "P"),
    ({"k": {True: 1}}, "k", "keys must be str or int"),
    ({"k": {1.5: 1}}, "k", "keys must be str or int"),
    ({"s": torch.zeros(3).to_sparse()}, "s", "sparse"),
    ({"c": torch.zeros(2, dtype=torch.complex128)}, "c", "complex128"),
])
def test_unstorable_leaves_are_refused_naming_their_path(tree, where, what):
    with pytest.raises(TreeFormatError, match=what) as e:
        flatten(tree)
    assert repr(where) in str(e.value) and "\n" not in str(e.value)


def test_numpy_is_refused_not_pickled():
    np = pytest.importorskip("numpy")
    with pytest.raises(TreeFormatError, match="numpy.ndarray at 'obs/mean'"):
        flatten({"obs": {"mean": np.zeros(3)}})


@pytest.mark.parametrize("spec,tensors,says", [
    ({"tensor": "gone"}, {}, "'gone', which the file does not hold"),
    ({"list": [{"tensor": "t"}, {"tensor": "t"}]}, {"t": torch.zeros(1)}, "named twice"),
    ({"dict": []}, {"t": torch.zeros(1)}, "not named by the tree, e.g. 't'"),
    ({"dict": [["a", 1], ["a", 2]]}, {}, "key 'a' appears twice"),
    ({"dict": [[True, 1]]}, {}, "malformed dict item"),
    ({"dict": [["a"]]}, {}, "malformed dict item"),
    ({"dict": {"a": 1}}, {}, "malformed dict at '\\(root\\)'"),
    ({"list": [1, {"float": "0x1.zp+1"}]}, {}, "bad float at '1'"),
    ({"list": [1.5]}, {}, "malformed node at '0'"),
    ({"set": []}, {}, "malformed node"),
    ({"list": [], "tuple": []}, {}, "malformed node"),
])
def test_malformed_trees_are_named(spec, tensors, says):
    with pytest.raises(TreeFormatError, match=says):
        unflatten(spec, tensors)


def raw_file(path, tree_text, tensors=None, fmt=FORMAT):
    save_file(tensors or {}, str(path), metadata={"format": fmt, "tree": tree_text} if tree_text is not None
              else {"format": fmt})


@pytest.mark.parametrize("tree_text,fmt,says", [
    (None, FORMAT, "tree is missing"),
    ("{\"list\": [1,", FORMAT, "not JSON"),
    ("{\"float\": NaN}", FORMAT, "not JSON"),
    ("[" * 100_000 + "]" * 100_000, FORMAT, "JSON|too deeply"),
    ("{\"list\": []}", "other/1", "not a state file of this library"),
])
def test_a_file_with_a_bad_header_is_refused(tmp_path, tree_text, fmt, says):
    raw_file(tmp_path / "f", tree_text, fmt=fmt)
    with pytest.raises(TreeFormatError, match=says):
        read_tree(tmp_path / "f")


def mutate(text: str, rng: random.Random) -> str:
    chars = list(text)
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(chars))
        op = rng.random()
        if op < 0.4:
            chars[i] = rng.choice('{}[]",:0123456789.-abefilnrstuxyzp#/ ')
        elif op < 0.7:
            del chars[i]
        else:
            chars.insert(i, rng.choice('{}[]",:01tn'))
    return "".join(chars)


def test_fuzzed_trees_give_a_tree_or_a_tree_format_error(tmp_path):
    """Random edits of a real tree's JSON: a tree or a TreeFormatError, never another exception."""
    tree = {"step": 3, "rule": {"m": {0: torch.randn(2, 3)}, "betas": (0.9, 0.95), "f": [None, True, "s"]}}
    tensors, spec = flatten(tree)
    text, rng, outcomes = json.dumps(spec), random.Random(0), collections.Counter()
    for _ in range(300):
        try:
            spec_m = json.loads(mutate(text, rng))
        except ValueError:
            outcomes["json"] += 1
            continue
        try:
            unflatten(spec_m, tensors)
            outcomes["accepted"] += 1                     # e.g. a changed number: valid, if different
        except TreeFormatError:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 30, outcomes             # the fuzzer reaches the validator, not just json
    for _ in range(40):                                   # and through the file reader
        raw_file(tmp_path / "f", mutate(text, rng), tensors)
        try:
            read_tree(tmp_path / "f")
        except TreeFormatError:
            pass
