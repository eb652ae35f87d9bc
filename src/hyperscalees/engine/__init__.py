"""The training engine: run configs, the ask/evaluate/tell loop, checkpoints and metrics."""
from .checkpoint import Checkpoint, has_checkpoint, load_checkpoint, remove_orphans, save_checkpoint
from .config import STRATEGIES, EngineConfig, TrainConfig, make_config
from .files import BadFileError, atomic_write
from .guards import DivergedError
from .loop import run
from .recipe import TaskRecipe, build
from .resume import load_run, saved_config
from .metrics import MetricsLogger, plot_curve, read_rows

__all__ = ["BadFileError", "Checkpoint", "DivergedError", "EngineConfig", "MetricsLogger", "STRATEGIES",
           "TaskRecipe", "TrainConfig", "atomic_write", "build", "has_checkpoint", "load_checkpoint", "load_run",
           "make_config", "plot_curve", "read_rows", "remove_orphans", "run", "save_checkpoint", "saved_config"]
