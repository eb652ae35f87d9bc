"""The update-rule seam: how an ES estimate becomes a change of the weights.

Everything before this step -- shaping, the estimate ĝ -- is the same for every rule.
A rule receives ĝ per parameter (the ascent direction of expected fitness, float32,
the parameter's shape), changes the parameters in place and owns whatever state it
needs (moments, fp32 masters, integer accumulators). ``torch.optim`` is one rule
(:class:`OptimizerRule`); integer-only models plug in rules of their own beside it.

A custom rule is any class or factory ``(params, groups, config) -> rule`` whose object
has the methods below; pass it as ``update_rule=`` to a strategy or ``hs.EGGROLL``.
"""
from __future__ import annotations

from torch import Tensor

from ..groups import ParamGroup


class AbstractUpdateRule:
    """State in, update out. ``params`` maps names to the live tensors the rule may change.

    ``takes_negated_estimate``: :meth:`apply` receives −ĝ instead of ĝ (what a torch optimizer
    wants in ``.grad``). The strategy then folds the sign into the estimate's fitness weights,
    which is exact and costs nothing, instead of the rule negating every estimate in a pass.
    """

    takes_negated_estimate = False
    by_parameter = False  # True: each parameter's step depends on its own estimate and state alone, so
    # :meth:`apply` on a part of them moves each exactly as on all (the workers sharing a node's weights)

    def __init__(self, params: dict[str, Tensor], groups: list[ParamGroup], config):
        self.params = params
        self.groups = groups
        self.config = config

    def prepare(self, pop, coefficients: dict[str, float], lowrank: frozenset = frozenset()) -> None:
        """Called by the strategy before :meth:`apply` with the step's ``Population``, per parameter
        the coefficient c of ĝ = c · Σ_k w_k t_k (t_k the pair's unit noise term: A Bᵀ for the names
        in ``lowrank``, ε otherwise; w_k its fitness contrast). Rules that need the raw vote (integer
        rules) divide c out; the default ignores it."""

    def noise_overlays(self) -> dict:
        """{name: (row factors, column factors)} this rule wants on the next step's noise (adaptive
        noise scaling, ``NoiseStore.overlay``); none by default."""
        return {}

    def apply(self, estimates: dict[str, Tensor], lr_factor: float) -> None:
        """Move every parameter named in ``estimates`` (ĝ, or −ĝ with ``takes_negated_estimate``), and
        none other; group lrs are scaled by ``lr_factor`` (schedules)."""
        raise NotImplementedError

    def metrics(self) -> dict:
        """Extra per-step metrics (device scalars or numbers) merged into the strategy's; none by default."""
        return {}

    def lrs(self, lr_factor: float) -> list[float]:
        """The learning rate of each group at ``lr_factor``, for metrics."""
        return [g.lr * lr_factor for g in self.groups]

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass
