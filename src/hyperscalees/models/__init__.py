"""Reference models: plain ``nn.Module``s the tasks and benchmarks train (no ES code in here).

Language models are listed in ``registry.LM_MODELS`` (an explicit table: importing a model
module registers nothing)."""
from .egg import Egg
from .float_gru import FloatGRU
from .int8_transformer import Int8Transformer
from .mlp import ACTIVATIONS, mlp
from .transformer import Block, TinyLM

__all__ = ["ACTIVATIONS", "Block", "Egg", "FloatGRU", "Int8Transformer", "TinyLM", "mlp"]
