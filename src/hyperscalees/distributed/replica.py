"""What a worker holds and does: a model replica that evaluates chunks and replays updates.

A :class:`Replica` builds the run's task, model and ES from the run's config (so it draws
the same noise from the same seeds as the coordinator), then only ever

- evaluates members [lo, hi) of its current step and answers with a RESULT message
  (``wire.py``): ternary-packed pair signs when the run shapes with pair_sign/ternary,
  float32 otherwise;
- applies a SHAPED message: the same deterministic update the coordinator applied, so no
  weights cross the network. With the update the coordinator sends its parameter hash
  every ``hash_every`` steps; a replica whose hash differs refuses to evaluate
  (:class:`ReplicaDrift`) until the coordinator re-sends its state;
- loads the coordinator's full state (parameters, optimizer, task state) when it is new,
  restarted or repaired: never by replaying history.

It knows nothing about Ray (``ray.py`` wraps it in an actor), so it is tested in-process.
``faults`` injects failures for the tests, each once, at the first chunk this replica
evaluates at or after its step: ``{"die": step, "slow": {step: seconds}, "corrupt": {step: mode}}``;
``{"drift": step}`` nudges a weight right after the update of that step.
"""
from __future__ import annotations

import hashlib
import os
import time

import torch

from ..engine.config import TrainConfig
from ..engine.loop import build
from ..strategies.shaping import SHAPINGS
from . import wire

CORRUPTIONS = ("flip", "truncate", "version", "step")


class ReplicaDrift(RuntimeError):
    """This replica's parameters differ from the coordinator's: it must be re-sent the state."""


def state_hash(model: torch.nn.Module) -> str:
    """SHA-256 of the model's parameters, in name order, bit for bit (buffers that a task derives
    from its own state, like observation statistics, are set per step by fitness, not by updates)."""
    h = hashlib.sha256()
    for name, t in sorted(model.named_parameters()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def ternary_results(es) -> bool:
    """Can a chunk's result be sent as pair signs? Only when the shaping is pair_sign/ternary of
    one score per member with no baseline members, since then shaping the chunk alone gives
    exactly the coordinator's shaping of the whole population (it only compares twins)."""
    shaping = es.strategy.shaping
    return any(shaping is SHAPINGS[n] for n in ("pair_sign", "ternary")) and not es.config.baseline_every


class Replica:
    def __init__(self, config: dict, state: dict | None = None, threads: int | None = 1, faults: dict | None = None):
        if threads:
            torch.set_num_threads(threads)
        self.cfg = TrainConfig.from_dict(config)
        self.task, self.model, self.es = build(self.cfg)
        self.task.record_chunks = True  # a task that accumulates state keeps what each chunk added
        self.ternary = ternary_results(self.es)
        self.faults = dict(faults or {})
        self.drifted: str | None = None
        if state is not None:
            self.load(state)

    def ready(self) -> int:
        return os.getpid()

    @property
    def step(self) -> int:
        return self.es.step

    def load(self, state: dict) -> str:
        """Take the coordinator's state; returns the resulting hash."""
        self.es.load_state_dict({"model": state["model"], "strategy": state["strategy"]})
        self.task.load_state_dict(state.get("task", {}))
        self.drifted = None
        return state_hash(self.model)

    def evaluate(self, step: int, lo: int, hi: int) -> tuple[bytes, dict | None]:
        """(RESULT message with the fitness of members [lo, hi) at this replica's step, the task's chunk
        log: what this chunk added to the task state, None for stateless tasks).

        ``step`` is what the coordinator expects; a replica at another step still answers with
        its own, and the coordinator's decoder refuses it and re-sends the state.
        """
        if self.drifted:
            raise ReplicaDrift(self.drifted)
        self._maybe_stall(step)
        with self.es.perturbed((lo, hi)):
            f = torch.as_tensor(self.task.fitness(self.es.model, lo, hi, step=self.es.step)).float().cpu()
        if f.dim() not in (1, 2) or f.shape[0] != hi - lo:
            raise ValueError(f"task {self.task.name!r} returned fitness of shape {tuple(f.shape)} for members "
                             f"[{lo}, {hi}); expected ({hi - lo},) or ({hi - lo}, G)")
        encoding = wire.F32
        if self.ternary and f.dim() == 1 and bool(torch.isfinite(f).all()):
            f, encoding = self.es.strategy.shaping(f), wire.TERNARY  # exact: see ternary_results
        return self._maybe_corrupt(step, wire.encode(wire.RESULT, self.es.step, lo, f, encoding)), self.task.chunk_log()

    def update(self, message: bytes, expected_hash: str | None = None, task_state: dict | None = None) -> str | None:
        """Apply the SHAPED message of this step; with ``expected_hash``, compare the result. ``task_state``:
        the coordinator's task state after the step (every worker's chunks merged), for stateful tasks."""
        msg = wire.decode(message, wire.SHAPED, self.es.step, 0, self.es.population)
        self.es.update(msg.values)
        if task_state is not None:
            self.task.load_state_dict(task_state)
        if self.faults.get("drift") == self.es.step - 1:
            del self.faults["drift"]
            with torch.no_grad():
                next(self.model.parameters()).add_(1e-3)
        if expected_hash is None:
            return None
        mine = state_hash(self.model)
        if mine != expected_hash:
            self.drifted = (f"parameters after step {self.es.step} hash to {mine[:12]}, the coordinator's to "
                            f"{expected_hash[:12]}")
        return mine

    # -- fault injection (tests) ---------------------------------------------------------
    def _due(self, kind: str, step: int):
        """The value of the earliest fault of ``kind`` due at ``step`` (removed), or None."""
        table = self.faults.get(kind, {})
        due = [s for s in table if s <= step]
        return table.pop(min(due)) if due else None

    def _maybe_stall(self, step: int) -> None:
        if self.faults.get("die") is not None and self.faults["die"] <= step:
            os._exit(1)  # a real process death, mid-chunk
        seconds = self._due("slow", step)
        if seconds:
            time.sleep(seconds)

    def _maybe_corrupt(self, step: int, msg: bytes) -> bytes:
        mode = self._due("corrupt", step)
        if mode == "flip":
            return msg[:-1] + bytes([msg[-1] ^ 0x10])
        if mode == "truncate":
            return msg[: len(msg) // 2]
        if mode == "version":
            return msg[:4] + bytes([wire.VERSION + 1]) + msg[5:]
        if mode == "step":
            m = wire.decode(msg, wire.RESULT, step)
            return wire.encode(wire.RESULT, step + 1, m.offset, m.values, m.encoding)
        return msg
