"""Update rules for integer weights: every step moves a weight by at most one int8 unit.

The ES estimate reaches a rule as ĝ = c · Z per parameter, where Z = Σ_k w_k t_k is the
fitness-weighted sum of the pairs' unit noise terms t_k (A_k B_kᵀ for matrices, ε_k for
vectors; w_k = Σ_pair f_i s_i, the pair's sign with ``pair_sign`` shaping) and c is the
store's coefficient, handed over by :meth:`prepare`. The rules divide c back out and
standardise the vote:

    z = Z / (std(t) · √M)          M = pairs in the step, std(t) from the noise distribution

so under random fitness z ~ N(0, 1) whatever the population, rank or distribution. Z is
recovered exactly (then rounded to the integer it is) when c is a power of two (population, σ
and √rank powers of two) and the float32 sums stay below 2^24 (|A B| ≤ 85² for ``int`` noise:
up to ~2,300 pairs); beyond that it is exact to float32 rounding.

Rules (``ESConfig.update_rule``; α / lr per parameter group, scaled by ``lr_factor``):

- ``int_ztest`` -- nano-egg's rule. θ ← clip(θ + sign(Z)) where |Z|·16 ≥ thr_t · std(t) · √M,
  thr_t = floor(16 · Φ⁻¹(1 − α_t/2)) (quantised to 1/16 as nano-egg), α_t = lr /
  ((2^a − 1)·t/T + 1) (a = ``alpha_decay`` 4, T = ``decay_steps`` 1000: nano-egg's schedule,
  1 → 1/16 over 1000 steps; a = 0 keeps α constant). Z = 0 never moves a weight (nano-egg
  moved it down while thr_t = 0). No state but the step count.
- ``int_sgd`` -- d-eggs' threshold apply on an SGD step: acc += lr · (z − wd·θ); then
  :func:`quantized_apply`.
- ``int_adamw`` -- d-eggs' AdamW: float moments of z (β1 0.9, β2 0.95, ε 1e-8, **no bias
  correction**, as d-eggs: the first step is 0.1/√0.05 ≈ 0.447·sign(z)); acc += lr · (m / (√v + ε)
  − wd·θ); then :func:`quantized_apply`.
- ``int_muon`` -- matrices (2-D, not embeddings): m ← μ·m + z (μ 0.85, the raw vote added, as
  d-eggs' root file); five cubic Newton–Schulz iterations X ← ½X(3I − XᵀX) on m/‖m‖_F;
  acc += lr · (X − wd·θ). Everything else as ``int_adamw``.

:func:`quantized_apply`: where acc ≥ 1 and θ < 127, θ += 1 and acc −= 1; where acc ≤ −1 and
θ > −127, θ −= 1 and acc += 1; at a bound acc is clamped to [−1, 1]. At most one step per
weight per update, however large acc is.

**Adaptive noise scaling** (``adaptive_noise=True``; the default of ``int_adamw`` and ``int_muon``,
as in d-eggs; off for the others): an int overlay per row and per column of each matrix (per
element of a vector), starting at 64, +5 after an update in which some weight of that row moved,
−1 otherwise, clamped to ±127. The next step's noise is scaled by f(ov) = clamp(ov, 0, 64)/64 on
each side (``NoiseStore.overlay``; the integer layers truncate the scaled factors), so rows and
columns that stop changing fade their exploration to zero. Votes are weighed by the same factors
(d-eggs' votes ignored them, so silenced weights kept receiving pure-noise votes). Elementwise float32 maths only (bits independent of
threads), except Muon's Newton–Schulz GEMMs.
"""
from __future__ import annotations

import math
from statistics import NormalDist

import torch
from torch import Tensor

from ...noise.distributions import INT_SCALE, INT_UNIFORM_MAX
from ...ops.fixed_order import fixed_threads
from ...ops.int8 import QMAX
from .base import AbstractUpdateRule


def _int_second_moment() -> float:
    """E[v²] of v = trunc(16·N(0,1)): Σ_v v² P(trunc = v), from the normal CDF."""
    cdf = NormalDist().cdf
    return 2.0 * sum(v * v * (cdf((v + 1) / INT_SCALE) - cdf(v / INT_SCALE)) for v in range(1, 200))


SECOND_MOMENTS = {"gaussian": 1.0, "uniform": 1.0, "rademacher": 1.0, "int": _int_second_moment(),
                  "int_uniform": sum(m * m for m in range(INT_UNIFORM_MAX + 1)) * 2 / (2 * (INT_UNIFORM_MAX + 1))}


def term_std(distribution: str, lowrank: bool, rank: int) -> float:
    """std of one pair's unit term: A Bᵀ (rank r: sum of r products) or ε."""
    m2 = SECOND_MOMENTS[distribution]
    return math.sqrt(rank) * m2 if lowrank else math.sqrt(m2)


def ztest_threshold(alpha: float) -> int:
    """nano-egg's thr = floor(16 · Φ⁻¹(1 − α/2)), α clamped to (0, 1]: 0 at α = 1, 29 at 1/16."""
    alpha = min(max(alpha, 1e-12), 1.0)
    return int(math.floor(16.0 * NormalDist().inv_cdf(1.0 - alpha / 2.0)))


def quantized_apply(w: Tensor, acc: Tensor) -> Tensor:
    """Move integer ``w`` by ±1 where |acc| ≥ 1 (in place, acc too); returns the ±1/0 steps."""
    wi = w.to(torch.int16)
    up = (acc >= 1) & (wi < QMAX)
    down = (acc <= -1) & (wi > -QMAX)
    step = up.to(torch.int16) - down.to(torch.int16)
    acc.sub_(step.to(acc.dtype))
    wi = wi + step
    acc.copy_(torch.where(((wi == QMAX) & (acc > 1)) | ((wi == -QMAX) & (acc < -1)), acc.clamp(-1, 1), acc))
    w.copy_(wi.to(w.dtype))
    return step


OVERLAY_INIT, OVERLAY_INC, OVERLAY_DEC, OVERLAY_FULL = 64, 5, 1, 64  # d-eggs' ADAPTIVE_NOISE_*


def overlay_factor(ov: Tensor) -> Tensor:
    """d-eggs' mode 1: ov < 0 -> 0 (noise off), 0..64 -> ov/64, >= 64 -> 1."""
    return ov.clamp(0, OVERLAY_FULL).to(torch.float32) / OVERLAY_FULL


class AbstractIntegerRule(AbstractUpdateRule):
    """Shared machinery: the step's coefficients, z-scores, per-parameter lr and weight decay, and the
    optional adaptive noise overlays (``adaptive_noise``; see :meth:`update_overlay`)."""

    adaptive_default = False

    def __init__(self, params, groups, config, adaptive_noise: bool | None = None):
        super().__init__(params, groups, config)
        for n, p in params.items():
            if p.is_floating_point():
                raise ValueError(f"parameter {n!r} is {p.dtype}: integer update rules move integer weights only "
                                 "(exclude it, or use the optimizer rule for a float model)")
        self.step = 0
        self._coef: dict[str, float] = {}
        self._lowrank: frozenset | None = None
        self._distribution, self._rank = config.distribution, config.rank
        self._pairs = config.population // 2
        self._group = {n: g for g in groups for n in g.names}
        self.changed: Tensor | int = 0  # weights moved by the last update (a device scalar: no host wait)
        self.adaptive_noise = self.adaptive_default if adaptive_noise is None else bool(adaptive_noise)
        self.overlays: dict[str, list[Tensor]] = {}
        if self.adaptive_noise:
            self.overlays = {n: [torch.full((d,), OVERLAY_INIT, dtype=torch.int16, device=p.device)
                                 for d in p.shape[:2]] for n, p in params.items()}

    def noise_overlays(self) -> dict:
        """Row/column factors of every parameter's noise from its overlays (adaptive noise scaling)."""
        return {n: tuple(overlay_factor(o) for o in ovs) + (None,) * (2 - len(ovs))
                for n, ovs in self.overlays.items()}

    def update_overlay(self, name: str, step: Tensor) -> None:
        """d-eggs' adaptive noise: a row (column) in which some weight moved this update gains +5,
        one where none moved loses 1, clamped to ±127; its noise fades below 64 and is off below 0.
        Applied after the parameter's update, so it shapes the next step's noise."""
        moved = step != 0
        ovs = self.overlays[name]
        for dim, ov in enumerate(ovs):
            other = tuple(d for d in range(moved.dim()) if d != dim)
            hit = moved.any(dim=other) if other else moved
            ov.add_(torch.where(hit, OVERLAY_INC, -OVERLAY_DEC).to(ov.dtype)).clamp_(-QMAX, QMAX)

    def overlay_weight(self, name: str) -> Tensor | float:
        """The factor each weight's noise had this step: votes are weighed by it (d-eggs voted with the
        unscaled noise, so weights whose noise was off still received votes of pure noise)."""
        if name not in self.overlays:
            return 1.0
        f = [overlay_factor(o) for o in self.overlays[name]]
        return f[0] if len(f) == 1 else f[0][:, None] * f[1][None, :]

    def prepare(self, pop, coefficients: dict[str, float], lowrank: frozenset | None = None) -> None:
        self._coef = dict(coefficients)
        self._lowrank = None if lowrank is None else frozenset(lowrank)
        self._pairs = pop.num_pairs
        self._distribution, self._rank = pop.distribution, pop.rank

    def votes(self, name: str, g: Tensor) -> Tensor:
        """The vote Z = ĝ / c of parameter ``name``, rounded to the integer it is."""
        if name not in self._coef:
            raise RuntimeError(f"{type(self).__name__}: no coefficient for {name!r}; the strategy must call "
                               "prepare(pop, coefficients) before apply")
        return torch.round(g / self._coef[name]) * self.overlay_weight(name)

    def vote_scale(self, name: str) -> float:
        """std(t)·√M: the standard deviation of Z under random fitness signs."""
        lowrank = self.params[name].dim() == 2 if self._lowrank is None else name in self._lowrank
        return term_std(self._distribution, lowrank, self._rank) * math.sqrt(self._pairs)

    def z(self, name: str, g: Tensor) -> Tensor:
        """The standardised vote z = Z / (std(t)·√M) of parameter ``name`` from its ĝ."""
        return self.votes(name, g) / self.vote_scale(name)

    def lr(self, name: str, lr_factor: float) -> float:
        return self._group[name].lr * lr_factor

    @property
    def by_parameter(self) -> bool:
        """Each weight moves by its own votes; but an overlay scales the next step's noise, so a replica
        that moved only a part would perturb the other parts with stale overlays."""
        return not self.overlays

    def apply(self, estimates: dict[str, Tensor], lr_factor: float) -> None:
        changed = 0
        for n in list(estimates):
            step = self.apply_one(n, estimates.pop(n), lr_factor)
            changed = changed + step.count_nonzero()
            if n in self.overlays:
                self.update_overlay(n, step)
        self.changed = changed
        self.step += 1

    def apply_one(self, name: str, g: Tensor, lr_factor: float) -> Tensor:
        raise NotImplementedError

    def metrics(self) -> dict:
        total = sum(p.numel() for p in self.params.values())
        return {"changed": self.changed, "changed_frac": self.changed / total}

    def state_dict(self) -> dict:
        return {"step": self.step, "overlays": {n: [o.clone() for o in ovs] for n, ovs in self.overlays.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.step = int(state["step"])
        for n, ovs in state.get("overlays", {}).items():
            for mine, saved in zip(self.overlays[n], ovs):
                mine.copy_(saved)


class ZTestRule(AbstractIntegerRule):
    """nano-egg's z-test threshold rule (module docstring)."""

    def __init__(self, params, groups, config, alpha_decay: float = 4.0, decay_steps: int = 1000, **kw):
        super().__init__(params, groups, config, **kw)
        self.alpha_decay, self.decay_steps = float(alpha_decay), int(decay_steps)

    def alpha(self, name: str, lr_factor: float) -> float:
        a = self.lr(name, lr_factor)
        if self.alpha_decay > 0:
            a = a / ((2.0**self.alpha_decay - 1.0) * self.step / self.decay_steps + 1.0)
        return min(a, 1.0)

    def apply_one(self, name, g, lr_factor):
        w = self.params[name]
        thr = ztest_threshold(self.alpha(name, lr_factor))
        votes = self.votes(name, g)
        move = (votes.abs() * 16 >= thr * self.vote_scale(name)) & (votes != 0)
        old = w.to(torch.int16)
        new = (old + torch.where(move, votes.sign(), torch.zeros_like(votes)).to(torch.int16)).clamp(-QMAX, QMAX)
        w.copy_(new.to(w.dtype))
        return new - old


class ThresholdSGDRule(AbstractIntegerRule):
    """acc += lr·(z − wd·θ), then the ±1 quantized apply (module docstring)."""

    def __init__(self, params, groups, config, **kw):
        super().__init__(params, groups, config, **kw)
        self.acc = {n: torch.zeros_like(p, dtype=torch.float32) for n, p in params.items()}

    def direction(self, name: str, z: Tensor) -> Tensor:
        return z

    def apply_one(self, name, g, lr_factor):
        w, acc = self.params[name], self.acc[name]
        d = self.direction(name, self.z(name, g))
        acc.add_(self.lr(name, lr_factor) * (d - self._group[name].weight_decay * w.to(torch.float32)))
        return quantized_apply(w, acc)

    def state_dict(self) -> dict:
        return super().state_dict() | {"acc": {n: a.clone() for n, a in self.acc.items()}}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        for n, a in state["acc"].items():
            self.acc[n].copy_(a)


class AdamWRule(ThresholdSGDRule):
    """Float moments of z drive the integer weights through the accumulator (module docstring)."""

    adaptive_default = True  # d-eggs runs AdamW with ADAPTIVE_NOISE_MODE 1

    def __init__(self, params, groups, config, betas: tuple[float, float] = (0.9, 0.95), eps: float = 1e-8, **kw):
        super().__init__(params, groups, config, **kw)
        self.betas, self.eps = betas, eps
        self.m = {n: torch.zeros_like(a) for n, a in self.acc.items()}
        self.v = {n: torch.zeros_like(a) for n, a in self.acc.items()}

    def direction(self, name, z):
        b1, b2 = self.betas
        m, v = self.m[name], self.v[name]
        m.mul_(b1).add_(z, alpha=1 - b1)
        v.mul_(b2).addcmul_(z, z, value=1 - b2)
        return m / (v.sqrt() + self.eps)

    def state_dict(self) -> dict:
        sd = super().state_dict()
        sd.update(m={n: t.clone() for n, t in self.m.items()}, v={n: t.clone() for n, t in self.v.items()})
        return sd

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        for key in ("m", "v"):
            for n, t in state[key].items():
                getattr(self, key)[n].copy_(t)


def newton_schulz_cubic(m: Tensor, steps: int = 5) -> Tensor:
    """m/‖m‖_F orthogonalised by X ← ½X(3I − XᵀX) on the smaller Gram side (d-eggs' Muon)."""
    norm = torch.linalg.vector_norm(m)
    x = m / torch.where(norm > 1e-6, norm, torch.ones_like(norm))   # d-eggs skips the division below 1e-6
    tall = x.shape[0] > x.shape[1]
    with fixed_threads():
        for _ in range(steps):
            if tall:
                x = 0.5 * x @ (3 * torch.eye(x.shape[1], dtype=x.dtype, device=x.device) - x.T @ x)
            else:
                x = 0.5 * (3 * torch.eye(x.shape[0], dtype=x.dtype, device=x.device) - x @ x.T) @ x
    return x


class MuonRule(AdamWRule):
    """Muon on matrices (not embeddings), AdamW on the rest (module docstring)."""

    def __init__(self, params, groups, config, momentum: float = 0.85, steps: int = 5,
                 is_matrix=lambda name, p: p.dim() == 2 and "embed" not in name, **kw):
        super().__init__(params, groups, config, **kw)
        self.momentum, self.steps = momentum, steps
        self.matrices = {n for n, p in params.items() if is_matrix(n, p)}

    def direction(self, name, z):
        if name not in self.matrices:
            return super().direction(name, z)
        m = self.m[name]
        m.mul_(self.momentum).add_(z)
        return newton_schulz_cubic(m, self.steps)


INTEGER_RULES = {"int_ztest": ZTestRule, "int_sgd": ThresholdSGDRule, "int_adamw": AdamWRule, "int_muon": MuonRule}

__all__ = ["AbstractIntegerRule", "AdamWRule", "INTEGER_RULES", "MuonRule", "SECOND_MOMENTS", "ThresholdSGDRule",
           "ZTestRule", "newton_schulz_cubic", "quantized_apply", "term_std", "ztest_threshold"]
