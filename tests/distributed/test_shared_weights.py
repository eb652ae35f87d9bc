"""The workers of a group that share their node's weights, without Ray: two replicas in one process map one
shared file, each replays its part of every update, and together they are the local run bit for bit; a worker
waits for the other parts before it evaluates, loads only its own part, and the file goes away."""
import os

import pytest
import torch

from hyperscalees.distributed import LocalBackend, wire
from hyperscalees.distributed.recipe import fitness_state
from hyperscalees.distributed.replica import Replica, ReplicaDrift, coordinator_state, state_hash
from hyperscalees.distributed.shared_group import NeedsState, shared_worker, trainable_parameters
from hyperscalees.distributed.shared_weights import PREFIX, create, remove, shared_dir
from hyperscalees.engine import make_config
from hyperscalees.engine.recipe import TaskRecipe


@pytest.fixture
def group():
    """(coordinator es, its fitness, two workers sharing one file, the file's spec)."""
    recipe = TaskRecipe(make_config("xor", es={"seed": 5, "population": 32}).to_dict())
    es, fitness = recipe()
    spec = create(trainable_parameters(es), parts=2, step=0, wait_s=0.2)
    cls = shared_worker(Replica)
    workers = [cls(recipe, coordinator_state(es, fitness), None, slot, shared=spec) for slot in range(2)]
    yield recipe, es, fitness, workers, spec
    for w in workers:
        w.shared.close()
    remove(spec.path)


def step(es, fitness, workers):
    """One step as a group runs it: each worker evaluates half, the coordinator shapes, each replays its part."""
    half = es.population // 2
    values = [wire.decode(w.evaluate(es.step, lo, lo + half)[0], wire.RESULT, es.step, lo, half).values
              for w, lo in zip(workers, (0, half))]
    shaped = es.shape(torch.cat(values))
    msg = wire.encode(wire.SHAPED, es.step, 0, shaped, wire.F32)
    es.update(shaped)
    for w in workers:
        w.update(msg, None, fitness_state(fitness) or None)
    return state_hash(es.model)


def test_two_workers_each_replaying_a_part_are_the_local_run(group):
    recipe, es, fitness, workers, _ = group
    local = LocalBackend(recipe, chunk=16)
    assert all(w.part for w in workers) and not set(workers[0].part) & set(workers[1].part)
    for _ in range(4):
        local.step()
        expected = step(es, fitness, workers)
        assert [w.check_hash(expected) for w in workers] == [expected, expected] == [state_hash(local.model)] * 2
    a, b = (next(iter(dict(w.model.named_parameters()).values())) for w in workers)
    with torch.no_grad():
        a.view(-1)[0] += 1.0                      # one copy, not two: a write through one is seen by the other
    assert torch.equal(a, b)


def test_a_worker_waits_for_the_other_parts_and_then_calls_itself_drifted(group):
    _, es, fitness, workers, _ = group
    half = es.population // 2
    values = torch.cat([wire.decode(w.evaluate(0, lo, lo + half)[0], wire.RESULT, 0, lo, half).values
                        for w, lo in zip(workers, (0, half))])
    shaped = es.shape(values)
    workers[0].update(wire.encode(wire.SHAPED, 0, 0, shaped, wire.F32), None, None)  # worker 1 never replays
    with pytest.raises(ReplicaDrift, match=r"parts \[1\] of the shared weights stayed at steps \[0\] for 0.2 s"):
        workers[0].evaluate(1, 0, half)
    assert workers[0].check_hash("0" * 64) is None and "parts [1]" in workers[0].drifted


def test_loading_a_state_writes_only_the_workers_own_part(group):
    _, es, fitness, workers, _ = group
    state = coordinator_state(es, fitness)
    moved = {k: v + 1 if v.is_floating_point() else v for k, v in state["model"].items()}
    before = {n: p.detach().clone() for n, p in workers[0].model.named_parameters()}
    workers[0].load({**state, "model": moved})
    now = dict(workers[1].model.named_parameters())                 # what the other worker sees
    changed = {n for n in now if not torch.equal(now[n], before[n])}
    assert changed == set(workers[0].part)
    assert workers[0].shared.steps() == [0, 0]


def test_the_file_goes_away_and_orphans_are_removed(group):
    *_, spec = group
    assert os.path.exists(spec.path)
    orphan = os.path.join(shared_dir(), f"{PREFIX}999999999-deadbeef")   # no such process
    open(orphan, "wb").close()
    es, _ = TaskRecipe(make_config("xor", es={"seed": 1, "population": 8}).to_dict())()
    other = create(trainable_parameters(es), parts=2, step=3)
    assert not os.path.exists(orphan) and os.path.exists(spec.path)  # ours is alive: kept
    remove(other.path)
    assert not os.path.exists(other.path)


def test_a_file_of_another_model_is_refused(group):
    *_, spec = group
    with pytest.raises(ValueError, match="not this model's file"):
        shared_worker(Replica)(TaskRecipe(make_config("digits", es={"seed": 1, "population": 8}).to_dict()),
                               None, None, 0, shared=spec)
    assert issubclass(NeedsState, ReplicaDrift)
