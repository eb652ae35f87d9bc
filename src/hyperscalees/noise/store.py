"""One ES step's noise, as the forwards and the update of that step share it.

A :class:`NoiseStore` is made by the strategy for one :class:`Population` (in ``ask``) and
read by everything that needs that step's noise: the perturbed forwards (every chunk,
every call) and the update that consumes it. It holds

- each perturbed parameter's scales (:func:`noise_scales`: σ, σ/√r, per-parameter
  multipliers -- computed here and nowhere else), and any per-row/column overlay on them
  (:meth:`NoiseStore.overlay`);
- whole-step draws, made once and served to every chunk as slices and to the update,
  while they fit the byte budget (past it, chunks draw their own and the update
  regenerates, so memory stays bounded for any population);
- values derived from the draws that layers reuse within the step (GEMM plans), made
  on their second use, under the same budget;
- which parameters' noise a forward actually applied, so the update can refuse to move
  a parameter from noise that never reached the model.

Dimensions: P members, K = P/2 pairs (K = P draws when independent, ``Population.per_draw``);
members [lo, hi) are whole pairs.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Collection, Hashable, Mapping

import torch
from torch import Tensor

from . import fused
from .draw import Noise, draw_lowrank_many, draw_noise, draw_rows, noise_nbytes, noise_scales, select_rows
from .keys import mix_int
from .population import Population
from .sampling import FUSED_SAMPLERS, active_static_keys, batches, param_epoch_key, sampler, static_keys
from .spec import ESMode, ParamSpec


class NoiseStore:
    """The noise of one step of one strategy: see the module docstring."""

    def __init__(self, pop: Population, specs: Mapping[str, ParamSpec], lowrank: Collection[str],
                 devices: Mapping[str, torch.device], budget_bytes: float,
                 sigma_scales: Mapping[str, float] | None = None,
                 overlays: Mapping[str, tuple[Tensor | None, Tensor | None]] | None = None):
        self.pop = pop
        self.specs = {n: s for n, s in specs.items() if s.mode != ESMode.EXCLUDED}
        self.lowrank = frozenset(n for n in lowrank if n in self.specs)
        self.lowrank_order = [n for n in self.specs if n in self.lowrank]  # a fixed order for batched draws
        self.devices = dict(devices)
        self.budget_bytes = float(budget_bytes)
        extra = sigma_scales or {}
        self._scales = {n: noise_scales(pop.sigma, s.sigma_scale * extra.get(n, 1.0), pop.rank, n in self.lowrank)
                        for n, s in self.specs.items()}
        self._overlays = dict(overlays or {})
        self._draws: dict[str, Noise] = {}
        self._members: dict[tuple, tuple[Tensor, Tensor]] = {}
        self._key_words: dict[str, dict[str, Tensor]] = {}
        self._memo: dict[Hashable, object] = {}
        self._memo_asked: set = set()
        self.bytes_used = 0
        self.applied: set[str] = set()
        self.forwards = 0

    # -- what each parameter gets -------------------------------------------------------
    def is_perturbed(self, name: str) -> bool:
        return name in self.specs

    def is_lowrank(self, name: str) -> bool:
        return name in self.lowrank

    def overlay(self, name: str) -> tuple[Tensor | None, Tensor | None] | None:
        """Per-row and per-column factors (rows,), (cols,) in [0, 1] on ``name``'s unit noise this step
        (adaptive noise scaling: the update rule fades rows and columns that stopped changing), or None.

        A vector parameter has its factors in the first slot. Layers that honour them (the integer
        layers) scale the drawn factors; the rule that made them weighs its votes the same way.
        """
        return self._overlays.get(name)

    def sigma(self, name: str) -> float:
        """σ of ``name`` this step: the step's σ times the parameter's multipliers."""
        return self._scales[name][0]

    def scale(self, name: str) -> float:
        """Coefficient of ``name``'s unit noise term: σ/√r (low-rank) or σ."""
        return self._scales[name][1]

    # -- drawing ------------------------------------------------------------------------
    def draw(self, name: str, pairs: Tensor, signs: Tensor) -> Noise:
        """Noise of arbitrary ``pairs`` (K,) with the caller's ``signs`` (K, 2); never cached."""
        spec = self.specs[name]
        with self._keys(pairs.device):
            return draw_noise(self.pop, name, spec.shape, pairs, signs, name in self.lowrank, *self._scales[name])

    def _keys(self, device):
        """The fused kernel reads each parameter's key from device memory: all of this step's keys
        go over in one copy, instead of one small copy per draw. (A captured graph's own fixed
        buffers, already in place, hold the same words and win.)"""
        if active_static_keys() is not None or sampler(torch.device(device)) not in FUSED_SAMPLERS:
            return contextlib.nullcontext()
        key = str(device)
        if key not in self._key_words:
            keys = [param_epoch_key(self.pop, n) for n in self.specs]
            words = fused.key_table([(k, mix_int(k)) for k in keys], device)
            self._key_words[key] = {n: words[i] for i, n in enumerate(self.specs)}
        return static_keys(self._key_words[key])

    def members(self, lo: int, hi: int, device) -> tuple[Tensor, Tensor]:
        """(pairs (K,), signs (K, per_draw)) of members [lo, hi) on ``device``, made once per step: every
        parameter's draw of a chunk shares them (a handful of small ops each, on a GPU launches)."""
        key = (lo, hi, str(device))
        if key not in self._members:
            self._members[key] = (self.pop.pairs(lo, hi, device=device), self.pop.signs(lo, hi, device=device))
        return self._members[key]

    def _draw_members(self, name: str, lo: int, hi: int) -> Noise:
        return self.draw(name, *self.members(lo, hi, self.devices[name]))

    def cached(self, name: str) -> Noise | None:
        """The whole-step draw of ``name``, made on first use, or None if it does not fit the budget.

        Where the sampler batches (:func:`sampling.batches`), the first use of a low-rank matrix
        draws every not yet drawn low-rank matrix of the same factor length on its device with it
        (:meth:`_siblings`), in one pass: the values are those of single draws, only sooner."""
        if name not in self._draws:
            nbytes = noise_nbytes(self.specs[name].shape, self.pop, name in self.lowrank)
            if self.bytes_used + nbytes > self.budget_bytes:
                return None
            group = self._siblings(name)  # its members all have name's byte size
            if len(group) > 1:
                named = [(n, self.specs[n].shape, *self._scales[n]) for n in group]
                drawn = draw_lowrank_many(self.pop, named, *self.members(0, self.pop.size, self.devices[name]))
            else:
                drawn = [self._draw_members(name, 0, self.pop.size)]
            for n, noise in zip(group, drawn):
                self._draws[n] = noise
                self.bytes_used += nbytes
        return self._draws[name]

    def _siblings(self, name: str) -> list[str]:
        """``name`` and the low-rank matrices a whole-step draw of it brings along: not yet drawn,
        on its device, with factors of its length (so, of its byte size), while the budget holds."""
        device = self.devices[name]
        if name not in self.lowrank or not batches(self.pop, device):
            return [name]
        length = sum(self.specs[name].shape)
        nbytes = noise_nbytes(self.specs[name].shape, self.pop, True)
        room = int((self.budget_bytes - self.bytes_used) // nbytes)
        group = [name]
        for n in self.lowrank_order:
            if len(group) >= room:
                break
            if n != name and n not in self._draws and self.devices[n] == device \
                    and sum(self.specs[n].shape) == length:
                group.append(n)
        return group

    def noise(self, name: str, lo: int = 0, hi: int | None = None) -> Noise:
        """Noise of members [lo, hi) (whole pairs): a slice of the whole-step draw, or drawn alone."""
        hi = self.pop.size if hi is None else hi
        self.pop.check_members(lo, hi)
        whole = self.cached(name)
        if whole is None:
            return self._draw_members(name, lo, hi)
        return whole if (lo, hi) == (0, self.pop.size) else whole.slice(lo // self.pop.per_draw, hi // self.pop.per_draw)

    def rows(self, name: str, lo: int, hi: int, rows: Tensor) -> Noise:
        """Rows (K, T) of a (rows, cols) parameter's noise for members [lo, hi) (embedding lookups).

        Drawn on demand (a lookup needs a few rows of a large table), or gathered from the
        whole-step draw when one is already in memory.
        """
        self.pop.check_members(lo, hi)
        if name in self._draws:
            return select_rows(self._draws[name].slice(lo // self.pop.per_draw, hi // self.pop.per_draw), rows)
        dev = rows.device
        spec = self.specs[name]
        with self._keys(dev):
            return draw_rows(self.pop, name, spec.shape, *self.members(lo, hi, dev), rows, name in self.lowrank,
                             *self._scales[name])

    def peek(self, name: str) -> Noise | None:
        """The whole-step draw of ``name`` if one is in memory (never draws)."""
        return self._draws.get(name)

    def take(self, name: str) -> Noise | None:
        """Hand the whole-step draw of ``name`` over (the update), dropping it from the store."""
        noise = self._draws.pop(name, None)
        if noise is not None:
            self.bytes_used -= noise_nbytes(self.specs[name].shape, self.pop, name in self.lowrank)
        return noise

    # -- values derived from the step's noise -------------------------------------------
    def memo(self, key: Hashable, nbytes: int, make: Callable[[], object], first_use: bool = False):
        """A value derived from this step's noise (a layer's GEMM plan), made once per step.

        Made only when asked for a second time in the step (a later chunk, or the next
        environment step of a policy): a value used once would only take budget from the
        draws themselves. ``first_use``: the caller knows it will ask again (a generate), so
        make it now. Returns None when not made, and the caller works without it.
        """
        if key not in self._memo:
            if key not in self._memo_asked and not first_use:
                self._memo_asked.add(key)
                return None
            if self.bytes_used + nbytes > self.budget_bytes:
                return None
            self._memo[key] = make()
            self.bytes_used += nbytes
        return self._memo[key]

    @property
    def memo_count(self) -> int:
        return len(self._memo)

    # -- what reached the forward -------------------------------------------------------
    def note_forward(self) -> None:
        """A perturbed forward (a chunk) started."""
        self.forwards += 1

    def mark_applied(self, *names: str | None) -> None:
        self.applied.update(n for n in names if n is not None)

    def unapplied(self) -> list[str]:
        """Perturbed parameters whose noise no forward of this step applied (empty if none ran)."""
        if not self.forwards:
            return []
        return sorted(set(self.specs) - self.applied)
