"""Nested state (an optimizer's or a task's state dict) as one safetensors file, no pickle.

A strategy's state is a tree: dicts (str or int keys: torch optimizers key their moments by
parameter index), lists, tuples (Adam's ``betas``), tensors of any dtype, and Python scalars.
``torch.save`` writes such a tree as a pickle, and reading a pickle can run code. Here the
tree is split in two:
  * the tensors, each copied out contiguous (safetensors refuses views and shared storage),
    stored in a safetensors file under a key that spells its path, e.g.
    ``rule/optimizer/optimizers/0/state/0/exp_avg``;
  * the shape of the tree, as JSON in the file's metadata header under ``"tree"``. Every node
    is tagged so the tree reads back exactly as it was written::

        null, true, false, 3, "text"         None, bool, int, str as themselves
        {"float": "0x1.999999999999ap-4"}     a float, by float.hex: bit-exact, nan and inf included
        {"dict": [[key, node], ...]}          a dict in order; a key is a JSON string or integer
        {"list": [node, ...]}  {"tuple": [node, ...]}
        {"tensor": "rule/step"}               the tensor stored under that key (dtype, shape kept)

Reading trusts nothing: a malformed node, a key that names no tensor, a tensor no node names,
or a type tag it does not know raises :class:`TreeFormatError` with the path where it went wrong.
What is not preserved: tensor identity (two references to one tensor read back as two equal
tensors), strides (tensors read back contiguous), and dict subclasses (an OrderedDict reads back
a dict with the same order). Any other leaf type is refused when written, naming its path.
"""
from __future__ import annotations

import json
import os

import torch
from safetensors import safe_open
from safetensors.torch import save_file

FORMAT = "hyperscalees.tree/1"
TREE_KEY, FORMAT_KEY = "tree", "format"
_TAGS = ("float", "dict", "list", "tuple", "tensor")
# dtypes safetensors stores (names differ across torch versions, hence getattr)
DTYPES = frozenset(getattr(torch, n) for n in (
    "bool", "uint8", "int8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "bfloat16",
    "float32", "float64", "complex64", "float8_e4m3fn", "float8_e5m2") if hasattr(torch, n))


class TreeFormatError(ValueError):
    """A tree cannot be written (unsupported leaf) or a stored tree is malformed; names the path."""


def _show(path: tuple) -> str:
    return "/".join(str(p) for p in path) or "(root)"


def flatten(tree, copy: bool = True) -> tuple[dict[str, torch.Tensor], object]:
    """(tensors by key, JSON-able spec) of ``tree``; every tensor a fresh contiguous CPU copy.

    ``copy=False`` (for writing at once, as a checkpoint does) passes through a tensor that is
    already a whole contiguous CPU storage of its own, and copies only the others (views,
    storage seen before, other devices): a 9.4 M-parameter Adam state is then not copied twice.
    """
    tensors: dict[str, torch.Tensor] = {}
    storages: set[int] = set()

    def walk(node, path: tuple):
        if node is None or type(node) in (bool, int, str):
            return node
        if type(node) is float:
            return {"float": node.hex()}
        if isinstance(node, torch.Tensor):
            return {"tensor": _store(tensors, node, path, None if copy else storages)}
        if isinstance(node, dict):
            for k in node:
                if type(k) not in (str, int):
                    raise TreeFormatError(f"key {k!r} at {_show(path)!r} is a {type(k).__name__}: keys must be "
                                          "str or int")
            return {"dict": [[k, walk(v, (*path, k))] for k, v in node.items()]}
        if type(node) in (list, tuple):
            return {type(node).__name__: [walk(v, (*path, i)) for i, v in enumerate(node)]}
        raise TreeFormatError(f"cannot store the {type(node).__module__}.{type(node).__qualname__} at "
                              f"{_show(path)!r}: state must be tensors, dicts, lists, tuples and "
                              "None/bool/int/float/str")

    return tensors, walk(tree, ())


def _store(tensors: dict, t: torch.Tensor, path: tuple, storages: set[int] | None) -> str:
    if t.layout != torch.strided or t.is_quantized or t.device.type == "meta" or t.dtype not in DTYPES:
        raise TreeFormatError(f"cannot store the tensor at {_show(path)!r} ({t.dtype}, {t.layout}, "
                              f"{t.device.type}): only dense tensors of dtypes safetensors knows")
    key, k = _show(path), 1
    while key in tensors:  # int key 0 and str key "0" spell the same path
        k += 1
        key = f"{_show(path)}#{k}"
    t = t.detach()
    if storages is not None and _owns_storage(t) and t.untyped_storage().data_ptr() not in storages:
        storages.add(t.untyped_storage().data_ptr())
        tensors[key] = t
    else:  # one copy, whatever the device, strides or sharing: a fresh contiguous CPU tensor
        tensors[key] = torch.empty(t.shape, dtype=t.dtype).copy_(t)
    return key


def _owns_storage(t: torch.Tensor) -> bool:
    """A contiguous CPU tensor spanning its whole storage: safetensors can write it as it is."""
    return (t.device.type == "cpu" and t.numel() > 0 and t.is_contiguous() and t.storage_offset() == 0
            and t.untyped_storage().nbytes() == t.numel() * t.element_size())


def unflatten(spec, tensors: dict[str, torch.Tensor]):
    """The tree ``flatten`` gave ``spec`` for; every tensor in ``tensors`` must be named exactly once."""
    used: set[str] = set()

    def walk(node, path: tuple):
        if node is None or type(node) in (bool, int, str):
            return node
        if not (isinstance(node, dict) and len(node) == 1 and next(iter(node)) in _TAGS):
            raise TreeFormatError(f"malformed node at {_show(path)!r}: expected null, a boolean, an integer, a "
                                  f"string or one of the tags {list(_TAGS)}, got {_brief(node)}")
        tag, body = next(iter(node.items()))
        if tag == "float":
            try:
                return float.fromhex(body)
            except (TypeError, ValueError, OverflowError):
                raise TreeFormatError(f"bad float at {_show(path)!r}: {_brief(body)}") from None
        if tag == "tensor":
            if not isinstance(body, str) or body not in tensors:
                raise TreeFormatError(f"the tensor at {_show(path)!r} names {_brief(body)}, which the file "
                                      "does not hold")
            if body in used:
                raise TreeFormatError(f"tensor {body!r} is named twice (again at {_show(path)!r})")
            used.add(body)
            return tensors[body]
        if not isinstance(body, list):
            raise TreeFormatError(f"malformed {tag} at {_show(path)!r}: expected a list, got {_brief(body)}")
        if tag in ("list", "tuple"):
            items = [walk(v, (*path, i)) for i, v in enumerate(body)]
            return items if tag == "list" else tuple(items)
        out = {}
        for pair in body:
            if not (isinstance(pair, list) and len(pair) == 2 and type(pair[0]) in (str, int)):
                raise TreeFormatError(f"malformed dict item at {_show(path)!r}: expected [str or int key, node], "
                                      f"got {_brief(pair)}")
            if pair[0] in out:
                raise TreeFormatError(f"key {pair[0]!r} appears twice at {_show(path)!r}")
            out[pair[0]] = walk(pair[1], (*path, pair[0]))
        return out

    tree = walk(spec, ())
    if len(used) != len(tensors):
        extra = sorted(set(tensors) - used)
        raise TreeFormatError(f"{len(extra)} tensor(s) not named by the tree, e.g. {extra[0]!r}")
    return tree


def _brief(x) -> str:
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def write_tree(path: str | os.PathLike, tree, metadata: dict[str, str] | None = None) -> None:
    """``tree`` as one safetensors file at ``path``; ``metadata`` (str -> str) is stored beside it."""
    write_flat(path, *flatten(tree), metadata)


def write_flat(path: str | os.PathLike, tensors: dict[str, torch.Tensor], spec,
               metadata: dict[str, str] | None = None) -> None:
    """What :func:`write_tree` writes, from ``flatten``'s output (flatten first to fail before writing)."""
    header = {**(metadata or {}), FORMAT_KEY: FORMAT,
              TREE_KEY: json.dumps(spec, separators=(",", ":"), allow_nan=False)}
    save_file(tensors, str(path), metadata=header)


def read_tree(path: str | os.PathLike, device: str = "cpu") -> tuple[object, dict[str, str]]:
    """(tree, metadata) of a file :func:`write_tree` wrote, tensors on ``device``.

    Raises :class:`TreeFormatError` when the file is a readable safetensors file whose tree is
    missing or malformed; safetensors' own errors (truncated, garbage) and OSError pass through.
    """
    with safe_open(str(path), framework="pt", device=device) as f:
        metadata = dict(f.metadata() or {})
        if metadata.get(FORMAT_KEY) != FORMAT:
            raise TreeFormatError(f"not a state file of this library (format {_brief(metadata.get(FORMAT_KEY))}, "
                                  f"expected {FORMAT!r})")
        try:
            spec = json.loads(metadata.pop(TREE_KEY), parse_constant=_no_constant)
        except (KeyError, ValueError, RecursionError) as e:
            raise TreeFormatError(f"its tree is missing or not JSON ({type(e).__name__})") from None
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    try:
        return unflatten(spec, tensors), metadata
    except RecursionError:
        raise TreeFormatError("its tree is nested too deeply") from None


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")



def same_tree(a, b) -> bool:
    """Whether two trees are identical as :func:`flatten` sees them: the same container types
    (tuple is not list), key types (0 is not "0"), scalar types and float bits, and tensors of
    the same dtype, shape and bytes (so -0.0 differs from 0.0 and NaN equals the same NaN)."""
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
                and bool(torch.equal(_bytes(a), _bytes(b))))
    if isinstance(a, dict) and isinstance(b, dict):
        return ([(type(k), k) for k in a] == [(type(k), k) for k in b]
                and all(same_tree(a[k], b[k]) for k in a))
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_tree(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return a.hex() == b.hex()  # nan.hex() == "nan": Python floats carry no NaN payload worth comparing
    return a == b


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return torch.empty(t.shape, dtype=t.dtype).copy_(t.detach()).reshape(-1).view(torch.uint8)
