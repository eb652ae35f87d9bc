"""Count the torch ops a piece of code dispatches, and those that make the host wait for the device.

On a GPU a small-model ES step is bound by launches (each op: a few µs of CPU dispatch)
and stalls (each host read of a device value waits for the whole queue). Both can be
counted on any machine, a CPU included, with a ``TorchDispatchMode``: ops dispatched per
step is a device-independent proxy for launches per step, and a host synchronisation
shows up as one of the ops below whatever device the tensors live on.
"""
from __future__ import annotations

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Ops whose result the host must see before it can go on: reading a value (.item(), bool(),
# float()), or a result whose size depends on the data.
SYNC_OPS = frozenset({
    "aten::_local_scalar_dense", "aten::is_nonzero", "aten::equal", "aten::nonzero", "aten::nonzero_static",
    "aten::masked_select", "aten::unique_consecutive", "aten::_unique", "aten::_unique2", "aten::unique_dim",
    "aten::repeat_interleave", "aten::allclose", "aten::_assert_async",
})
# Ops that allocate or re-describe memory without running a kernel (views are found by schema).
NO_KERNEL_OPS = frozenset({"aten::empty", "aten::empty_strided", "aten::lift_fresh", "aten::detach", "aten::alias",
                           "aten::_local_scalar_dense", "aten::set_", "aten::resize_"})
MASK_INDEX_OPS = frozenset({"aten::index", "aten::index_put", "aten::index_put_"})  # with a bool mask: nonzero


def _is_mask_index(args) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(t, torch.Tensor) and t.dtype == torch.bool for t in (indices or ()))


def _is_device_to_host(name: str, args, kwargs, out) -> bool:
    if name not in ("aten::_to_copy", "aten::copy_"):
        return False
    src = args[1] if name == "aten::copy_" else args[0]
    dst = args[0] if name == "aten::copy_" else out
    return (isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor) and src.device.type != "cpu"
            and dst.device.type == "cpu")


class DispatchCounter(TorchDispatchMode):
    """``with DispatchCounter() as c: ...`` then ``c.ops`` (all ops), ``c.kernel_ops`` (those that
    would launch a kernel on a GPU: no views, no bare allocations), ``c.syncs`` and ``c.sync_ops``.

    A device-to-host copy counts as a sync too (visible only when a device is present).
    """

    def __init__(self):
        super().__init__()
        self.by_name: Counter[str] = Counter()
        self.sync_ops: Counter[str] = Counter()
        self.kernel_ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func._schema.name
        self.by_name[name] += 1
        view = any(r.alias_info is not None and not r.alias_info.is_write for r in func._schema.returns)
        if not view and name not in NO_KERNEL_OPS:
            self.kernel_ops += 1
        if name in SYNC_OPS or (name in MASK_INDEX_OPS and _is_mask_index(args)) \
                or _is_device_to_host(name, args, kwargs, out):
            self.sync_ops[name] += 1
        return out

    @property
    def ops(self) -> int:
        return sum(self.by_name.values())

    @property
    def syncs(self) -> int:
        return sum(self.sync_ops.values())
