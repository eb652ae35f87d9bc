"""Fault injection for the distributed tests: a Replica subclass that breaks on a schedule.

The product's Replica has no test hooks; these faults wrap its public methods. ``faulty(plan)``
makes a subclass whose worker ``slot`` (first generation only) follows ``plan[slot]``:
``{"die_at_start": True, "die": step, "slow": {step: seconds}, "corrupt": {step: mode}, "drift": step}``, each fault
once, at the first chunk this replica evaluates at or after its step; ``drift`` nudges a
weight right after the update of that step. The class is pickled by value, so Ray workers
need not import this file.
"""
import os
import sys
import time

import torch

from hyperscalees.distributed import wire
from hyperscalees.distributed.replica import Replica

CORRUPTIONS = ("flip", "truncate", "version", "step")


class FaultyReplica(Replica):
    PLAN: dict = {}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        plan = self.PLAN.get(self.slot, {}) if self.generation == 0 else {}
        if plan.get("die_at_start"):
            os._exit(1)  # a process death before the worker is ever ready
        self.faults = {k: (dict(v) if isinstance(v, dict) else v) for k, v in plan.items()}

    def _due(self, kind: str, step: int):
        table = self.faults.get(kind, {})
        due = [s for s in table if s <= step]
        return table.pop(min(due)) if due else None

    def evaluate(self, step, lo, hi):
        if self.faults.get("die") is not None and self.faults["die"] <= step:
            os._exit(1)  # a real process death, mid-chunk
        seconds = self._due("slow", step)
        if seconds:
            time.sleep(seconds)
        msg, added = super().evaluate(step, lo, hi)
        return corrupt(msg, self._due("corrupt", step), step), added

    def update(self, message, expected_hash=None, fitness_state=None):
        super().update(message, None, fitness_state)
        if self.faults.get("drift") == self.es.step - 1:
            del self.faults["drift"]
            with torch.no_grad():
                next(self.model.parameters()).add_(1e-3)
        return self.check_hash(expected_hash)


def corrupt(msg: bytes, mode, step: int) -> bytes:
    if mode == "flip":
        return msg[:-1] + bytes([msg[-1] ^ 0x10])
    if mode == "truncate":
        return msg[: len(msg) // 2]
    if mode == "version":
        return msg[:4] + bytes([wire.VERSION + 1]) + msg[5:]
    if mode == "step":
        m = wire.decode(msg, wire.RESULT, step)
        return wire.encode(wire.RESULT, step + 1, m.offset, m.values, m.encoding)
    assert mode is None, mode
    return msg


def faulty(plan: dict) -> type:
    """A FaultyReplica subclass following ``plan`` ({slot: faults}), picklable by value for Ray."""
    try:
        import ray.cloudpickle as cloudpickle
        cloudpickle.register_pickle_by_value(sys.modules[__name__])
    except ImportError:
        pass
    return type("PlannedReplica", (FaultyReplica,), {"PLAN": plan})
