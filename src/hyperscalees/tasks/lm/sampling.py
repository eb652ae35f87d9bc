"""Text generation from any ``AbstractLM``: temperature, min-p and a presence penalty, seeded.

The defaults are d-eggs' (temperature 0.6, min-p 0.08, presence penalty 0.2;
``deggs_ezmup.md`` §1.15), applied to the model's natural-log logits in this order:
presence penalty (subtract ``presence_penalty`` nats once from every token already present
in the prompt or the output -- a true presence penalty; d-eggs subtracts it per occurrence,
which is a frequency penalty that bans repeats outright), temperature (divide by it), min-p
(drop tokens whose probability is below ``min_p`` times the most likely one's), then one
draw from a ``torch.Generator`` seeded with ``seed``: same model, prompt and seed, same text.

Recurrent models (a non-None state) consume the prompt once, then one token per step;
stateless ones (transformers) re-read the last ``context`` tokens every step.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor


def check_sampling(temperature: float, min_p: float, presence_penalty: float) -> None:
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    if not 0 <= min_p < 1:
        raise ValueError(f"min_p must be in [0, 1), got {min_p!r}")
    if not (math.isfinite(presence_penalty) and presence_penalty >= 0):
        raise ValueError(f"presence_penalty must be a finite number >= 0, got {presence_penalty!r}")


def next_token(logits: Tensor, seen: Tensor, gen: torch.Generator, temperature: float, min_p: float,
               presence_penalty: float) -> int:
    """One draw from (V,) logits; ``seen`` (V,) bool marks tokens already present."""
    z = logits.double() - presence_penalty * seen.double()
    p = torch.softmax(z / temperature, dim=-1)
    p = torch.where(p >= min_p * p.max(), p, torch.zeros_like(p))
    return int(torch.multinomial(p / p.sum(), 1, generator=gen))


@torch.no_grad()
def generate(model, prompt: list[int], tokens: int = 128, temperature: float = 0.6, min_p: float = 0.08,
             presence_penalty: float = 0.2, seed: int = 0, context: int = 256) -> list[int]:
    """``tokens`` new ids after ``prompt`` (a non-empty list of ids)."""
    check_sampling(temperature, min_p, presence_penalty)
    if not prompt:
        raise ValueError("the prompt is empty: give at least one token")
    if tokens < 0:
        raise ValueError(f"tokens must be >= 0, got {tokens!r}")
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    gen = torch.Generator().manual_seed(int(seed))
    seen = torch.zeros(model.vocab_size, dtype=torch.bool)
    seen[torch.tensor(prompt)] = True
    ids = list(prompt)
    logits, state = model(torch.tensor([ids[-context:]], device=device), None)
    out = []
    for _ in range(tokens):
        t = next_token(logits[0, -1].cpu(), seen, gen, temperature, min_p, presence_penalty)
        out.append(t)
        ids.append(t)
        seen[t] = True
        if state is not None:
            logits, state = model(torch.tensor([[t]], device=device), state)
        else:
            logits, state = model(torch.tensor([ids[-context:]], device=device), None)
    return out
