"""The training engine: run configs, the ask/evaluate/tell loop, checkpoints and metrics."""
from .checkpoint import Checkpoint, atomic_write, has_checkpoint, load_checkpoint, save_checkpoint
from .config import STRATEGIES, EngineConfig, TrainConfig, make_config
from .loop import build, load_run, run
from .metrics import MetricsLogger, plot_curve, read_rows

__all__ = ["Checkpoint", "EngineConfig", "MetricsLogger", "STRATEGIES", "TrainConfig", "atomic_write", "build",
           "has_checkpoint", "load_checkpoint", "load_run", "make_config", "plot_curve", "read_rows", "run",
           "save_checkpoint"]
