"""Reference models: plain ``nn.Module``s the tasks and benchmarks train (no ES code in here)."""
from . import float_gru  # noqa: F401  (registers "float-gru" in LM_MODELS)
from .mlp import ACTIVATIONS, mlp
from .transformer import Block, TinyLM

__all__ = ["ACTIVATIONS", "Block", "TinyLM", "mlp"]
from .egg import Egg  # noqa: E402  (registers "egg" in LM_MODELS)
from .int8_transformer import Int8Transformer  # noqa: E402  (registers "int8-transformer")
