"""Count the torch ops a piece of code dispatches, and those that make the host wait for the device.

On a GPU a small-model ES step is bound by launches (each op: a few µs of CPU dispatch)
and stalls (each host read of a device value waits for the whole queue). Both can be
counted on any machine, a CPU included, with a ``TorchDispatchMode``: ops dispatched per
step is a device-independent proxy for launches per step, and a host synchronisation
shows up as one of the ops below whatever device the tensors live on.

On a CPU nothing is on a device, so the counter counts what *would* cross the bus if every
tensor lived on one: device→host reads (``.item()``, ``bool()``, data-dependent shapes,
``.tolist()``, ``.numpy()``, ``.cpu()``, ``.to("cpu")`` spelled as a string, a ``data_ptr()`` handed to ctypes) and
host→device copies (a tensor made from Python or NumPy data: ``torch.tensor``, ``as_tensor``,
``from_numpy``, all seen as ``aten::lift_fresh``; a copy from a CPU tensor to a device one). Ops run on other Python threads
while the counter is open (a thread started inside it, or a ``ThreadPoolExecutor`` task) are
counted too: a dispatch mode is per thread, so each such thread gets its own, feeding this one.
"""
from __future__ import annotations

import functools
import sys
import threading
from collections import Counter
from concurrent.futures.thread import _WorkItem

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


# Reads of a tensor's values by the host that no aten op shows (patched on torch.Tensor while counting).
HOST_READ_METHODS = ("tolist", "numpy", "cpu", "data_ptr")
# Callers whose data_ptr() never reads a device tensor's values: an identity (a storage or cache key),
# or the compiled noise loop, which noise/sampling.py only ever hands CPU tensors.
HOST_POINTER_CALLERS = ("hyperscalees/noise/native.py", "hyperscalees/engine/tree_io.py",
                        "hyperscalees/models/int8_modules.py")


def _is_device_to_host(name: str, args, kwargs, out) -> bool:
    if name not in ("aten::_to_copy", "aten::copy_"):
        return False
    src = args[1] if name == "aten::copy_" else args[0]
    dst = args[0] if name == "aten::copy_" else out
    return (isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor) and src.device.type != "cpu"
            and dst.device.type == "cpu")


def _is_host_to_device(name: str, args, out) -> bool:
    """A tensor made from host data (``lift_fresh``: on a GPU, the copy up), or a CPU -> device copy."""
    if name == "aten::lift_fresh":
        return True
    if name not in ("aten::_to_copy", "aten::copy_"):
        return False
    src = args[1] if name == "aten::copy_" else args[0]
    dst = args[0] if name == "aten::copy_" else out
    return (isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor) and src.device.type == "cpu"
            and dst.device.type != "cpu")


def _targets_cpu(args, kwargs) -> bool:
    """Whether ``Tensor.to(*args, **kwargs)`` spells out the CPU (``"cpu"``) as its device.

    A ``torch.device`` is not counted: ``.to(p.device)`` is how code follows a parameter's device,
    which on a GPU is the device itself (no copy).
    """
    return any(isinstance(a, str) and a.split(":")[0] == "cpu" for a in (*args, kwargs.get("device")))


def _caller_file() -> str:
    frame = sys._getframe(2)
    return frame.f_code.co_filename.replace("\\", "/") if frame else ""


class _Patches:
    """Wraps the host-read methods, thread start and pool tasks while at least one counter is open."""

    lock = threading.Lock()
    counters: list = []
    saved: dict = {}

    @classmethod
    def add(cls, counter) -> None:
        with cls.lock:
            cls.counters.append(counter)
            if len(cls.counters) == 1:
                cls._install()

    @classmethod
    def remove(cls, counter) -> None:
        with cls.lock:
            cls.counters.remove(counter)
            if not cls.counters:
                for (owner, attr), fn in cls.saved.items():
                    if fn is None:
                        delattr(owner, attr)
                    else:
                        setattr(owner, attr, fn)
                cls.saved.clear()

    @classmethod
    def record(cls, name: str, kind: str) -> None:
        for c in list(cls.counters):
            c._record(name, kind)

    @classmethod
    def _install(cls) -> None:
        def wrap(owner, attr, make):
            own = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr)
            cls.saved[(owner, attr)] = own                     # None: inherited, removed again after
            setattr(owner, attr, make(getattr(owner, attr)))

        for method in HOST_READ_METHODS:
            def make(fn, method=method):
                @functools.wraps(fn)
                def read(self, *args, **kwargs):
                    if method != "data_ptr" or not _caller_file().endswith(HOST_POINTER_CALLERS):
                        cls.record(f"Tensor.{method}", "sync")
                    return fn(self, *args, **kwargs)
                return read
            wrap(torch.Tensor, method, make)

        def make_to(fn):
            @functools.wraps(fn)
            def to(self, *args, **kwargs):
                if _targets_cpu(args, kwargs):
                    cls.record("Tensor.to(cpu)", "sync")
                return fn(self, *args, **kwargs)
            return to
        wrap(torch.Tensor, "to", make_to)

        def make_start(fn):                       # a thread started while counting counts its ops
            @functools.wraps(fn)
            def start(self, *args, **kwargs):
                self.run = _counted(self.run)
                return fn(self, *args, **kwargs)
            return start
        wrap(threading.Thread, "start", make_start)

        def make_task(fn):                        # a task run by a pool thread started earlier
            @functools.wraps(fn)
            def run(self, *args, **kwargs):
                return _counted(functools.partial(fn, self))(*args, **kwargs)
            return run
        wrap(_WorkItem, "run", make_task)


def _counted(fn):
    """``fn`` run under a dispatch mode of its own thread that feeds every open counter."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        if not _Patches.counters:
            return fn(*args, **kwargs)
        with _ThreadMode():
            return fn(*args, **kwargs)
    return run


class _OpCounting:
    def _count(self, func, args, kwargs, out) -> None:
        name = func._schema.name
        view = any(r.alias_info is not None and not r.alias_info.is_write for r in func._schema.returns)
        kernel = not view and name not in NO_KERNEL_OPS
        if name in SYNC_OPS or (name in MASK_INDEX_OPS and _is_mask_index(args)) \
                or _is_device_to_host(name, args, kwargs, out):
            kind = "sync"
        elif _is_host_to_device(name, args, out):
            kind = "upload"
        else:
            kind = None
        for c in self._targets():
            c._record(name, kind, kernel=kernel)


class _ThreadMode(_OpCounting, TorchDispatchMode):
    def _targets(self):
        return list(_Patches.counters)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self._count(func, args, kwargs, out)
        return out


class DispatchCounter(_OpCounting, TorchDispatchMode):
    """``with DispatchCounter() as c: ...`` then ``c.ops`` (all ops), ``c.kernel_ops`` (those that
    would launch a kernel on a GPU: no views, no bare allocations), ``c.syncs`` and ``c.sync_ops``
    (device→host reads), ``c.uploads`` and ``c.upload_ops`` (host→device copies); ``c.transfers``
    is both. What counts as which: the module docstring.
    """

    def __init__(self):
        super().__init__()
        self.by_name: Counter[str] = Counter()
        self.sync_ops: Counter[str] = Counter()
        self.upload_ops: Counter[str] = Counter()
        self.kernel_ops = 0
        self._lock = threading.Lock()

    def _targets(self):
        return (self,)

    def _record(self, name: str, kind: str | None, kernel: bool = False) -> None:
        with self._lock:
            if name.startswith("aten::"):
                self.by_name[name] += 1
                self.kernel_ops += kernel
            if kind == "sync":
                self.sync_ops[name] += 1
            elif kind == "upload":
                self.upload_ops[name] += 1

    def __enter__(self):
        _Patches.add(self)
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            _Patches.remove(self)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self._count(func, args, kwargs, out)
        return out

    @property
    def ops(self) -> int:
        return sum(self.by_name.values())

    @property
    def syncs(self) -> int:
        return sum(self.sync_ops.values())

    @property
    def uploads(self) -> int:
        return sum(self.upload_ops.values())

    @property
    def transfers(self) -> int:
        return self.syncs + self.uploads
