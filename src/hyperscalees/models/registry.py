"""The one registry of language models the ``lm`` task, ``generate`` and ``arch`` can build.

An explicit table, not decorators: a model is available because it is listed here, never
because some module happened to be imported first. Adding a model is its file plus one line.
"""
from __future__ import annotations

from .egg import Egg
from .float_gru import FloatGRU
from .int8_transformer import Int8Transformer
from .lm import AbstractLM

LM_MODELS: dict[str, type[AbstractLM]] = {"egg": Egg, "int8-transformer": Int8Transformer, "float-gru": FloatGRU}


def build_lm(name: str, vocab_size: int, **sizes) -> AbstractLM:
    """The model called ``name``; a ValueError names a bad name and the choices."""
    if name not in LM_MODELS:
        raise ValueError(f"unknown language model {name!r}; choose one of {sorted(LM_MODELS)}")
    return LM_MODELS[name](vocab_size=vocab_size, **sizes)
