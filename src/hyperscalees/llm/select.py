"""What evolves in a pretrained LM: an ``es_map`` chosen by name patterns.

Hugging Face models come with every parameter trainable (``requires_grad=True``); left as
is, ES would perturb the embeddings, the head and every norm. The reference's LLM runs
evolve only the matrices inside the blocks, at rank 1, and freeze the rest; that is the
default here: every weight of a low-rank-capable layer (Linear, GPT-2's Conv1D, any layer
registered with low-rank weights) except the input embedding and the output head, biases
frozen. ``include`` / ``exclude`` (glob patterns over parameter names) narrow or widen it.

:func:`what_evolves` is the one place that picks among that default and the small sets zeroth-order
search can afford (a random subspace, adapters, norms and biases; ``nn/subspace.py``,
``nn/adapters.py``, ``nn/select.py``): ``train llm --subspace/--adapters/--evolve`` read it.
"""
from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Iterable

from torch import nn

from ..nn.adapters import add_adapters
from ..nn.es_map import owned_parameters
from ..nn.layers import layer_for
from ..nn.select import norms_and_biases
from ..nn.subspace import install_subspace

# Weights a known model reads outside its module's forward (the perturbation could not reach them):
# RWKV-7's decay projection w_lora.lora.2 is applied by the time-mix through F.linear directly.
READ_OUTSIDE_FORWARD = ("*.w_lora.lora.2.weight",)


def _matrices(model: nn.Module) -> list[str]:
    """Names of the weights a registered layer perturbs at low rank (canonical names, tied once)."""
    names = []
    for mod, attr, name, p in owned_parameters(model):
        kinds = layer_for(mod, [attr]).lowrank(mod)
        if kinds.get(attr) in ("out_in", "in_out") and p.is_floating_point():
            names.append(name)
    return names


def _embedding_ids(model: nn.Module) -> set[int]:
    ids = set()
    for getter in ("get_input_embeddings", "get_output_embeddings"):
        mod = getattr(model, getter, lambda: None)()
        if mod is not None:
            ids |= {id(p) for p in mod.parameters()}
    return ids


def evolving(model: nn.Module, include: Iterable[str] | None = None, exclude: Iterable[str] = (),
             mode: str = "lowrank") -> dict[str, str]:
    """An ``es_map`` that evolves the chosen weights in ``mode`` and excludes every other parameter.

    ``include``: glob patterns of names to evolve (default: every block matrix, see the module
    docstring); ``exclude``: patterns removed from that choice. Raises if nothing is left.
    """
    emb = _embedding_ids(model)
    params = {name: p for _, _, name, p in owned_parameters(model)}
    if include is None:
        chosen = [n for n in _matrices(model) if id(params[n]) not in emb]
        exclude = (*READ_OUTSIDE_FORWARD, *exclude)
    else:
        include = list(include)
        chosen = [n for n in params if any(fnmatchcase(n, pat) for pat in include)]
        unmatched = [pat for pat in include if not any(fnmatchcase(n, pat) for n in params)]
        if unmatched:
            raise ValueError(f"include patterns {unmatched} match no parameter; names are e.g. {list(params)[:4]}")
    exclude = list(exclude)
    chosen = [n for n in chosen if not any(fnmatchcase(n, pat) for pat in exclude)]
    if not chosen:
        raise ValueError("nothing left to evolve: include/exclude removed every parameter")
    return {"*": "excluded", **{n: mode for n in chosen}}


def what_evolves(model: nn.Module, *, subspace: int = 0, adapters: int = 0, evolve: Iterable[str] | None = None,
                 seed: int = 0, subspace_cache_bytes: int | None = None) -> dict[str, str]:
    """The ``es_map`` of one choice: a ``subspace`` of K numbers, ``adapters`` of that rank (both change
    ``model`` in place, seeded by ``seed``, so every worker builds the same), ``evolve=["norms"]`` (norm
    layers' weights and biases), ``evolve`` glob patterns, or the block matrices (:func:`evolving`).
    ``subspace_cache_bytes``: the subspace's bound on projected weights kept across a generation's tokens."""
    evolve = list(evolve or [])
    if sum(map(bool, (subspace, adapters, evolve))) > 1:
        raise ValueError("subspace, adapters and evolve each choose what evolves: give one of them")
    if subspace:
        return install_subspace(model, subspace, seed=seed, cache_bytes=subspace_cache_bytes)
    if adapters:  # a module read outside its forward cannot carry an adapter either
        return add_adapters(model, adapters, exclude=[p.rsplit(".", 1)[0] for p in READ_OUTSIDE_FORWARD], seed=seed)
    if evolve == ["norms"]:
        return norms_and_biases(model)
    return evolving(model, include=evolve or None)
