"""Built-in layers, the registry and how a module finds its layer.

One file per family: ``linear`` (nn.Linear), ``conv1d`` (transformers' Conv1D), ``embedding``,
``norm`` (LayerNorm, RMSNorm), ``attention`` (nn.MultiheadAttention, hence torch's transformer
layers), ``recurrent`` (RNN/GRU/LSTM and their cells), ``fallback`` (anything else, small
parameters only). ``matmul`` is the population matmul they share.
"""
from torch import nn

from .base import (BLOCK_BYTES, LOWRANK_KINDS, AbstractLayer, PopulationContext, own_parameters, register_layer,
                   registered_layer, unregister_layer)
from .attention import MultiheadAttentionLayer
from .conv1d import is_hf_conv1d
from .embedding import EmbeddingLayer
from .fallback import FallbackLayer, population_call
from .int8 import INT8_LAYERS, tagged
from .linear import LinearLayer
from .matmul import population_linear
from .norm import NormLayer
from .recurrent import CellLayer, RecurrentLayer

FALLBACK = FallbackLayer()

register_layer(nn.Linear, LinearLayer)
register_layer(is_hf_conv1d, LinearLayer(stored="in_out"))
register_layer(nn.Embedding, EmbeddingLayer)
register_layer(lambda m: isinstance(m, (nn.LayerNorm, nn.RMSNorm)), NormLayer)
register_layer(nn.MultiheadAttention, MultiheadAttentionLayer)
register_layer(lambda m: isinstance(m, (nn.RNN, nn.GRU, nn.LSTM)), RecurrentLayer)
register_layer(lambda m: isinstance(m, (nn.RNNCell, nn.GRUCell, nn.LSTMCell)), CellLayer)
for _tag, _layer in INT8_LAYERS.items():  # the int8 blocks of models/int8_modules.py, by their hs_layer tag
    register_layer(tagged(_tag), _layer)


def layer_for(module: nn.Module, attrs) -> AbstractLayer:
    """The layer that runs ``module`` when its own parameters ``attrs`` are perturbed."""
    return registered_layer(module, attrs) or FALLBACK


__all__ = ["BLOCK_BYTES", "FALLBACK", "LOWRANK_KINDS", "AbstractLayer", "CellLayer", "EmbeddingLayer",
           "FallbackLayer", "LinearLayer", "MultiheadAttentionLayer", "NormLayer", "PopulationContext", "RecurrentLayer", "layer_for",
           "own_parameters", "population_call", "population_linear", "register_layer", "registered_layer",
           "unregister_layer"]
