"""The settings that cut what the driver's calls cost: chunks in flight (``RayConfig(in_flight=2)``: a
worker's next chunk waits behind its running one) and group coordinators (``group_size=k``: the driver
hands chunks to groups of k workers, each group's coordinator to its own workers on its own node). The
weights stay the local run's bit for bit, through deaths and a stateful fitness."""
import glob
import os
import shutil
import tempfile

import pytest
import torch

from hyperscalees.distributed import LocalBackend, RayConfig
from hyperscalees.engine import make_config, run
from hyperscalees.engine.recipe import TaskRecipe
from faulty import faulty
from kept_environ import ray_home

pytestmark = pytest.mark.xdist_group("ray")  # with --dist loadgroup one worker runs every Ray test: one Ray


@pytest.mark.parametrize("settings, message", [
    ({"in_flight": 0}, r"in_flight must be an integer >= 1, got 0"),
    ({"group_size": 0}, r"group_size must be an integer >= 1, got 0"),
    ({"group_size": True}, r"group_size must be an integer >= 1, got True"),
    ({"workers": 3, "group_size": 2}, r"workers \(3\) must be a multiple of group_size \(2\)"),
    ({"workers": 2, "max_workers": 5, "group_size": 2}, r"max_workers \(5\) must be a multiple of group_size \(2\)"),
    ({"workers": 2, "group_size": 2, "gpus_per_worker": 1.0}, r"group_size > 1 needs CPU workers"),
    ({"shared_replay": True}, r"shared_replay needs group_size >= 2 .*got group_size 1"),
    ({"worker_threads": 0}, r"worker_threads must be an integer >= 1, got 0"),
    ({"worker_threads": True}, r"worker_threads must be an integer >= 1, got True"),
    ({"worker_threads": 4, "cpus_per_worker": 2.0}, r"worker_threads \(4\) exceeds cpus_per_worker \(2\).*set "
                                                     r"cpus_per_worker to 4"),
])
def test_group_settings_that_cannot_work_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        RayConfig(**settings)


def test_the_driver_waits_for_and_chunks_over_groups():
    c = RayConfig(workers=8, max_workers=12, group_size=4)
    assert (c.leads, c.slots) == (2, 3)
    assert (RayConfig(workers=3).leads, RayConfig(workers=3).slots) == (3, 3)
    assert RayConfig(cpus_per_worker=0.25).worker_threads == 1      # a fraction of a CPU still runs one thread


@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    from hyperscalees.distributed.ray import start_ray
    home, temp = tempfile.mkdtemp(prefix="hsh", dir="/tmp"), tempfile.mkdtemp(prefix="hsr", dir="/tmp")
    with ray_home(home):
        assert start_ray(RayConfig(workers=2, temp_dir=temp))   # 2 CPUs
        yield ray
        ray.shutdown()
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(temp, ignore_errors=True)


def weights(backend) -> dict:
    return {k: v.clone() for k, v in backend.model.state_dict().items()}


def local_weights(recipe, steps: int, chunk: int) -> dict:
    with LocalBackend(recipe, chunk=chunk) as local:
        for _ in range(steps):
            local.step()
        return weights(local)


def assert_equals_local_run(tmp_path, ray_summary: dict, steps: int, chunk: int) -> None:
    """The xor run saved under tmp_path/ray has the metrics and the weights of a local run (seed 7)."""
    from safetensors.torch import load_file
    local = make_config("xor", es={"seed": 7}, engine={"steps": steps, "chunk": chunk, "out": str(tmp_path / "local")})
    assert run(local, LocalBackend)["metrics"] == ray_summary["metrics"]
    (a,), (b,) = (list((tmp_path / n).glob("model-*.safetensors")) for n in ("ray", "local"))
    got, expected = load_file(str(a)), load_file(str(b))
    assert all(torch.equal(got[k], v) for k, v in expected.items()), "weights differ from the local run"


def test_two_groups_of_two_equal_the_local_run_and_the_driver_calls_each_group(ray_local):
    """4 workers in 2 groups (each reserving its 2 workers' half CPUs): per step the driver hands out 4
    chunks (two per group), not 8; each group splits its chunk over its own 2 workers."""
    from hyperscalees.distributed import RayBackend
    recipe, steps = TaskRecipe(make_config("xor", es={"seed": 3, "population": 32}).to_dict()), 6
    backend = RayBackend(recipe, RayConfig(workers=4, group_size=2, cpus_per_worker=0.5, hash_every=2))
    with backend:
        for _ in range(steps):
            backend.step()
        got, report = weights(backend), backend.report()
        assert len(backend.ready) == 2                          # the driver's actors: the groups
    assert report["assigned"] - report["reissued"] == 4 * steps and report["workers"] == 4, report  # copies aside
    assert report["drift_repairs"] == report["rejected"] == report["failed"] == 0, report
    assert {"evaluate", "wire", "replay"} <= set(report["breakdown_ms"]["workers"])   # the groups' own phases
    expected = local_weights(recipe, steps, chunk=2)            # the groups' sub-chunks: 8 members over 2 workers
    assert all(torch.equal(got[k], v) for k, v in expected.items()), "weights differ from the local run"


def test_a_worker_that_dies_inside_a_group_is_replaced_by_its_group(ray_local, tmp_path, no_plot):
    """Worker 0 of each group dies mid-chunk at step 3: each group re-queues the chunk on its other worker
    and starts a new one; the driver sees no failure, and the weights are the local run's."""
    made = []

    def backend(recipe, chunk):
        from hyperscalees.distributed import RayBackend
        made.append(RayBackend(recipe, RayConfig(workers=4, group_size=2, cpus_per_worker=0.5), chunk=chunk,
                               replica=faulty({0: {"die": 3}})))
        return made[-1]

    cfg = make_config("xor", es={"seed": 7}, engine={"steps": 6, "chunk": 64, "out": str(tmp_path / "ray")})
    ray_summary = run(cfg, backend)
    report = made[0].report()
    assert report["failed"] == report["restarts"] == 0 and len(made[0].step_times) == 6, report
    assert_equals_local_run(tmp_path, ray_summary, steps=6, chunk=16)


def test_rl_observation_statistics_through_groups_equal_the_local_run(ray_local, tmp_path, no_plot):
    """A stateful fitness: each group answers with its sub-chunks' states, merged one by one by the driver
    as the local run merges its chunks' (chunk 2: the groups' sub-chunks of the driver's chunks of 4)."""
    pytest.importorskip("gymnasium")
    from hyperscalees.distributed import RayBackend
    es, options = {"seed": 3, "population": 16}, {"max_steps": 20, "hidden": 8, "layers": 1, "eval_episodes": 2}
    out = {}
    for name, chunk, backend in (
            ("ray", 4, lambda r, chunk: RayBackend(r, RayConfig(workers=2, group_size=2, hash_every=1), chunk=chunk)),
            ("local", 2, LocalBackend)):
        cfg = make_config("rl", es=es, engine={"steps": 4, "chunk": chunk, "out": str(tmp_path / name)},
                          options=options)
        out[name] = run(cfg, backend)
    assert out["ray"]["metrics"] == out["local"]["metrics"]     # env_steps and evaluation returns included
    assert out["ray"]["backend"]["workers"] == 2


def test_two_chunks_in_flight_equal_the_local_run_and_survive_a_death_without_waiting(ray_local, tmp_path, no_plot):
    """in_flight=2: each worker is handed its second chunk before its first is back. Worker 0 dies inside a
    chunk of step 3 with another queued behind it: both go back to the queue at once (not after the
    30 s straggler timeout), a new worker takes its slot, and the weights are the local run's."""
    from hyperscalees.distributed import RayBackend
    made = []

    def backend(recipe, chunk):
        made.append(RayBackend(recipe, RayConfig(workers=2, in_flight=2, straggler_timeout=30.0), chunk=chunk,
                               replica=faulty({0: {"die": 3}})))
        return made[-1]

    cfg = make_config("xor", es={"seed": 7}, engine={"steps": 6, "chunk": 32, "out": str(tmp_path / "ray")})
    ray_summary = run(cfg, backend)
    b = made[0]
    report = b.report()
    assert report["restarts"] == 1 and report["requeued"] >= 2, report   # the running chunk and the one behind it
    assert b.step_times[3] < 20, b.step_times                           # not the straggler timeout
    assert_equals_local_run(tmp_path, ray_summary, steps=6, chunk=32)


def test_groups_that_find_no_room_fail_with_what_each_needs(ray_local):
    """Two groups of two 1-CPU workers on the 2-CPU Ray: each group reserves 2 CPUs, so one cannot start;
    the start gives up after its timeout naming groups and what each needs."""
    from hyperscalees.distributed import RayBackend
    recipe = TaskRecipe(make_config("xor", es={"seed": 3, "population": 32}).to_dict())
    backend = RayBackend(recipe, RayConfig(workers=4, group_size=2, startup_timeout=5.0))
    with pytest.raises(RuntimeError, match=r"2 groups of 2 workers did not start within 5 s: does the cluster have 2 "
                                           r"CPU\(s\) and 0 GPU\(s\) free for each\? [01] up \(Ray sees 1 node"):
        with backend:
            backend.step()


def test_a_groups_straggler_copies_leave_the_weights_exact(ray_local):
    """One group of 2 with a 1 ms straggler timeout: nearly every sub-chunk is copied to the other worker,
    and many copies come back while the group already runs the driver's next chunk of the step (32 a
    step, the same sub-chunk indices). Each must count as a duplicate, never as the sub-chunk of the same
    index of the chunk the group runs then; the weights are the local run's."""
    from hyperscalees.distributed import RayBackend
    recipe, steps = TaskRecipe(make_config("xor", es={"seed": 3, "population": 512}).to_dict()), 4
    backend = RayBackend(recipe, RayConfig(workers=2, group_size=2, straggler_timeout=0.001), chunk=16)
    with backend:
        for _ in range(steps):
            backend.step()
        got = weights(backend)
    expected = local_weights(recipe, steps, chunk=4)   # a group's sub-chunks: 16 members over 2 workers, 2 each
    assert all(torch.equal(got[k], v) for k, v in expected.items()), "weights differ from the local run"


def test_a_worker_of_two_threads_evaluates_and_replays_at_two_and_equals_the_local_run_at_two(ray_local):
    """worker_threads=2 (reserving 2 CPUs): the worker's torch runs at 2 threads, so its evaluation and its
    replay of each update (tiles over 2 threads, the same bits at any count) use both; the weights are those
    of a local run at 2 threads, with a hash check every step."""
    from hyperscalees.distributed import RayBackend
    from hyperscalees.ops.fixed_order import torch_threads
    recipe, steps = TaskRecipe(make_config("digits", es={"seed": 5, "population": 64}).to_dict()), 3
    backend = RayBackend(recipe, RayConfig(workers=1, worker_threads=2, cpus_per_worker=2.0, hash_every=1), chunk=16)
    with backend:
        for _ in range(steps):
            backend.step()
        got = weights(backend)
        (actor,) = backend.actors.values()
        threads = ray_local.get(actor.__ray_call__.remote(lambda replica: torch.get_num_threads()))
        assert backend.report()["drift_repairs"] == 0
    assert threads == 2
    with torch_threads(2):
        expected = local_weights(recipe, steps, chunk=16)
    assert all(torch.equal(got[k], v) for k, v in expected.items()), "weights differ from the local run at 2 threads"


def shared_files() -> set:
    from hyperscalees.distributed.shared_weights import PREFIX, shared_dir
    return set(glob.glob(os.path.join(shared_dir(), PREFIX + "*")))


def test_a_group_sharing_its_weights_replays_a_part_each_and_equals_the_local_run(ray_local):
    """shared_replay: a group's 2 workers map one copy of the trained weights and each replays its part of
    every update; each compares the driver's hash every step once both parts are in. The weights are the
    local run's, the coordinator replayed nothing, and the shared file is gone after the run."""
    from hyperscalees.distributed import RayBackend
    recipe, steps = TaskRecipe(make_config("xor", es={"seed": 3, "population": 32}).to_dict()), 5
    backend = RayBackend(recipe, RayConfig(workers=2, group_size=2, shared_replay=True, hash_every=1), chunk=16)
    with backend:
        for _ in range(steps):
            backend.step()
        got, report = weights(backend), backend.report()
        (lead,) = backend.actors.values()
        parts = ray_local.get(lead.__ray_call__.remote(lambda g: __import__("ray").get(   # its workers' parts
            [g.backend.actors[slot].__ray_call__.remote(lambda w: w.part) for slot in range(2)])))
        path = ray_local.get(lead.__ray_call__.remote(lambda g: g.backend.spec.path))
        assert path in shared_files()
    assert report["drift_repairs"] == report["rejected"] == report["failed"] == 0, report
    assert all(parts) and sorted(n for p in parts for n in p) == sorted(n for n, _ in backend.model.named_parameters())
    assert path not in shared_files()
    expected = local_weights(recipe, steps, chunk=4)            # the group's sub-chunks: 16 members over 2 workers
    assert all(torch.equal(got[k], v) for k, v in expected.items()), "weights differ from the local run"


def test_a_worker_lost_by_a_sharing_group_restarts_from_the_drivers_state(ray_local, tmp_path, no_plot):
    """Worker 0 of a sharing group dies mid-chunk at step 3. Its coordinator, which replays nothing, asks
    the driver for the state (a drift repair); the group reloads, starts a new worker 0 on the same shared
    weights, and the run goes on to the local run's weights."""
    from hyperscalees.distributed import RayBackend
    made = []

    def backend(recipe, chunk):
        made.append(RayBackend(recipe, RayConfig(workers=2, group_size=2, shared_replay=True, hash_every=1),
                               chunk=chunk, replica=faulty({0: {"die": 3}})))
        return made[-1]

    cfg = make_config("xor", es={"seed": 7}, engine={"steps": 6, "chunk": 64, "out": str(tmp_path / "ray")})
    ray_summary = run(cfg, backend)
    report = made[0].report()
    # each request for the state is a drift repair, and its chunk re-queued: once for the loss, and once more
    # if the new worker comes up a step later (its part then needs that step's state too)
    assert 1 <= report["drift_repairs"] == report["failed"] <= 3 and len(made[0].step_times) == 6, report
    assert_equals_local_run(tmp_path, ray_summary, steps=6, chunk=32)


def test_shared_replay_refuses_a_rule_that_may_couple_parameters():
    """A torch optimizer from a factory may couple parameters (a global clip): no part can be replayed alone."""
    import hyperscalees as hs
    from hyperscalees.distributed import RayBackend

    def recipe():
        es = hs.EGGROLL(torch.nn.Linear(3, 2), population=8, optimizer=lambda groups: torch.optim.SGD(groups, lr=0.1))
        return es, lambda model, lo, hi, step: torch.zeros(hi - lo)

    with pytest.raises(ValueError, match="shared_replay needs an update rule that moves each parameter alone"):
        RayBackend(recipe, RayConfig(workers=2, group_size=2, shared_replay=True))
