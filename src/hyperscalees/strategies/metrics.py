"""A step's metrics, read from the device only when someone reads them.

On a GPU, ``float(t)`` of a device tensor waits for every queued kernel: one such read
inside a step serialises the host with the device and the launch queue runs dry. So a
step returns its metrics as device scalars in a :class:`StepMetrics`, a read-only mapping
that converts a value (one host synchronisation) the first time it is read. A training
loop that logs every step pays one wait per step; one that never looks pays none.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any, Iterator

import torch

INT_KEYS = frozenset({"step", "nonfinite"})
_warned_nonfinite = False
# Reading metrics["update_landed"] below this warns: most of the step rounded away in a bf16/fp16 model.
LANDED_WARNING = 0.5


def _to_python(key: str, value: Any):
    if isinstance(value, torch.Tensor):
        value = value.item()
    if key in INT_KEYS and isinstance(value, float) and math.isfinite(value):
        return int(value)
    return value


def warn_nonfinite(count: int) -> None:
    """Once per process: non-finite fitness was replaced (it never reaches the weights)."""
    global _warned_nonfinite
    if count and not _warned_nonfinite:
        warnings.warn(f"{count} non-finite fitness value(s) treated as the worst score "
                      "(counted in metrics['nonfinite']); further warnings suppressed", RuntimeWarning)
        _warned_nonfinite = True


def warn_landed(fraction: float) -> None:
    """Each read below LANDED_WARNING: the model's dtype kept too little of the update."""
    if fraction < LANDED_WARNING:
        warnings.warn(f"only {fraction:.0%} of the update landed in the model's dtype (metrics['update_landed']); "
                      "keep fp32 masters (ESConfig.fp32_masters=True) or load the model in float32", RuntimeWarning)


class StepMetrics(Mapping):
    """``{"step": …, "grad_norm": …, "fitness_mean": …}``: values become Python numbers on read.

    Reading ``nonfinite`` when it is non-zero issues the once-per-process warning that the
    step itself no longer checks for (that check was a host synchronisation); reading
    ``update_landed`` below ``LANDED_WARNING`` warns that a low-precision model lost its update.
    """

    def __init__(self, values: Mapping[str, Any]):
        self._raw = dict(values)
        self._read: dict[str, Any] = {}

    def __getitem__(self, key: str):
        if key not in self._read:
            self._read[key] = _to_python(key, self._raw[key])
            if key == "nonfinite":
                warn_nonfinite(self._read[key])
            elif key == "update_landed":
                warn_landed(self._read[key])
        return self._read[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def raw(self, key: str):
        """The value as the step left it (a device tensor, possibly): no synchronisation."""
        return self._raw[key]

    def __or__(self, other: Mapping) -> "StepMetrics":
        merged = {k: self._raw[k] for k in self._raw}
        merged.update(other._raw if isinstance(other, StepMetrics) else other)
        return StepMetrics(merged)

    def __repr__(self) -> str:
        return f"StepMetrics({dict(self)!r})"
