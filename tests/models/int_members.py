"""Materialize one member of an integer model's population: the reference side of the bit-exact tests."""
from __future__ import annotations

import torch

from hyperscalees.noise.spec import ESMode
from hyperscalees.ops._reference import int_member_matrix, int_member_table, int_member_vector
from hyperscalees.ops.int8 import shift_of


def member_weights(model, es, i: int | None) -> tuple[dict, dict]:
    """({name: member i's materialized weight}, {name: its shift k}); ``i=None``: the unperturbed model.

    Matrices become W·2^k + s·A Bᵀ (int64 fixed point), tables and vectors their perturbed int8
    values (a table's ``name#head`` entry: the same draw as a fixed-point matrix, for a tied head);
    nothing here shares code with the population layers.
    """
    store = es.store() if i is not None else None
    member, shifts = {}, {}
    for name, p in model.named_parameters():
        spec = es.specs.get(name)
        shifts[name + "#head"] = 0
        if i is None or spec is None or spec.mode == ESMode.EXCLUDED:
            member[name], shifts[name] = p.to(torch.int64), 0
            continue
        n = store.noise(name, 2 * (i // 2), 2 * (i // 2) + 2)
        a, b, eps = n.a, n.b, n.eps
        overlay = store.overlay(name)                  # adaptive noise: factors per row / column, truncated
        if overlay is not None:
            f_row, f_col = overlay
            if n.lowrank:
                a, b = (a * f_row.view(1, -1, 1)).trunc(), (b * f_col.view(1, -1, 1)).trunc()
            elif f_col is not None:                    # dense noise of a matrix: the outer product of both
                eps = (eps * (f_row[:, None] * f_col[None, :])).trunc()
            else:
                eps = (eps * f_row).trunc()
        k, sign = shift_of(store.scale(name)), int(n.signs[0, i % 2])
        dense = lambda: p.to(torch.int64) * 2**max(k, 0) + sign * eps[0].to(torch.int64) * 2**max(-k, 0)
        if spec.mode == ESMode.MM_PARAM and not n.lowrank:    # OpenES: dense ε in fixed point
            member[name] = dense()
        elif spec.mode == ESMode.MM_PARAM:
            member[name] = int_member_matrix(p, a[0], b[0], sign, k)
        elif spec.mode == ESMode.EMB_PARAM and not n.lowrank:  # a tied head: the dense ε in fixed point
            member[name] = int_member_vector(p, eps[0], sign, k)
            member[name + "#head"], shifts[name + "#head"] = dense(), max(k, 0)
        elif spec.mode == ESMode.EMB_PARAM:           # looked up per element; as a tied head, in fixed point
            member[name] = int_member_table(p, a[0], b[0], sign, k)
            member[name + "#head"], shifts[name + "#head"] = int_member_matrix(p, a[0], b[0], sign, k), max(k, 0)
        else:
            member[name] = int_member_vector(p, eps[0], sign, k)
        shifts[name] = max(k, 0) if spec.mode == ESMode.MM_PARAM else 0
    return member, shifts
