"""Reference models: plain ``nn.Module``s the tasks and benchmarks train (no ES code in here).

Language models are listed in ``registry.LM_MODELS``."""
from .mlp import ACTIVATIONS, mlp
from .transformer import Block, TinyLM

__all__ = ["ACTIVATIONS", "Block", "TinyLM", "mlp"]
