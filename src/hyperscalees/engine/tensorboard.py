"""TensorBoard scalars from the per-step metric rows (``train --tensorboard DIR``).

The engine writes one row per step to ``metrics.jsonl`` (:mod:`.metrics`); this sink takes
the same rows and logs every finite number in them as a scalar at the row's ``step``.
``torch.utils.tensorboard`` is imported only when a sink is made, so the package works without
the ``tensorboard`` extra; asking for a sink without it is a one-line error naming the fix.
"""
from __future__ import annotations

import math
from pathlib import Path

MISSING = "--tensorboard needs the tensorboard package: pip install 'hyperscalees[tensorboard]'"


class TensorBoardSink:
    """Log metric rows (dicts with an integer ``step``) as scalars into ``directory``."""

    def __init__(self, directory: str | Path):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # torch raises this when the tensorboard package is absent
            raise RuntimeError(MISSING) from None
        self.writer = SummaryWriter(log_dir=str(directory))

    def log(self, row: dict) -> None:
        step = row["step"]
        for name, value in row.items():
            # step is the x axis; time would chart seconds against steps; strings, None, NaN are skipped
            if name in ("step", "time") or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if math.isfinite(value):
                self.writer.add_scalar(name, value, global_step=step)
        self.writer.flush()  # a crashed run keeps its history, as metrics.jsonl does

    def close(self) -> None:
        self.writer.close()

    def __enter__(self) -> TensorBoardSink:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
