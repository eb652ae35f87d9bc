"""``llm.EGGROLL``: EGGROLL with the defaults a pretrained causal LM needs, so none is forgotten.

A language model fine-tuned by ES wants three things the generic ``hs.EGGROLL`` cannot guess:
only the matrices inside its blocks evolve (``llm.evolving``: embeddings, head and norms frozen,
or the noise in a 49k-row embedding swamps every signal), the (members, prompts) scores are
normalised per prompt before they are averaged (``group_fitness="per_group"``: an easy prompt
every member solves does not drown a hard one), and a small noise and step (1e-3: pretrained
weights are near a good point). Any of them can still be passed explicitly. The class lives
here, not in ``strategies/`` or ``nn/``, so the generic layers know nothing of language models.
"""
from __future__ import annotations

from torch import nn

from ..nn.module_es import EGGROLL as _EGGROLL
from .select import evolving


class EGGROLL(_EGGROLL):
    """``hs.EGGROLL`` for a causal LM: ``es_map=llm.evolving(model)`` and ``group_fitness="per_group"``
    unless given; sigma and lr default to 1e-3."""

    def __init__(self, model: nn.Module, population: int = 64, sigma: float = 1e-3, lr: float = 1e-3, **kwargs):
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if kwargs.get("es_map") is None:
            kwargs["es_map"] = evolving(model)
        kwargs.setdefault("group_fitness", "per_group")
        super().__init__(model, population=population, sigma=sigma, lr=lr, **kwargs)
