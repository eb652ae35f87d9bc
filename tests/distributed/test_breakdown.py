"""The step breakdown: every backend times evaluate / shape / update; a replica times its own
evaluation, wire and update replay; RayBackend adds waiting, wire and replay on the driver, reads
the workers' phases at close, and stays bit-identical to the in-process run whether the driver
replays the update before or while the workers do."""
import shutil
import tempfile

import pytest
import torch

from hyperscalees.distributed import LocalBackend, wire
from kept_environ import ray_home
from hyperscalees.distributed.base import PhaseTimes
from hyperscalees.distributed.replica import Replica
from hyperscalees.engine import make_config
from hyperscalees.engine.recipe import TaskRecipe

pytestmark = pytest.mark.xdist_group("ray")  # with --dist loadgroup one worker runs every Ray test: one Ray


def recipe(population: int = 16):
    return TaskRecipe(make_config("xor", es={"seed": 3, "population": population}).to_dict())


def test_phase_times_sum_per_name_and_average_per_step():
    t = PhaseTimes()
    assert t.per_step_ms() == {}
    t.add("a", 0.010)
    t.add("a", 0.030)
    with t("b"):
        pass
    t.steps = 2
    ms = t.per_step_ms()
    assert ms["a"] == pytest.approx(20.0) and 0 <= ms["b"] < 5
    t.reset()
    assert t.per_step_ms() == {} and t.seconds == {}


def test_the_local_backend_times_evaluate_shape_and_update_every_step():
    backend = LocalBackend(recipe())
    assert backend.breakdown() == {"driver": {}}
    for _ in range(3):
        backend.step()
    driver = backend.breakdown()["driver"]
    assert set(driver) == {"evaluate", "shape", "update"} and backend.phases.steps == 3
    assert all(v > 0 for v in driver.values())
    assert backend.report() == {}                      # the engine's summary of a local run is unchanged


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_driver_threads_must_be_a_positive_integer_or_none(bad):
    from hyperscalees.distributed.ray_session import RayConfig
    with pytest.raises(ValueError, match=rf"driver_threads must be an integer >= 1 or None, got {bad!r}"):
        RayConfig(driver_threads=bad)
    assert RayConfig(driver_threads=None).driver_threads is None and RayConfig().driver_threads == 1


def test_a_replica_times_evaluation_wire_and_replay():
    r = Replica(recipe(), threads=None)
    assert r.phase_times() == {"steps": 0}
    data, _ = r.evaluate(0, 0, 8)
    shaped = wire.encode(wire.SHAPED, 0, 0, torch.linspace(-1, 1, 16))
    r.update(shaped, expected_hash="0" * 64)           # a wrong hash: drifted, and the hash was timed
    got = r.phase_times()
    assert got["steps"] == 1 and {"evaluate", "wire", "replay", "hash"} <= set(got)
    assert all(got[k] > 0 for k in ("evaluate", "wire", "replay", "hash")) and r.drifted


@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    from hyperscalees.distributed.ray import RayConfig, start_ray
    home, temp = tempfile.mkdtemp(prefix="hsh", dir="/tmp"), tempfile.mkdtemp(prefix="hsr", dir="/tmp")
    with ray_home(home):
        assert start_ray(RayConfig(workers=2, temp_dir=temp))
        yield ray
        ray.shutdown()
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(temp, ignore_errors=True)


def params(backend) -> dict:
    return {k: v.clone() for k, v in backend.model.state_dict().items()}


def test_ray_breaks_its_step_down_and_overlapping_the_replay_changes_no_weight(ray_local):
    from hyperscalees.distributed import RayBackend
    r, steps = recipe(32), 6
    local = LocalBackend(r, chunk=8)
    for _ in range(steps):
        local.step()
    outer = torch.get_num_threads()
    for overlap, driver_threads in ((True, 1), (False, None)):
        backend = RayBackend(r, workers=2, chunk=8, hash_every=2, driver_threads=driver_threads)
        backend.overlap_replay = overlap
        replay, seen = backend.es.update, []
        backend.es.update = lambda shaped: (seen.append(torch.get_num_threads()), replay(shaped))[1]
        torch.set_num_threads(2)                          # the driver's replay runs at driver_threads all the same
        try:
            for i in range(steps):
                if i == 3:
                    backend.reset_breakdown()            # the workers forget their first 3 steps too
                backend.step()
                assert torch.get_num_threads() == 2      # and the process's count is given back
            assert [g["steps"] for g in backend._read_worker_phases()] == [steps - 3] * 2
        finally:
            torch.set_num_threads(outer)
            backend.close()
        assert seen == [driver_threads or 2] * steps
        got = params(backend)
        assert all(torch.equal(got[k], v) for k, v in params(local).items()), f"overlap={overlap}: weights differ"
        report = backend.report()
        assert report["drift_repairs"] == 0 and report["rejected"] == 0   # every hash check passed
        b = report["breakdown_ms"]
        assert {"evaluate", "shape", "update", "wait", "wire", "replay", "hash", "coordinator_cpu"} <= set(b["driver"])
        assert 0 < b["driver"]["coordinator_cpu"]   # the driver's CPU while it hands out and collects chunks
        assert {"evaluate", "wire", "replay", "hash"} <= set(b["workers"])
        assert b["workers"]["evaluate"] > 0 and b["workers"]["replay"] > 0
