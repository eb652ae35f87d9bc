"""A group whose workers share their node's weights (``RayConfig(group_size=k, shared_replay=True)``).

Each of the k workers maps the group's trainable parameters from one shared file (``shared_weights.py``) and
replays only its part of every update; it evaluates a step once every part has reached it. The group's
coordinator (``ray_groups.GroupLead``) replays nothing: it sends each update on and moves its step, so the
node replays an update once, split k ways, where a group otherwise replays it k + 1 times.

What changes for repairs: a coordinator that replays nothing holds the weights' state only until its first
update (:attr:`SharedLead.stale`). After that, whatever needs the state -- a lost worker's replacement, a worker
that drifted or answered for another step -- is asked of the driver: the coordinator raises :class:`NeedsState`
(a :class:`~.replica.ReplicaDrift`), the driver re-queues the chunk and sends the group its state, and the group
reloads every worker (each writes its own part) and starts the lost ones. The weights stay a local run's, bit for
bit: each part is moved exactly as in a whole update.
"""
from __future__ import annotations

from .recipe import load_fitness_state
from .replica import ReplicaDrift
from .shared_weights import SharedSpec, SharedWeights, create, partition, remove


class NeedsState(ReplicaDrift):
    """A group sharing its weights cannot repair itself from its coordinator's replica (which replays
    nothing): the driver's state is needed. The driver treats it as a drift: it sends the group its state."""


def trainable_parameters(es) -> dict:
    """{name: parameter} of what ``es`` moves, in its order: what a group's workers share."""
    params = dict(es.model.named_parameters())
    return {n: params[n] for n in es.strategy.trainable}


def check_shareable(es) -> None:
    """Refuse a run whose update cannot be split by parameter (its rule couples them)."""
    rule = es.strategy.rule
    if not getattr(rule, "by_parameter", False):
        raise ValueError(f"shared_replay needs an update rule that moves each parameter alone; "
                         f"{type(rule).__name__} does not (a custom optimizer factory, or integer "
                         "adaptive-noise overlays): run without shared_replay")


class SharedWorker:
    """Mixed in before a :class:`~.replica.Replica` class (:func:`shared_worker`): the replica's trainable
    parameters are the group's shared ones; it replays part ``slot`` of each update, loads only that part of
    a state, and evaluates or compares hashes only once every part has reached its step."""

    def __init__(self, recipe, state: dict | None = None, threads: int | None = 1, slot: int = 0,
                 generation: int = 0, *, shared: SharedSpec, **kwargs):
        super().__init__(recipe, None, threads, slot, generation, **kwargs)
        params = trainable_parameters(self.es)
        check_shareable(self.es)
        self.part = partition({n: p.numel() for n, p in params.items()}, shared.parts)[slot]
        self.shared = SharedWeights(shared, params)
        mine = set(self.part)
        self._others = {id(p) for n, p in params.items() if n not in mine}
        if state is not None:
            self.load(state)

    def load(self, state: dict) -> None:
        """The state's optimizer and fitness, and its weights of this worker's part only (the other parts are
        their workers' to write); then this part is marked at the state's step."""
        live = self.model.state_dict(keep_vars=True)
        ours = {k: v for k, v in state["model"].items() if id(live[k]) not in self._others}
        self.model.load_state_dict(ours, strict=False)
        self.es.strategy.load_state_dict(state["strategy"])
        load_fitness_state(self.fitness, state.get("fitness"))
        self.drifted = None
        self.shared.mark(self.slot, self.es.step)

    def replay(self, shaped) -> None:
        self.es.update(shaped, names=self.part)
        self.shared.mark(self.slot, self.es.step)

    def evaluate(self, step: int, lo: int, hi: int):
        why = None if self.drifted else self.shared.wait(self.es.step)
        if why:
            raise ReplicaDrift(why)
        return super().evaluate(step, lo, hi)

    def check_hash(self, expected_hash: str | None) -> str | None:
        if expected_hash is None:
            return None
        why = self.shared.wait(self.es.step)
        if why:
            self.drifted = why
            return None
        return super().check_hash(expected_hash)


def shared_worker(cls: type) -> type:
    """``cls`` (a Replica class) with :class:`SharedWorker` mixed in."""
    return cls if issubclass(cls, SharedWorker) else type(f"Shared{cls.__name__}", (SharedWorker, cls), {})


class SharedLead:
    """Mixed in before a group coordinator's backend (``ray.SharedGroupBackend``): it makes the shared file
    from its replica when it starts, starts its workers on it, sends updates on without replaying them, and
    asks the driver for the state (:class:`NeedsState`) whenever its stale replica would be needed."""

    shares_weights = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        check_shareable(self.es)
        self.replica_cls = shared_worker(self.replica_cls)
        self.stale = False          # True once an update went by unreplayed: the replica is not the state
        self.pending: set[int] = set()   # slots lost while stale: started again once the driver's state is in
        self.spec: SharedSpec | None = None

    def start(self) -> None:
        if self.started:
            return
        self.spec = create(trainable_parameters(self.es), self.config.workers, self.es.step)
        self.replica_kwargs = {**self.replica_kwargs, "shared": self.spec}
        super().start()

    def _state_ref(self):
        if self.stale:
            raise NeedsState(f"a group sharing its weights needs the coordinator's state at step {self.es.step}")
        return super()._state_ref()

    def update(self, shaped) -> None:
        """The update, to the workers only; this replica just moves its step (its weights go stale)."""
        self.send_update(shaped, self.es.step)
        self.es.strategy.set_step(self.es.step + 1)
        self.stale = True

    def forward_hash(self, expected_hash: str) -> None:
        """The driver's hash, for the workers to compare once every part is in."""
        for slot in sorted(self.ready):
            self.updates.append((slot, self.generation[slot], self.actors[slot].check_hash.remote(expected_hash)))

    def _lost(self, slot: int, why: str) -> None:
        if not self.stale:
            return super()._lost(slot, why)
        self._forget(slot)
        self.pending.add(slot)
        raise NeedsState(f"worker {slot} of a group sharing its weights was lost ({why})")

    def reload(self) -> None:
        """The driver's state is in: every worker loads it, and the lost ones start from it."""
        self.stale = False
        super().reload()
        for slot in sorted(self.pending):
            self.restarts += 1
            self._spawn(slot)
        self.pending.clear()

    def close(self) -> None:
        super().close()
        if self.spec is not None:
            remove(self.spec.path)
            self.spec = None
