"""``RayBackend``: the population's chunks pulled by Ray worker actors that each hold a model replica.

The driver is the coordinator. Per step it keeps a :class:`~.coordinator.ChunkQueue`; every idle worker is
handed the next chunk (stragglers' chunks are copied to idle workers after the straggler timeout, the first
result wins), results arrive as ``wire`` messages and are decoded with the step and member range the
coordinator expects, anything refused is logged and recomputed. Then the coordinator shapes, sends the packed
shaped vector to every worker and applies the identical update to its own replica (the one the engine
checkpoints) while they do: O(population) bits a step, never the weights.

Drawn in ``docs/guide/backends.md``. With ``group_size`` k > 1 the driver's actors are group coordinators
(``ray_groups.py``), each the driver of k workers on one node: the driver's calls are per group, not per worker;
with ``shared_replay`` too, a group's workers share one copy of the weights, each replaying a part (``shared_group.py``).

Elastic membership: Ray is asked for ``max_workers`` actors (default ``workers``). An actor gets chunks once it
is up; one Ray cannot place yet waits in Ray's queue, and starts on the first node that joins with room for it;
once up it loads the coordinator's state of that moment (an actor runs its calls in order: the updates sent after
apply on top). A node that dies takes its actors with it: their chunks are re-queued (or copied to an idle worker
once late) and each slot gets a new actor, not waited for. Weights stay bit-identical to one process: the update
depends only on the seeds and the shaped fitness in member order, never on who computed which chunk.

Ray is imported lazily, here and in ``ray_session.py`` (its settings, start, stop): ``import hyperscalees`` needs none.
"""
from __future__ import annotations

import logging
import time
from collections import Counter

import torch

from ..nn.evaluate import join_chunks
from ..ops.fixed_order import torch_threads
from .base import AbstractBackend
from .coordinator import ChunkQueue, ChunkTimes, Counters, split
from .recipe import check_distributable, fitness_state
from .replica import Replica, ReplicaDrift, coordinator_state, state_hash, unbundle
from .ray_groups import GroupLead, lead_options
from .shared_group import SharedLead, check_shareable
from .ray_report import RayReports
from .ray_session import (RayConfig, cluster_view, died_unexpectedly, first_line, import_ray, ready_on_node,  # noqa: F401
                          start_ray, stop_ray)  # stop_ray: re-exported
from . import wire

log = logging.getLogger("hyperscalees.distributed")


class RayBackend(RayReports, AbstractBackend):
    """Chunks pulled by Ray worker actors, each a :class:`Replica` built from the recipe;
    bit-identical to :class:`~.local.LocalBackend`.

    ``RayBackend(recipe, workers=2, address=None, ...)`` (:class:`RayConfig`'s fields, or ``config=RayConfig(...)``).
    Workers start on the first step, from the driver's state at that moment (so a resumed run's workers start from
    the checkpoint). ``replica``: the actor class, a :class:`Replica` or a subclass of it.
    """

    name = "ray"
    Config = RayConfig
    overlap_replay = True  # workers are sent the update before the driver replays it (False: after; to measure)

    def __init__(self, recipe, config: RayConfig | None = None, *, chunk: int | None = None,
                 replica: type = Replica, **options):
        if config is not None and options:
            raise TypeError(f"give config=RayConfig(...) or its fields, not both (got {sorted(options)})")
        self.config = config or RayConfig(**options)
        super().__init__(recipe, chunk)
        check_distributable(self.fitness)
        device = next(self.es.model.parameters()).device
        if device.type == "cuda" and not self.config.gpus_per_worker:
            raise ValueError(f"a model on {device} needs gpus_per_worker > 0 on Ray workers (Ray hides GPUs "
                             "from actors that reserve none)")
        self.replica_cls, self.replica_kwargs = replica, {}
        if self.config.group_size > 1:  # the driver's actors coordinate groups
            self.replica_cls, self.replica_kwargs = GroupLead, lead_options(self.config, replica, GroupBackend)
        if self.config.shared_replay:  # a group's workers share one copy of their node's weights
            check_shareable(self.es)
            self.replica_kwargs["backend"] = SharedGroupBackend
        self.counters, self.times = Counters(), ChunkTimes(self.config.straggler_timeout)
        self.rejected = self.drift_repairs = self.restarts = 0
        self.step_times: dict[int, float] = {}
        self.bytes_in = self.bytes_out = 0
        self.actors: dict[int, object] = {}           # slot -> live actor (starting or ready)
        self.starting: dict[object, tuple] = {}       # ref of a start -> (slot, generation, state ref)
        self.ready: set[int] = set()                  # slots whose actor is up: they get chunks
        self.node_of: dict[int, str] = {}             # slot -> Ray node id of its actor
        self.chunks_by_node: dict[str, int] = {}      # chunks whose result was used, per node
        self.generation: dict[int, int] = {}
        self.inflight: dict[object, tuple] = {}       # ref -> (slot, generation, step, chunk)
        self.updates: list = []                       # refs of updates not yet read
        self._owns_ray, self._workers_at_close, self._ray = False, 0, None
        self._state = (None, None)                    # (step, object ref) of the shared state
        self._worker_phases: list[dict] = []           # the workers' phase_times(), read at close

    # -- life cycle ------------------------------------------------------------------------
    @property
    def started(self) -> bool:
        return self._ray is not None

    def start(self) -> None:
        """Start (or connect to) Ray and the workers; the first step does it if nobody did.

        ``config.slots`` actors are asked of Ray; the first ``workers`` of them to be ready start
        the run, the others join when Ray places them (elastic: a node that joins mid-run)."""
        if self.started:
            return
        self._owns_ray = start_ray(self.config)
        self._ray = import_ray(local=self.config.address is None)
        ray = self._ray
        self._actor_cls = ray.remote(self.replica_cls).options(**self._actor_options())
        for slot in range(self.config.slots):
            self._spawn(slot)
        deadline = time.monotonic() + self.config.startup_timeout
        while len(self.ready) < self.config.leads:
            left = deadline - time.monotonic()
            if left <= 0 or not self.starting:
                k, options = self.config.group_size, self._actor_options()
                raise RuntimeError(f"{self.config.leads} {'workers' if k == 1 else f'groups of {k} workers'} did not "
                                   f"start within {self.config.startup_timeout:g} s: does the cluster have "
                                   f"{options['num_cpus']:g} CPU(s) and {options['num_gpus']:g} GPU(s) free for each? "
                                   f"{len(self.ready)} up {cluster_view(ray)}")
            self._poll_starting(timeout=left, fatal=True)

    def _actor_options(self) -> dict:
        """What each actor reserves (a group's coordinator: its workers' CPUs) and how Ray places it."""
        cpus = self.config.cpus_per_worker * self.config.group_size
        return dict(num_cpus=cpus, num_gpus=self.config.gpus_per_worker, max_restarts=0, max_task_retries=0)

    def _state_ref(self):
        """The coordinator's current state in Ray's object store, made once per step."""
        step, ref = self._state
        if step != self.es.step or ref is None:
            ref = self._ray.put(coordinator_state(self.es, self.fitness))
            self._state = (self.es.step, ref)
        return ref

    def _spawn(self, slot: int) -> None:
        """A new actor for ``slot``, from the coordinator's state; it gets chunks once it is ready (Ray
        places it: at once, or when a node with room joins). It is sent no update until then: once up
        it loads the coordinator's state of that moment if that has changed since."""
        gen = self.generation.get(slot, -1) + 1
        self.generation[slot] = gen
        state = self._state_ref()
        threads = 1 if self.config.group_size > 1 else self.config.worker_threads  # a group's workers get theirs
        self.actors[slot] = self._actor_cls.remote(self.recipe, state, threads, slot, gen, **self.replica_kwargs)
        self.starting[self.actors[slot].__ray_call__.remote(ready_on_node)] = (slot, gen, state)

    def _poll_starting(self, timeout: float | None = 0, fatal: bool = False) -> None:
        """Mark the actors that have come up ready and note their node (``fatal``: a start that
        fails ends the run, as at start-up; else the slot is lost and started anew)."""
        if not self.starting:
            return
        ready, _ = self._ray.wait(list(self.starting), num_returns=1, timeout=timeout)
        if ready:  # and every other one already done
            ready, _ = self._ray.wait(list(self.starting), num_returns=len(self.starting), timeout=0)
        for ref in ready:
            slot, gen, state = self.starting.pop(ref)
            if self.generation.get(slot) != gen or slot not in self.actors:
                continue
            try:
                self.node_of[slot] = self._ray.get(ref)
            except self._ray.exceptions.RayError as e:
                if fatal and not died_unexpectedly(e):  # its own error (the recipe, the model): ends the run
                    raise RuntimeError(f"a Ray worker failed to start: {first_line(e)}") from None
                self._lost(slot, f"failed to start: {first_line(e)}")  # a crash: a new one, as mid-run
                continue
            self.ready.add(slot)
            if self._state_ref() is not state:  # steps went by while Ray could not place it
                self.updates.append((slot, gen, self.actors[slot].load.remote(self._state_ref())))
            self.chunks_by_node.setdefault(self.node_of[slot], 0)
            if self.es.step:  # joined mid-run: a new node, or a replacement
                log.info("worker %d ready on node %s at step %d", slot, self.node_of[slot][:12], self.es.step)

    def _lost(self, slot: int, why: str) -> None:
        """Worker ``slot`` died (or its node did): start a new one from the coordinator's state, not waited for,
        or go on with fewer."""
        self._forget(slot)
        if self.generation[slot] < self.config.max_restarts:
            log.warning("worker %d lost (%s): starting a new one from the coordinator's state", slot, why)
            self.restarts += 1
            self._spawn(slot)
        else:
            log.warning("worker %d lost (%s) after %d restarts: continuing with %d workers", slot, why,
                        self.config.max_restarts, len(self.actors))
        if not self.actors:
            raise RuntimeError(f"every Ray worker is gone (last: {why})")

    def _forget(self, slot: int) -> None:
        """Kill worker ``slot``'s actor (if any) and drop it and its chunks in flight."""
        actor = self.actors.pop(slot, None)
        self.ready.discard(slot)
        if actor is not None:
            self._ray.kill(actor)
        for ref in [r for r, v in self.inflight.items() if v[0] == slot]:
            del self.inflight[ref]

    def close(self) -> None:
        if self._ray is None:
            return
        self._workers_at_close = len(self.ready)
        self._worker_phases = self._read_worker_phases()
        if self.config.shared_replay:  # each group's coordinator stops its workers, removes their weights' file
            self._ray.wait([a.release.remote() for a in self.actors.values()], num_returns=len(self.actors), timeout=9)
        for actor in self.actors.values():
            self._ray.kill(actor)
        self.actors.clear()
        self.inflight.clear()
        self.starting.clear()
        self.ready.clear()
        if self._owns_ray:
            self._ray.shutdown()
        self._ray = None

    # -- one step ----------------------------------------------------------------------------
    def evaluate(self):
        es = self.es
        results = self.run_chunks(split(es.population, self.chunk or self.default_chunk(es.population)))
        added = [s for _, state in results for s in unbundle(state)]
        if any(state is not None for state in added):  # in member order: the operations of one process
            self.fitness.merge(es.model, es.step, added)
        return join_chunks([values for values, _ in results])

    def run_chunks(self, chunks: list) -> list:
        """Each chunk's (values, what a stateful fitness added) from the workers, in member order."""
        self.start()
        es = self.es
        t0, cpu0 = time.perf_counter(), time.process_time()
        self._drain_updates()
        self._poll_starting()
        queue = ChunkQueue(es.step, chunks, self.times, self.counters)
        while not queue.done:
            idle = self._assign(queue)
            if not self.inflight and not self.starting:
                raise RuntimeError(f"step {queue.step}: chunks missing but none running and no worker to run them")
            # an idle worker may take a straggler's chunk once it is late: wake then (not a poll: a wait
            # costs the driver CPU); else wait for a result, or for a worker to come up (as long as a start may take)
            late_in = queue.until_late() if idle else None
            timeout = max(1e-3, late_in) if late_in is not None else None if self.inflight else \
                self.config.startup_timeout
            with self.phases("wait"):
                ready, rest = self._ray.wait(list(self.inflight) + list(self.starting), num_returns=1, timeout=timeout)
                if ready and rest:  # every result already in is taken in this pass: one wait, not one each
                    ready += self._ray.wait(rest, num_returns=len(rest), timeout=0)[0]
            if not ready and not self.inflight:
                raise RuntimeError(f"step {queue.step}: no worker left and none started within "
                                   f"{self.config.startup_timeout:g} s")
            with self.phases("wire"):
                for ref in ready:
                    if ref in self.inflight:
                        self._collect(ref, queue)
                    elif ref in self.starting:
                        self._poll_starting()
        self.step_times[es.step] = time.perf_counter() - t0
        # what no worker shares: the driver's CPU (every thread, Ray's too) handing out and collecting chunks
        self.phases.add("coordinator_cpu", time.process_time() - cpu0)
        return queue.results()

    def _assign(self, queue: ChunkQueue) -> int:
        """Give each ready worker chunks up to ``in_flight`` (one each first, in slot order; a worker runs its
        calls in order, so a second one waits behind the first, hiding the round trip between them);
        returns how many ready workers have room left."""
        held = Counter(v[0] for v in self.inflight.values())
        for _ in range(self.config.in_flight):
            for slot in sorted(self.ready):
                if held[slot] >= self.config.in_flight:
                    continue
                c = queue.assign(slot)
                if c is not None:
                    ref = self.actors[slot].evaluate.remote(queue.step, c.lo, c.hi)
                    self.inflight[ref] = (slot, self.generation[slot], queue.step, c)
                    held[slot] += 1
        return sum(1 for slot in self.ready if held[slot] < self.config.in_flight)

    def default_chunk(self, population: int) -> int:
        """Two chunks per worker slot (whole antithetic pairs): a straggler's chunk is half its share.
        Slots, not the workers alive: the chunking stays the same when workers come and go."""
        per = -(-population // (2 * self.config.slots))
        return max(2, per + per % 2)

    def _collect(self, ref, queue: ChunkQueue) -> None:
        ray = self._ray
        slot, gen, step, c = self.inflight.pop(ref)
        stale = self.generation.get(slot) != gen or slot not in self.actors
        ours = step == queue.step and queue.owns(c)  # not a copy of a closed step's (or a group's earlier) chunk
        try:
            data, added = ray.get(ref)
        except ray.exceptions.RayActorError as e:
            why = f"{type(e).__name__}: {first_line(e)}"
            if not stale:
                self._lost(slot, why)
            if ours:
                queue.fail(c.index, slot, f"worker {slot} died ({why})")
                if not stale:           # what it held behind that chunk (in_flight > 1), its refs dropped by _lost
                    queue.forget(slot)
            return
        except ray.exceptions.RayTaskError as e:
            if not isinstance(e.cause, ReplicaDrift):
                raise RuntimeError(f"worker {slot} failed on members [{c.lo}, {c.hi}) at step {step}: "
                                   f"{e.cause!r}") from e.cause
            self.drift_repairs += 1
            log.warning("worker %d drifted (%s): re-sending the coordinator's state", slot, e.cause)
            if not stale:
                self.actors[slot].load.remote(self._state_ref())
            if ours:
                queue.fail(c.index, slot, f"worker {slot} drifted")
            return
        self.bytes_in += len(data)
        if not ours:                 # a straggler's copy of a chunk already closed
            self.counters.duplicates += 1
            return
        try:
            msg = wire.decode(data, wire.RESULT, step, c.lo, c.count)
        except wire.WireError as e:
            self.rejected += 1
            log.warning("worker %d: result for members [%d, %d) of step %d refused: %s; recomputing",
                        slot, c.lo, c.hi, step, e)
            if "step" in str(e) and not stale:   # a replica at another step: give it the current state
                self.actors[slot].load.remote(self._state_ref())
            queue.fail(c.index, slot, f"worker {slot}'s result refused: {e}")
            return
        if queue.complete(c.index, slot, (msg.values, added)) and slot in self.node_of:
            node = self.node_of[slot]
            self.chunks_by_node[node] = self.chunks_by_node.get(node, 0) + 1

    def update(self, shaped):
        """Send the shaped vector, then replay it here while the workers do (``overlap_replay``);
        the hash every ``hash_every`` steps follows as its own call, which an actor runs in order."""
        es, step = self.es, self.es.step
        # at driver_threads (1): a noise draw's OpenMP threads spin on into the next step's coordinating (same bits)
        threads = torch_threads(self.config.driver_threads or torch.get_num_threads())
        if not self.overlap_replay:
            with self.phases("replay"), threads:
                metrics = es.update(torch.as_tensor(shaped).float().cpu().reshape(-1))
        self.send_update(shaped, step)
        if self.overlap_replay:
            with self.phases("replay"), threads:
                metrics = es.update(torch.as_tensor(shaped).float().cpu().reshape(-1))
        k = self.config.hash_every
        if k and es.step % k == 0:
            with self.phases("hash"):
                expected = state_hash(es.model)
            for slot in sorted(self.ready):
                self.updates.append((slot, self.generation[slot], self.actors[slot].check_hash.remote(expected)))
        return metrics

    def send_update(self, shaped, step: int) -> None:
        """The SHAPED message of ``step``, and the merged fitness state, to every ready worker (one still
        starting loads the state once up)."""
        with self.phases("wire"):
            shaped = torch.as_tensor(shaped).float().cpu().reshape(-1)
            encoding = wire.TERNARY if wire.ternary_scale(shaped) is not None else wire.F32
            message = wire.encode(wire.SHAPED, step, 0, shaped, encoding)  # lossless either way
        state = fitness_state(self.fitness)
        state = self._ray.put(state) if state else None  # merged: every chunk's share
        for slot in sorted(self.ready):
            self.updates.append((slot, self.generation[slot], self.actors[slot].update.remote(message, None, state)))
            self.bytes_out += len(message)

    def reload(self) -> None:
        """Every worker loads the driver's state after its queued calls; one started later is spawned from it."""
        if not self.started:
            return
        self._state = (None, None)  # the same step, another state: put it again
        ref = self._state_ref()
        for slot in sorted(self.ready):
            self.updates.append((slot, self.generation[slot], self.actors[slot].load.remote(ref)))

    def _drain_updates(self) -> None:
        """Read the updates that have finished (errors of dead workers surface in evaluate)."""
        if not self.updates:
            return
        refs = [r for _, _, r in self.updates]
        ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=0)
        done = set(ready)
        keep = []
        for slot, gen, ref in self.updates:
            if ref not in done:
                keep.append((slot, gen, ref))
                continue
            try:
                self._ray.get(ref)
            except self._ray.exceptions.RayActorError:
                pass  # a dead worker: its next evaluate fails and is handled there
            except self._ray.exceptions.RayTaskError as e:  # it stays a step behind: its next result is
                log.warning("worker %d failed to apply an update (%s); it will be re-sent the state",  # refused
                            slot, first_line(e.cause if e.cause is not None else e))
        self.updates = keep


class GroupBackend(RayBackend):
    """A group coordinator's driver (``ray_groups.GroupLead``): a ``RayBackend`` whose workers reserve
    nothing (their group's coordinator holds the group's CPUs) and are started on its own node."""

    def _actor_options(self) -> dict:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        node = self._ray.get_runtime_context().get_node_id()
        return {**super()._actor_options(), "num_cpus": 0, "num_gpus": 0,
                "scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=False)}


class SharedGroupBackend(SharedLead, GroupBackend):
    """A group's driver whose workers share their node's weights (``RayConfig.shared_replay``, ``shared_group.py``)."""
