"""A CPU stand-in for a CUDA graph: record the ops of one call, replay them without Python.

Faithful to what matters for replay correctness: capturing does not change any tensor that
existed before it (CUDA records, it does not run), replay re-runs the recorded ops on the
very tensors they saw with the scalars they saw, and a host synchronisation during capture
is an error. So a step that replays correctly here reads everything that changes between
steps from tensors, not from Python.
"""
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from hyperscalees.benchmarks.dispatch import SYNC_OPS


def _written(func, args, kwargs):
    schema = func._schema
    for i, a in enumerate(schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            value = args[i] if i < len(args) else kwargs.get(a.name)
            yield from (t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor))


class _Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops, self.created, self.saved = [], set(), {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func._schema.name in SYNC_OPS:
            raise RuntimeError(f"{func._schema.name}: the host waits for the device during capture")
        for t in _written(func, args, kwargs):
            st = t.untyped_storage()
            if st.data_ptr() not in self.created and st.data_ptr() not in self.saved:
                self.saved[st.data_ptr()] = (st, st.clone())
        out = func(*args, **kwargs)
        if func.namespace == "profiler":
            return out
        outs = tree_flatten(out)[0]
        fresh = [r.alias_info is None for r in func._schema.returns]
        targets = []
        for i, t in enumerate(outs):
            new = isinstance(t, torch.Tensor) and (fresh[i] if i < len(fresh) else True)
            if new:
                self.created.add(t.untyped_storage().data_ptr())
            targets.append(t if new else None)
        self.ops.append((func, args, kwargs, targets))
        return out

    def restore(self):
        for st, saved in self.saved.values():
            st.copy_(saved)


class RecordedGraph:
    def __init__(self, device):
        self.ops = []

    def capture(self, fn):
        rec = _Recorder()
        with rec:
            out = fn()
        rec.restore()
        self.ops = rec.ops
        return out

    @torch.no_grad()  # a graph replays kernels; autograd has no part in it
    def replay(self):
        for func, args, kwargs, targets in self.ops:
            res = tree_flatten(func(*args, **kwargs))[0]
            for recorded, new in zip(targets, res):
                if recorded is not None:
                    recorded.copy_(new)
