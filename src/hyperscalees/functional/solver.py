"""A stock torch.optim optimizer used functionally: state in, state out, inputs untouched.

HyperscaleES hands its "gradient" to an optax transform whose state lives in
``noiser_params["opt_state"]``. torch optimizers are stateful objects, so each update
builds a fresh one over *copies* of the trainable leaves, loads a deep copy of the saved
state, steps once and returns the new tensors and the new ``state_dict``. The caller's
params and noiser_params are never modified in place, at the cost of one copy of the
trainable leaves per update (noise, not parameters, dominates ES memory anyway).

Differences from optax, on purpose:
- ``"adamw"`` defaults to ``weight_decay=1e-4`` (optax's default) rather than torch's 1e-2,
  and optax-style ``b1``/``b2`` in ``solver_kwargs`` are accepted as ``betas``.
- Leaves that get no update (EXCLUDED, frozen PARAM) are not in the optimizer at all, so
  weight decay never touches them (optax's adamw decays them too).
- The global-norm clip sums squares in a fixed order (``fixed_sum``), so like the estimate
  its bits never follow the thread count (a plain CPU ``sum`` over >32k values does, and
  ``clip_grad_norm_`` makes no promise either way).
"""
from __future__ import annotations

import copy
from typing import Callable

import torch
from torch import Tensor

from ..strategies.rules.optimizers import SOLVER_CLASSES
from ..strategies.shaping import fixed_sum

SOLVERS = SOLVER_CLASSES  # the optimizer registry's single-class entries


def resolve_solver(solver, solver_kwargs: dict | None) -> tuple[Callable, dict]:
    """Name or callable ``(params, lr=..., **kw) -> Optimizer`` plus normalised kwargs."""
    kw = dict(solver_kwargs or {})
    if "b1" in kw or "b2" in kw:
        kw["betas"] = (kw.pop("b1", 0.9), kw.pop("b2", 0.999))
    if callable(solver):
        return solver, kw
    if solver not in SOLVERS:
        raise ValueError(f"unknown solver {solver!r}; choose one of {sorted(SOLVERS)} or pass a "
                         "torch.optim optimizer class / factory")
    if solver == "adamw":
        kw.setdefault("weight_decay", 1e-4)
    return SOLVERS[solver], kw


def lr_at(lr, step: int) -> float:
    """``lr`` is a float or a schedule ``step -> float`` (optax-schedule style)."""
    return float(lr(step)) if callable(lr) else float(lr)


def solver_step(frozen: dict, opt_state: dict | None, step: int, leaves: list[Tensor], grads: list[Tensor],
                max_grad_norm: float | None = None) -> tuple[list[Tensor], dict]:
    """One optimizer step on copies of ``leaves`` with ``grads``; returns (new leaves, new state)."""
    with torch.no_grad():
        new = [p.detach().clone() for p in leaves]
        for p, g in zip(new, grads):
            p.grad = g.to(p.dtype)
        lr = lr_at(frozen["lr"], step)
        opt = frozen["solver"](new, lr=lr, **frozen["solver_kwargs"])
        if opt_state is not None:
            opt.load_state_dict(copy.deepcopy(opt_state))  # load shares tensors; keep the input intact
        for group in opt.param_groups:
            group["lr"] = lr
        if max_grad_norm is not None:
            clip_global_norm_([p.grad for p in new], max_grad_norm)
        opt.step()
        state = opt.state_dict()
        for p in new:
            p.grad = None
    return new, state


def clip_global_norm_(grads: list[Tensor], max_norm: float) -> None:
    """Scale ``grads`` in place by min(1, max_norm / (‖grads‖ + 1e-6)), torch's clip_grad_norm_ rule."""
    total = torch.sqrt(sum(fixed_sum(g.float() ** 2) for g in grads))
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef.to(g.dtype))
