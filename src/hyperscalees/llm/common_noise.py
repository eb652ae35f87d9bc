"""Sampling with common random numbers: antithetic twins draw the same sampling noise.

With greedy decoding a member's answer is a step function of its weights: most small
perturbations change no answer, so many members tie and the ES estimate sees little. Sampling
smooths that (a member's expected reward moves with its weights), but independent draws add their
own noise to every difference f(θ + σε) − f(θ − σε) the estimate is built from. Common random
numbers remove it: members 2k and 2k+1 sample with the *same* random numbers, so their answers
differ only where their weights do.

The draw is the Gumbel-max trick: argmax(logits / T + g), g ~ Gumbel(0, 1) i.i.d. per token,
samples exactly from softmax(logits / T). Here g is a pure function of (key, decoding position,
pair, prompt, token) from the package's counter-based hash (``noise.keys``), so it is the same
for any chunking of the population, on any device, on resume. It runs as a ``generate`` logits
processor under greedy decoding.

Dimensions: R rows (members × prompts, member-major), V vocabulary.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..noise.distributions import to_unit_uniform
from ..noise.keys import element_bits, fold_in, name_key, pair_keys

STREAM = "llm/sampling"  # the key's name: independent of every parameter's noise


def sampling_key(seed: int, step: int) -> int:
    """The key of one step's sampling noise; every member and chunk of the step shares it."""
    return fold_in(name_key(seed, STREAM), step)


def row_streams(first_member: int, members: int, prompts: int, device=None) -> Tensor:
    """(R,) stream index of each row: rows of twins (members 2k, 2k+1) answering one prompt share one."""
    rows = torch.arange(members * prompts, device=device)
    pair = (first_member + rows // prompts) // 2
    return pair * prompts + rows % prompts


def gumbel(key: int, position: int, streams: Tensor, vocabulary: int) -> Tensor:
    """(R, V) standard Gumbel noise for one decoding position, a pure function of its arguments."""
    pkeys = pair_keys(fold_in(key, position), streams).unsqueeze(1)
    u = to_unit_uniform(element_bits(pkeys, torch.arange(vocabulary, device=streams.device)))
    return u.log_().neg_().log_().neg_()


class CommonNoiseSampler:
    """A ``generate`` logits processor that samples at ``temperature`` with twins' noise shared.

    Use it with ``do_sample=False``: greedy decoding of the returned scores is the sample. The
    position is the length of the sequence so far, the same for every row of a batched call.
    """

    def __init__(self, key: int, temperature: float, first_member: int, members: int, prompts: int):
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        self.key, self.temperature = key, float(temperature)
        self.shape = (first_member, members, prompts)
        self._streams: Tensor | None = None

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        first, members, prompts = self.shape
        if input_ids.shape[0] != members * prompts:
            raise ValueError(f"expected {members} members x {prompts} prompts = {members * prompts} rows, "
                             f"got {input_ids.shape[0]}")
        if self._streams is None or self._streams.device != scores.device:
            self._streams = row_streams(first, members, prompts, device=scores.device)
        noise = gumbel(self.key, input_ids.shape[1], self._streams, scores.shape[-1])
        return scores.float() / self.temperature + noise
