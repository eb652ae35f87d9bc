"""What a language model is to the ``lm`` task, and (the registry of them is ``registry.py``).

Dimensions: B streams (for a population forward, B = P·M member-major rows: rows
[i·M, (i+1)·M) belong to member i), T tokens per window, V vocabulary, D width.

Every model the ``lm`` task trains -- the integer ones (``egg``, ``int8-transformer``) and the
float reference (``float-gru``) -- is an ordinary ``nn.Module`` with this shape of forward:

    logits, state = model(tokens, state)     # tokens (B, T) int64 -> logits (B, T, V) float32

``logits`` are natural-log-scale scores (``log_softmax`` of them is the model's prediction);
an integer model converts its integer logits to that scale exactly (e.g. int8 values that are
base-2 log-probabilities in 1/16-bit units become ``y · ln2/16``). ``state`` is the recurrent
state carried to the next window of the same streams (``None`` starts fresh); models without a
state return ``None``. The task never looks inside a state: it only keeps it per stream and
hands it back, so it must be a tensor or a tuple of tensors whose first dimension is B.

Integer models keep their weights in integer dtypes and say how ES should move them through
``es_defaults`` (an update rule that knows integers, a noise distribution, σ ...) and
``es_groups()`` (per-parameter σ multipliers).
"""
from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor, nn


class AbstractLM(nn.Module):
    """Base of every model in ``LM_MODELS``; concrete models are final.

    Class attributes: ``is_integer`` (weights in integer dtypes, trained only by ES);
    ``es_defaults`` (``ESConfig`` field overrides the ``lm`` task uses for this model unless the
    user gives them, e.g. ``{"update_rule": "int_threshold", "distribution": "int", "sigma": ...}``).
    """

    is_integer: ClassVar[bool] = False
    es_defaults: ClassVar[dict] = {}

    def __init__(self, vocab_size: int):
        super().__init__()
        if vocab_size < 2:
            raise ValueError(f"vocab_size must be >= 2, got {vocab_size!r}")
        self.vocab_size = int(vocab_size)

    def forward(self, tokens: Tensor, state=None) -> tuple[Tensor, object]:
        """(B, T) int64 token ids -> ((B, T, V) float32 natural-log-scale logits, next state)."""
        raise NotImplementedError

    def es_groups(self) -> list[dict]:
        """Parameter groups (``hs.EGGROLL(groups=...)``) the ``lm`` task should pass; none by default.

        Integer models raise σ for their vectors here (full-rank noise needs a larger scale than
        the rank-1 products of the matrices to move an int8 value by about one step).
        """
        return []

    def describe(self) -> list[tuple[str, tuple[int, ...], str]]:
        """(parameter name, shape, dtype) rows for ``hyperscalees arch``; all parameters by default."""
        return [(n, tuple(p.shape), str(p.dtype).removeprefix("torch.")) for n, p in self.named_parameters()]


# float32 ln 2 / 16, read once at import: per forward it was a host->device copy and a read back
_LOG2_SIXTEENTH = torch.log(torch.tensor(2.0)).item() / 16.0


def natural_logits_from_log2_sixteenths(y: Tensor) -> Tensor:
    """Integer logits in 1/16-bit base-2 units -> float32 natural-log scale (exact up to fp32)."""
    scale = _LOG2_SIXTEENTH
    return y * scale if not y.is_floating_point() else y.to(torch.float32) * scale   # int8 * float: one pass


__all__ = ["AbstractLM", "natural_logits_from_log2_sixteenths"]
