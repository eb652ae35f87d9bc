"""Population generation: N members × P prompts decode together, each row under its member's noise.

One batched ``model.generate`` per chunk of members, with the KV cache (RWKV: its state): the
prompts are tokenised once (left-padded), repeated member-major (rows [i·P, (i+1)·P) belong to
member lo + i, the layout :meth:`perturbed` reads), and decoded under ``es.perturbed(chunk)``.
No Python loop over members; chunks only bound memory (``chunk`` members per call).

Greedy by default: exploration comes from the parameter noise, so a member is a deterministic
policy and twins differ only by their sign. Sampling (``Sampling(do_sample=True)``) draws from a
generator seeded by (seed, step, chunk), reproducible for a given chunking; with
``common_noise=True`` twins sample with the same random numbers (``common_noise.py``: Gumbel-max
on counter-based noise), the same for any chunking.

A completion ends at the tokenizer's end-of-sequence token, after ``max_new_tokens``, or just
after the first stop string (kept in the text, so a reward can check the format).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from ..nn.evaluate import check_chunk
from .common_noise import CommonNoiseSampler, sampling_key


@dataclass(frozen=True)
class Sampling:
    """How members decode: greedy unless ``do_sample``; ``stop`` strings end a completion.

    ``common_noise``: members 2k and 2k+1 (antithetic twins) sample with the same random numbers,
    so their answers differ only through their weights (temperature only: no top-k / top-p)."""
    max_new_tokens: int = 64
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    seed: int = 0
    common_noise: bool = False

    def __post_init__(self):
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a whole number >= 1, got {self.max_new_tokens!r}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature!r}")
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"stop strings must be non-empty strings, got {self.stop!r}")
        if self.common_noise and not self.do_sample:
            raise ValueError("common_noise applies to sampling: set do_sample=True (greedy draws no noise)")
        if self.common_noise and (self.top_k or self.top_p is not None):
            raise ValueError(f"common_noise samples at a temperature only, got top_k={self.top_k!r}, "
                             f"top_p={self.top_p!r}")

    @property
    def paired(self) -> bool:
        """Whether twins share their sampling noise (then the noise is keyed by step, not chunk)."""
        return self.do_sample and self.common_noise


@dataclass
class Generations:
    """What a population wrote: ``texts[i][j]`` is member lo + i's completion of prompt j.

    ``tokens`` (members, prompts, max_new_tokens) holds the new tokens, padded with ``pad_id``
    after each completion's end; ``lengths`` (members, prompts) how many are real.
    """
    texts: list[list[str]]
    tokens: Tensor
    lengths: Tensor
    pad_id: int
    members: tuple[int, int] = (0, 0)
    prompt_tokens: int = field(default=0)

    @property
    def new_tokens(self) -> int:
        """Real tokens generated (what tokens/s counts)."""
        return int(self.lengths.sum())


def encode_prompts(tokenizer, prompts: list[str], device) -> tuple[Tensor, Tensor]:
    """(ids, attention mask) (P, L), left-padded so every prompt ends where decoding starts."""
    if isinstance(prompts, str) or not prompts or not all(isinstance(p, str) for p in prompts):
        raise ValueError("prompts must be a non-empty list of strings")
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        enc = tokenizer(list(prompts), return_tensors="pt", padding=True, add_special_tokens=False)
    finally:
        tokenizer.padding_side = side
    return enc["input_ids"].to(device), enc["attention_mask"].to(device)


def pad_token_id(tokenizer) -> int:
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad is None:
        raise ValueError("the tokenizer has neither a pad nor an end-of-sequence token; set tokenizer.pad_token")
    return int(pad)


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def _decode_rows(model: nn.Module, tokenizer, ids: Tensor, mask: Tensor, sampling: Sampling,
                 seed: int, first_member: int = 0, prompts: int = 1) -> Tensor:
    """New tokens (rows, T) of one batched ``generate`` (T <= max_new_tokens, pad after the end)."""
    pad = pad_token_id(tokenizer)
    kwargs = dict(max_new_tokens=sampling.max_new_tokens, do_sample=sampling.do_sample, pad_token_id=pad,
                  eos_token_id=tokenizer.eos_token_id, use_cache=True)
    if sampling.paired:  # greedy decoding of noised scores is the sample
        from transformers import LogitsProcessorList
        sampler = CommonNoiseSampler(seed, sampling.temperature, first_member, ids.shape[0] // prompts, prompts)
        kwargs.update(do_sample=False, temperature=None, top_k=None, top_p=None,
                      logits_processor=LogitsProcessorList([sampler]))
    elif sampling.do_sample:
        kwargs.update(temperature=sampling.temperature, top_k=sampling.top_k or 0, top_p=sampling.top_p or 1.0)
    else:  # greedy: drop sampling knobs a model's generation_config may carry (they would only warn)
        kwargs.update(temperature=None, top_k=None, top_p=None)
    if sampling.stop:
        kwargs.update(stop_strings=list(sampling.stop), tokenizer=tokenizer)
    with torch.no_grad(), torch.random.fork_rng(devices=[ids.device] if ids.device.type == "cuda" else []):
        torch.manual_seed(seed)
        out = model.generate(input_ids=ids, attention_mask=mask, **kwargs)
    return out[:, ids.shape[1]:]


def _finish(tokenizer, new: Tensor, sampling: Sampling) -> tuple[list[str], Tensor]:
    """Texts cut at the end token, or just after the first stop string, and each row's real token count.

    ``generate`` pads a row once it is done (its end token or a stop string reached), so the
    real tokens are those before the first end token and before the trailing padding."""
    pad, eos = pad_token_id(tokenizer), tokenizer.eos_token_id
    texts, lengths = [], []
    for row in new.tolist():
        n = row.index(eos) if eos is not None and eos in row else len(row)
        while n and row[n - 1] == pad:
            n -= 1
        text = tokenizer.decode(row[:n], skip_special_tokens=True)
        ends = [text.find(s) + len(s) for s in sampling.stop if s in text]
        texts.append(text[:min(ends)] if ends else text)
        lengths.append(n)
    return texts, torch.tensor(lengths)


def complete(model: nn.Module, tokenizer, prompts: list[str], sampling: Sampling = Sampling(),
             repeats: int = 1, seed: int | None = None, first_member: int = 0) -> tuple[list[str], Tensor, Tensor]:
    """Plain batched generation of ``prompts`` repeated ``repeats`` times member-major:
    (texts, new tokens (repeats·P, T) padded, lengths). Under ``es.perturbed`` the repeats are
    the members of the chunk (``first_member`` the first: twins share noise under
    ``common_noise``, whose key ``seed`` is); outside it, ``repeats=1`` is the unperturbed model."""
    ids, mask = encode_prompts(tokenizer, prompts, _device(model))
    if repeats > 1:
        ids, mask = ids.repeat(repeats, 1), mask.repeat(repeats, 1)
    new = _decode_rows(model, tokenizer, ids, mask, sampling, sampling.seed if seed is None else seed,
                       first_member=first_member, prompts=len(prompts))
    texts, lengths = _finish(tokenizer, new, sampling)
    pad = pad_token_id(tokenizer)
    for r, n in enumerate(lengths.tolist()):  # tokens after a completion's end read as padding
        new[r, n:] = pad
    return texts, new, lengths


def generate(es, tokenizer, prompts: list[str], sampling: Sampling = Sampling(),
             members: tuple[int, int] | None = None, chunk: int | None = None) -> Generations:
    """Members [lo, hi) (default: all) of ``es``'s current population answer every prompt.

    ``chunk``: members per batched ``generate`` (whole pairs; default all at once).
    """
    from ..nn.module_es import member_range
    lo, hi = member_range(members, es.population)
    es.ask().check_members(lo, hi)
    chunk = check_chunk(chunk if chunk is not None else hi - lo, es.population)
    texts, tokens, lengths = [], [], []
    for a in range(lo, hi, chunk):
        b = min(hi, a + chunk)
        with es.perturbed((a, b), repeated=True):  # one forward per token: plans from the first
            t, new, n = complete_chunk(es.model, tokenizer, prompts, sampling, (a, b), es.step)
        texts += t
        tokens.append(new.cpu())
        lengths.append(n)
    p = len(prompts)
    width = max(t.shape[1] for t in tokens)
    pad = pad_token_id(tokenizer)
    tokens = torch.cat([torch.nn.functional.pad(t, (0, width - t.shape[1]), value=pad) for t in tokens])
    return Generations(texts=[texts[i * p:(i + 1) * p] for i in range(hi - lo)],
                       tokens=tokens.view(hi - lo, p, width), lengths=torch.cat(lengths).view(hi - lo, p),
                       pad_id=pad, members=(lo, hi))


def complete_chunk(model: nn.Module, tokenizer, prompts: list[str], sampling: Sampling, members: tuple[int, int],
                   step: int, seed: int | None = None) -> tuple[list[str], Tensor, Tensor]:
    """:func:`complete` for members [lo, hi) of step ``step``, inside ``es.perturbed((lo, hi))``: the
    one place a chunk's sampling draws are keyed (``seed``: default ``sampling.seed``)."""
    lo, hi = members
    key = draw_seed(sampling, sampling.seed if seed is None else seed, step, lo)
    return complete(model, tokenizer, prompts, sampling, repeats=hi - lo, seed=key, first_member=lo)


def draw_seed(sampling: Sampling, seed: int, step: int, lo: int) -> int:
    """The sampling seed of the chunk starting at member ``lo`` of step ``step`` (greedy ignores it).

    Under ``common_noise`` it is the step's key alone: the noise is chosen per pair, not per chunk."""
    if sampling.paired:
        return sampling_key(seed, step)
    return (seed * 1_000_003 + step * 10_007 + lo) % (1 << 63)
