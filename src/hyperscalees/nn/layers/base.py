"""The layer registry: how each family of modules runs a whole population in one forward.

A layer (:class:`AbstractLayer`) knows one family of modules (``nn.Linear``, norms,
attention, ...). It declares which of a module's own parameters it can perturb and
which of those take low-rank noise in which stored orientation -- ``es_map`` derivation
asks the same object, so "which noise" is decided once -- and it builds the forward that
replaces the module's own inside :func:`hyperscalees.nn.perturbation`.

Users add a family with :func:`register_layer`; later registrations are consulted first,
so they override built-ins. A module whose own perturbed parameters no layer handles
goes to the generic fallback (``torch.vmap`` over per-member copies, small tensors only).

Dimensions: P members in the slice, K = P/2 pairs, M rows per member. Inputs are
member-major along the batch dimension: rows [i*M, (i+1)*M) belong to member lo + i.
"""
from __future__ import annotations

from typing import Callable, Collection

import torch
from torch import Tensor, nn

from ...noise.draw import Noise
from ...noise.spec import ESMode
from ...noise.store import NoiseStore
from ...ops.member import member_values

BLOCK_BYTES = 8 << 20  # transient noise-sized buffers one layer may hold at once
LOWRANK_KINDS = ("out_in", "in_out", "rows")  # W (out, in) used as x Wᵀ; W (in, out) as x W; a lookup table


class PopulationContext:
    """Members [lo, hi) of one step: what every installed forward reads.

    ``plans`` holds what layers derive from the step's noise for exactly these members (a
    matrix layer's GEMM plan, cut to the block's pairs), resolved on a layer's first call
    and reused by every later call of the block -- a generate runs each layer once per token.
    """

    def __init__(self, store: NoiseStore, lo: int, hi: int, fallback_bytes: float = float("inf"),
                 repeated: bool = False):
        self.store, self.lo, self.hi = store, lo, hi
        self.repeated = repeated  # the block calls each layer many times: plans are made on first use
        self.k = (hi - lo) // store.pop.per_draw  # draws: pairs, or members when independent
        self.members = hi - lo
        self.fallback_bytes = fallback_bytes
        self.plans: dict = {}

    @property
    def pop(self):
        return self.store.pop

    def noise(self, name: str, k0: int = 0, k1: int | None = None) -> Noise:
        """Noise of pairs [k0, k1) of this slice (all of it by default); marks it applied."""
        k1 = self.k if k1 is None else k1
        self.store.mark_applied(name)
        g = self.pop.per_draw
        return self.store.noise(name, self.lo + g * k0, self.lo + g * k1)

    def rows(self, name: str, rows: Tensor) -> Noise:
        """Rows (K, T) of ``name``'s noise for this slice (lookups); marks it applied."""
        self.store.mark_applied(name)
        return self.store.rows(name, self.lo, self.hi, rows)

    def pair_blocks(self, bytes_per_pair: int) -> list[tuple[int, int]]:
        """[k0, k1) pair ranges whose transient buffers fit :data:`BLOCK_BYTES`.

        At T=1 a chunk's noise and the GEMM operands built from it are as large as its
        activations; a layer works through them block by block so they never coexist.
        """
        kb = max(1, BLOCK_BYTES // max(1, bytes_per_pair))
        return [(k0, min(self.k, k0 + kb)) for k0 in range(0, self.k, kb)]

    def check_rows(self, t: Tensor, what: str, dim: int = 0) -> Tensor:
        if t.dim() <= dim or t.shape[dim] % self.members:
            got = t.shape[dim] if t.dim() > dim else "none"
            raise ValueError(f"{what}: batch dimension {dim} has size {got}, not a multiple of the "
                             f"{self.members} members being evaluated (inputs must be member-major)")
        return t

    def vector(self, param: Tensor | None, name: str | None, dtype: torch.dtype) -> Tensor | None:
        """(K, 2, 1, *shape) per-member values of a small tensor, or the tensor itself if unperturbed."""
        if param is None:
            return None
        if name is None:
            return param.to(dtype)
        n = self.noise(name)
        return member_values(param, n.eps, n.signs, n.scale, dtype)


class AbstractLayer:
    """How one family of modules runs a population; subclasses are registered with :func:`register_layer`."""

    def params(self, module: nn.Module) -> Collection[str]:
        """Names of the module's own parameters this layer can perturb."""
        raise NotImplementedError

    def lowrank(self, module: nn.Module) -> dict[str, str]:
        """{attribute: kind} of the parameters that take low-rank noise; kind in :data:`LOWRANK_KINDS`."""
        return {}

    def default_mode(self, module: nn.Module, attr: str, param: Tensor) -> ESMode:
        kind = self.lowrank(module).get(attr)
        if kind == "rows":
            return ESMode.EMB_PARAM
        return ESMode.MM_PARAM if kind else ESMode.PARAM

    def handles(self, module: nn.Module, attrs: Collection[str]) -> bool:
        return set(attrs) <= set(self.params(module))

    def routes_children(self, module: nn.Module) -> bool:
        """True if the module's stock forward reads a child's parameters without calling the child
        (torch's MultiheadAttention hands ``out_proj.weight`` to a functional op): the layer must
        then run whenever anything below the module is perturbed, even if no own parameter is."""
        return False

    def forward(self, ctx: PopulationContext, module: nn.Module, active: dict[str, str]) -> Callable:
        """The forward that replaces ``module.forward``; ``active`` maps attributes to parameter names."""
        raise NotImplementedError


Match = Callable[[nn.Module], bool]
_REGISTRY: list[tuple[Match, AbstractLayer]] = []


def register_layer(kind: type | Match, layer: AbstractLayer | type[AbstractLayer]) -> AbstractLayer:
    """Run modules of ``kind`` (a class, matched with ``isinstance``, or a predicate) with ``layer``.

    Registered later is consulted first, so a user's registration overrides a built-in one.
    Returns the layer object (pass it to :func:`unregister_layer` to undo).
    """
    if isinstance(layer, type):
        layer = layer()
    if not isinstance(layer, AbstractLayer):
        raise TypeError(f"layer must be an AbstractLayer (or its class), got {type(layer).__name__}")
    match = (lambda m, cls=kind: isinstance(m, cls)) if isinstance(kind, type) else kind
    if not callable(match):
        raise TypeError(f"kind must be a module class or a predicate module -> bool, got {kind!r}")
    _REGISTRY.append((match, layer))
    return layer


def unregister_layer(layer: AbstractLayer) -> None:
    """Remove every registration of ``layer`` (the object :func:`register_layer` returned)."""
    _REGISTRY[:] = [(m, l) for m, l in _REGISTRY if l is not layer]


def registered_layer(module: nn.Module, attrs: Collection[str]) -> AbstractLayer | None:
    """The most recently registered layer that matches ``module`` and handles ``attrs``, or None."""
    for match, layer in reversed(_REGISTRY):
        if match(module) and layer.handles(module, attrs):
            return layer
    return None


def own_parameters(module: nn.Module) -> dict[str, Tensor]:
    return {a: p for a, p in module._parameters.items() if p is not None}
