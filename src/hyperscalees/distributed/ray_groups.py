"""Group coordinators: the Ray driver's calls per group of k workers on one node, not per worker.

A flat :class:`~.ray.RayBackend` hands every chunk to a worker itself, and its CPU per chunk (Ray's task
submission, the result's fetch and decoding: about 0.5-1.6 ms, ``ray_driver_cpu_2026-11-29.txt``) is what
``bench scale`` finds caps a thousand workers. With ``RayConfig(group_size=k)`` the driver's actors are
:class:`GroupLead` s instead, one per group: each reserves its k workers' CPUs (so Ray places a group on one node
with room for all of it), starts its k workers on its own node reserving nothing more, and is to them what the
driver is to a flat run, with the very same code (its driver, ``ray.GroupBackend``, is a ``RayBackend``):

    driver ── evaluate(s, lo, hi) ──▶ GroupLead ── its own ChunkQueue over [lo, hi) ──▶ k workers (Replica)
           ◀── one RESULT for [lo, hi) ──          ◀── a RESULT per sub-chunk ──
           ── SHAPED ──────────────────▶ GroupLead ── SHAPED ──▶ k workers; replays its own replica meanwhile

So a step costs the driver two chunks per *group* (and an update and a hash check per group), whatever k is;
a group's coordinating runs on its own node, beside the other groups'. Inside a group everything a flat run
survives is survived the same way (stragglers copied, a dead worker's chunk re-queued and a new worker started,
drift repaired); a lost group (its node died) is a lost worker to the driver. The weights stay bit-identical to
a local run: results are concatenated in member order, and a stateful fitness's chunk states come back one per
sub-chunk (:class:`~.replica.BundledStates`), merged by the driver as a flat run's with the groups' sub-chunks.

Not for GPU workers (``RayConfig`` refuses it): a group's workers reserve nothing, and Ray hides GPUs from an
actor that reserves none.
"""
from __future__ import annotations

import dataclasses
import os

import torch

from ..nn.evaluate import join_chunks
from . import wire
from .base import PhaseTimes
from .coordinator import Chunk, split
from .ray_session import RayConfig
from .recipe import load_fitness_state
from .replica import BundledStates, Replica, ReplicaDrift


def lead_options(config: RayConfig, replica: type, backend: type) -> dict:
    """The keyword arguments every :class:`GroupLead` of ``config`` is started with: its group's own
    settings (k workers of class ``replica``, in the Ray this actor already runs in), that class, and
    the backend class that drives them (``ray.GroupBackend``: passed in, so this module needs no Ray)."""
    group = dataclasses.replace(config, workers=config.group_size, max_workers=None, group_size=1, shared_replay=False,
                                address="auto", dashboard=False, temp_dir=None)
    return {"group": group, "worker": replica, "backend": backend}


class GroupLead(Replica):
    """One group's coordinator, an actor of the driver's: it answers the driver as a worker does (a
    :class:`Replica`'s calls: ``evaluate``, ``update``, ``load``, ``check_hash``, ``phase_times``), and gets
    the answers from its own workers. It holds a replica (its ``GroupBackend``'s), the one its
    workers are started from and checked against."""

    def __init__(self, recipe, state: dict | None = None, threads: int | None = 1, slot: int = 0,
                 generation: int = 0, *, group: RayConfig, worker: type = Replica, backend: type):
        if threads:
            torch.set_num_threads(threads)
        self.slot, self.generation = slot, generation
        self.backend = backend(recipe, config=group, replica=worker)  # a ray.GroupBackend
        self.es, self.fitness = self.backend.es, self.backend.fitness
        self.model = self.es.model
        self.drifted: str | None = None
        self.phases = PhaseTimes()
        if state is not None:
            self.load(state)

    def ready(self) -> int:
        """Up once its workers are: the driver counts a group from then on."""
        self.backend.start()
        return os.getpid()

    def load(self, state: dict) -> str:
        digest = super().load(state)
        self.backend.reload()  # its workers load it after what they have queued
        return digest

    def evaluate(self, step: int, lo: int, hi: int) -> tuple[bytes, BundledStates | None]:
        """Members [lo, hi), by this group's workers: one RESULT message, and every sub-chunk's state."""
        if self.drifted:
            raise ReplicaDrift(self.drifted)
        b = self.backend
        with self.phases("evaluate"):
            size = b.chunk or b.default_chunk(hi - lo)
            results = b.run_chunks([Chunk(c.index, lo + c.lo, lo + c.hi) for c in split(hi - lo, size)])
        states = [state for _, state in results]
        with self.phases("wire"):
            values = join_chunks([v for v, _ in results])
            ternary = values.dim() == 1 and wire.ternary_scale(values) is not None  # the workers' pair signs
            message = wire.encode(wire.RESULT, self.es.step, lo, values, wire.TERNARY if ternary else wire.F32)
        return message, (BundledStates(states) if any(s is not None for s in states) else None)

    def check_hash(self, expected_hash: str | None) -> str | None:
        """This replica's hash against the driver's; a group sharing its weights replays nothing here, so its
        workers compare theirs instead (``shared_group.py``)."""
        if getattr(self.backend, "shares_weights", False):
            if expected_hash is not None:
                self.backend.forward_hash(expected_hash)
            return None
        return super().check_hash(expected_hash)

    def release(self) -> None:
        """Stop this group's workers (and remove what they shared) before the driver kills this actor."""
        self.backend.close()

    def update(self, message: bytes, expected_hash: str | None = None, fitness_state: dict | None = None) -> str | None:
        """The driver's update: sent on to this group's workers, replayed here meanwhile (a group sharing
        its weights: by its workers only)."""
        with self.phases("wire"):
            msg = wire.decode(message, wire.SHAPED, self.es.step, 0, self.es.population)
        load_fitness_state(self.fitness, fitness_state)  # before: the workers are sent this replica's
        with self.phases("replay"):
            self.backend.update(msg.values)
        self.phases.steps += 1
        return self.check_hash(expected_hash)
