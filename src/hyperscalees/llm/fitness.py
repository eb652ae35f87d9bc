"""The one reward fitness of every LLM path: ``train llm``, the Python API and Ray alike.

``RewardFitness(tokenizer, prompts, reward)`` is the ``fitness(model, lo, hi, step)`` of the
recipe protocol (``hyperscalees.distributed.recipe``): inside ``es.perturbed((lo, hi))`` it
generates the chunk's completions in one batched ``generate`` and returns their scores
(hi - lo, P), one column per prompt, which the strategy's (P, G) shaping normalises per
prompt (``group_fitness="per_group"``, what ``llm.EGGROLL`` picks) or averages (``"mean"``).
Prompts depend on the step only, never on which worker asks, so any chunking on any backend
gives the same scores.

The reward is called one of three ways:

- ``reward(prompt, completion, **fields) -> float`` per answer (the default);
- ``reward(prompts, completions, **columns) -> list[float]`` once per chunk (``batched=True``,
  TRL's form: each field arrives as a list, one value per answer);
- ``reward.batch(prompts, completions[, fields])`` when it has that method (``llm.SafeReward``:
  one message to its worker process).

``fields`` gives a prompt's keyword arguments: a mapping or a callable ``prompt -> dict`` (a JSONL
row's other columns). A reward that counts its failures (``failures()``, as ``SafeReward`` does)
is watched: a step in which every call failed carries no signal (every score is the same worst
value, the update is zero) and :meth:`check` raises :class:`RewardFailedError` naming the last
error, instead of letting a run "train" for hours on nothing. ``check`` runs when a call opens a
new step (for the step before it); ``train llm`` also calls it after every step.
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import torch
from torch import Tensor, nn

from .generate import Sampling, complete_chunk

Reward = Callable[..., float]


class RewardFailedError(RuntimeError):
    """Every reward call of a step failed (raised, timed out or returned a non-number)."""


class RewardFitness:
    """``reward(prompt, completion, **fields) -> float`` of every member on ``prompts`` (a list, or step -> list)."""

    def __init__(self, tokenizer, prompts: Sequence[str] | Callable[[int], Sequence[str]], reward: Reward,
                 sampling: Sampling = Sampling(), *, fields: Mapping | Callable[[str], dict] | None = None,
                 batched: bool = False, seed: int | None = None):
        if not callable(reward):
            raise TypeError(f"reward must be callable (prompt, completion) -> float, got {type(reward).__name__}")
        if fields is not None and not (callable(fields) or isinstance(fields, Mapping)):
            raise TypeError(f"fields must be a mapping or a callable prompt -> dict, got {type(fields).__name__}")
        self.tokenizer, self.prompts, self.reward, self.sampling = tokenizer, prompts, reward, sampling
        self.fields, self.batched, self.seed = fields, bool(batched), seed
        self.last_texts: list[str] = []
        self.tokens = 0  # new tokens generated so far (a progress rate reads and resets it)
        self._step, self._scored, self._failed = None, 0, 0

    def prompts_at(self, step: int) -> list[str]:
        prompts = list(self.prompts(step) if callable(self.prompts) else self.prompts)
        if not prompts:
            raise ValueError(f"no prompts for step {step}")
        return prompts

    def fields_of(self, prompt: str) -> dict:
        if self.fields is None:
            return {}
        found = self.fields(prompt) if callable(self.fields) else self.fields.get(prompt, {})
        return dict(found or {})

    def __call__(self, model: nn.Module, lo: int, hi: int, step: int) -> Tensor:
        if step != self._step:
            self.check()  # the step before this one
            self._step, self._scored, self._failed = step, 0, 0
        prompts = self.prompts_at(step)
        texts, _, lengths = complete_chunk(model, self.tokenizer, prompts, self.sampling, (lo, hi), step,
                                           seed=self.seed)
        self.last_texts = texts
        self.tokens += int(lengths.sum())
        return torch.tensor(self.score(prompts, texts), dtype=torch.float32).view(hi - lo, len(prompts))

    def population(self, es, chunk: int | None = None) -> Tensor:
        """The (N, P) scores of every member of ``es``'s current step, ``chunk`` members per generate
        (default: all at once): what ``es.tell`` takes in a plain Python loop."""
        n = es.population
        chunk = n if chunk is None else chunk
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise ValueError(f"chunk must be a whole number >= 1, got {chunk!r}")
        parts = []
        for lo in range(0, n, chunk):
            hi = min(lo + chunk, n)
            with es.perturbed((lo, hi), repeated=True):
                parts.append(self(es.model, lo, hi, es.step))
        return torch.cat(parts)

    def score(self, prompts: Sequence[str], texts: Sequence[str]) -> list[float]:
        """One reward per text; ``prompts`` repeat member-major (text ``r`` answers ``prompts[r % P]``)."""
        rows = [prompts[r % len(prompts)] for r in range(len(texts))]
        kwargs = [self.fields_of(p) for p in rows]
        counter = getattr(self.reward, "failures", None)
        before = counter() if callable(counter) else 0
        batch = getattr(self.reward, "batch", None)
        if callable(batch):
            scores = batch(rows, texts, kwargs) if self.fields is not None else batch(rows, texts)
        elif self.batched:
            scores = self._batched(rows, texts, kwargs)
        else:
            scores = [float(self.reward(p, t, **k)) for p, t, k in zip(rows, texts, kwargs)]
        self._scored += len(rows)
        self._failed += (counter() - before) if callable(counter) else 0
        return [float(s) for s in scores]

    def _batched(self, rows: list[str], texts: list[str], kwargs: list[dict]) -> list[float]:
        names = sorted({k for kw in kwargs for k in kw})
        columns = {k: [kw.get(k) for kw in kwargs] for k in names}
        scores = list(self.reward(rows, texts, **columns))
        if len(scores) != len(rows):
            raise ValueError(f"a batched reward must return one score per completion: got {len(scores)} "
                             f"for {len(rows)}")
        return scores

    def check(self) -> None:
        """Raise :class:`RewardFailedError` when every reward call of the current step failed (named
        counting from 1, as a run's log does: fitness step 0 ends at step 1)."""
        if self._scored and self._failed >= self._scored:
            last = getattr(self.reward, "last_error", None)
            raise RewardFailedError(
                f"every reward call of step {self._step + 1} failed ({self._failed} of {self._scored}; "
                f"last error: {last or 'unknown'}): every answer scored the same, so nothing can be learned; "
                "fix the reward (it must return a number for any completion) and run again")
