"""Nested dicts of tensors as pytrees, and one independent integer noise key per leaf.

HyperscaleES keeps params, ``es_map``, ``scan_map`` and ``es_tree_key`` as JAX pytrees
of the same structure. PyTorch has no pytree registry worth depending on, so here a
tree is a nested ``dict`` whose leaves are tensors (or ints / tuples for the maps); a
bare leaf at the root is a tree too. Paths are tuples of keys, walked in sorted order
(JAX's order for dicts) so every function sees the leaves in the same sequence.
"""
from __future__ import annotations

import itertools
from typing import Any, Callable, Iterator

import torch

from ..noise.keys import fold_in, name_key


def is_leaf(node: Any) -> bool:
    return not isinstance(node, dict)


def tree_items(tree: Any, prefix: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """(path, leaf) pairs in sorted-key order."""
    if is_leaf(tree):
        yield prefix, tree
        return
    for k in sorted(tree, key=str):
        yield from tree_items(tree[k], prefix + (k,))


def tree_get(tree: Any, path: tuple) -> Any:
    for k in path:
        if not isinstance(tree, dict) or k not in tree:
            raise KeyError(f"path {'/'.join(map(str, path))} is missing from a tree")
        tree = tree[k]
    return tree


def tree_map(fn: Callable, tree: Any, *others: Any) -> Any:
    """Apply ``fn(leaf, *other_leaves)`` leaf-wise; ``others`` must share the structure."""
    if is_leaf(tree):
        return fn(tree, *others)
    return {k: tree_map(fn, v, *(o[k] for o in others)) for k, v in tree.items()}


def tree_replace(tree: Any, new_leaves: dict[tuple, Any]) -> Any:
    """A copy of ``tree`` with the leaves at the given paths replaced (others are shared)."""
    if () in new_leaves:
        return new_leaves[()]
    out = dict(tree)
    heads = {p[0] for p in new_leaves}
    for h in heads:
        out[h] = tree_replace(tree[h], {p[1:]: v for p, v in new_leaves.items() if p[0] == h})
    return out


def path_name(path: tuple) -> str:
    return "/".join(map(str, path))


def simple_es_tree_key(params: Any, base_key: int, scan_map: Any) -> Any:
    """es_tree_key: one independent int key per leaf of ``params``; per-slice keys where scanned.

    The leaf key is ``name_key(base_key, "a/b/c")``: it depends on the leaf's path, not on
    how many leaves precede it (HyperscaleES splits one key over the flattened leaves, so
    adding a parameter there re-keys every later one). A leaf whose ``scan_map`` entry is
    ``(0,)`` (or ``(0, 1)``, ...) gets an int64 tensor of keys over those leading axes,
    ``fold_in(leaf_key, i[, j])``, so each stacked layer draws its own noise.
    """
    base_key = int(base_key)
    out = {}
    for path, leaf in tree_items(params):
        axes = tuple(tree_get(scan_map, path)) if scan_map is not None else ()
        if axes != tuple(range(len(axes))):
            raise ValueError(f"{path_name(path)}: scan_map axes must be leading (0,), (0, 1), ...; got {axes}")
        key = name_key(base_key, path_name(path))
        if axes:
            shape = tuple(leaf.shape[: len(axes)])
            flat = [fold_in(key, *idx) for idx in ndindex(shape)]
            key = torch.tensor(flat, dtype=torch.int64).view(shape)
        out[path] = key
    return tree_replace(params, out)


def ndindex(shape: tuple) -> Iterator[tuple]:
    """Every index of an array of ``shape``, row-major; one empty index for shape ()."""
    return itertools.product(*(range(n) for n in shape))
