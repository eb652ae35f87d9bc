"""bench scale: the scaling model's algebra (pure functions) and a --quick run's keys."""
import json

import pytest

from dataclasses import replace

from hyperscalees.benchmarks.scale import (WORKERS, Costs, bottleneck, efficiency, phases, predict, ray_chunk_costs,
                                          step_time, thread_speedup, what_if)
from hyperscalees.benchmarks.scale_threads import serial_fraction
from hyperscalees.cli.main import main


def test_with_no_overheads_and_whole_pairs_per_worker_efficiency_is_one():
    c = Costs(population=1024, member_s=0.01)
    for w in (1, 2, 4, 8, 64, 512):
        assert efficiency(c, w) == pytest.approx(1.0)
        assert bottleneck(c, w) == "evaluation"
    assert step_time(c, 4) == pytest.approx(1024 * 0.01 / 4)


def test_the_phases_sum_to_the_step_and_bad_inputs_are_named():
    c = Costs(1000, 0.002, replay_s=0.05, shape_s=0.001, chunk_s=1e-4, byte_s=1e-9, latency_s=1e-4, bandwidth=1e8,
              update_bytes=400)
    for w in (1, 3, 10, 999):
        assert sum(phases(c, w).values()) == pytest.approx(step_time(c, w))
        assert all(v >= 0 for v in phases(c, w).values())
    with pytest.raises(ValueError, match="workers must be >= 1, got 0"):
        phases(c, 0)
    with pytest.raises(ValueError, match="population must be >= 2"):
        Costs(1, 0.1)


def test_replay_bounds_efficiency_as_workers_grow():
    c = Costs(population=4096, member_s=0.01, replay_s=0.5)
    t1 = step_time(c, 1)
    effs = [efficiency(c, w) for w in WORKERS]
    assert all(a >= b for a, b in zip(effs, effs[1:]))               # never better with more workers
    for w in WORKERS:
        assert efficiency(c, w) <= t1 / (w * c.replay_s) + 1e-12      # every step pays one whole replay
    assert bottleneck(c, 2) == "evaluation" and bottleneck(c, 1000) == "replay"


def test_fewer_pairs_than_workers_idle_them_and_a_costly_coordinator_shows():
    c = Costs(population=64, member_s=0.01)                         # 32 pairs
    assert phases(c, 128)["granularity"] == pytest.approx(0.02 - 64 * 0.01 / 128)
    assert efficiency(c, 128) == pytest.approx(0.25) and bottleneck(c, 128) == "granularity"
    slow = Costs(population=8192, member_s=1e-4, chunk_s=1e-3)
    assert bottleneck(slow, 1000) == "coordinator"
    assert phases(slow, 1000)["coordinator"] >= (2000 + 1000) * 1e-3 / 2   # at least the last round of chunks
    p = predict(slow, (1, 10))
    assert set(p) == {"step_s", "efficiency", "bottleneck"} and p["efficiency"][1] == 1.0


def test_quick_run_prints_efficiency_and_bottleneck_by_workers_and_a_plot(capsys, tmp_path):
    png = tmp_path / "scale.png"
    assert main(["bench", "scale", "--quick", "--json", "--plot", str(png)]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    names = {"smollm2-countdown", "egg-lm", "rl"}
    assert set(out["efficiency_by_workers"]) == names == set(out["bottleneck_by_workers"])
    for name in names:
        eff, neck = out["efficiency_by_workers"][name], out["bottleneck_by_workers"][name]
        assert list(eff) == [str(w) for w in WORKERS] == list(neck)
        assert eff["1"] == 1.0 and all(0 < e <= 1.0 + 1e-9 for e in eff.values())
        assert set(neck.values()) <= {"evaluation", "granularity", "coordinator", "wire", "shape", "replay"}
    assert png.is_file() and png.stat().st_size > 0 and out["plot"] == str(png)
    assert set(out["what_if_smollm2"]) == {"flat, P=16384", "groups of 8, P=1536", "groups of 8, P=16384",
                                           "8-thread workers (one a node), P=16384",
                                           "groups of 8 sharing the replay, P=1536",
                                           "groups of 8 sharing the replay, P=16384",
                                           "groups of 16 sharing the replay, P=16384"}


def test_plot_is_refused_for_other_benchmarks(capsys, tmp_path):
    assert main(["bench", "distributed", "--quick", "--plot", str(tmp_path / "x.png")]) == 2
    assert "--plot applies to population-loss | rank | scale only" in capsys.readouterr().err


def test_rays_cost_per_chunk_splits_into_the_drivers_cpu_and_a_round_trip():
    """One worker's step 0.5 s over the model's 0.2 s across 9 chunks and the update: 30 ms each, of which
    the driver's CPU (2 ms a chunk) is serial at scale and the other 28 ms a round trip."""
    got = ray_chunk_costs(measured_1=0.5, predicted_1=0.2, coordinator_cpu_s=0.02, chunks=9)
    assert got["excess_per_chunk_s"] == pytest.approx(0.03)
    assert got["chunk_s"] == pytest.approx(0.002) and got["latency_s"] == pytest.approx(0.028)
    assert ray_chunk_costs(0.1, 0.2, 0.0, 9) == {"chunk_s": 0.0, "latency_s": 0.0, "excess_per_chunk_s": 0.0}
    # at scale the round trip is paid per round of chunks, the driver's CPU per chunk: only the CPU caps it
    serial = Costs(population=4096, member_s=1e-3, chunk_s=0.03)
    split = Costs(population=4096, member_s=1e-3, chunk_s=0.002, latency_s=0.014)
    assert efficiency(split, 100) > 2 * efficiency(serial, 100)
    assert bottleneck(serial, 100) == "coordinator"


def test_group_coordinators_cut_the_drivers_calls():
    c = Costs(population=8192, member_s=1e-3, replay_s=0.8, chunk_s=1e-3)
    as_is, grouped = phases(c, 1000), phases(replace(c, group_size=8), 1000)
    assert as_is["replay"] == grouped["replay"] == 0.8                              # every worker still replays
    assert grouped["coordinator"] < as_is["coordinator"] / 4                        # 125 groups, not 3,000 calls
    eff = what_if(c, 8, workers=(1, 1000))
    assert eff[1000] > 2 * efficiency(c, 1000)
    # a larger population: the replay grows with it, efficiency is against one worker at that population
    assert what_if(c, 1, population=16384, workers=(1,))[1] == pytest.approx(1.0)
    bigger = what_if(c, 1, population=65536, workers=(1000,))[1000]
    assert bigger > efficiency(c, 1000)
    with pytest.raises(ValueError, match="group_size must be >= 1, got 0"):
        phases(replace(c, group_size=0), 2)


def test_workers_of_several_threads_replay_once_a_node_and_pay_their_threads_losses():
    """1,000 cores as 125 workers of 8 threads: the replay is paid once at 8 threads' speed, the evaluation
    at the threads' speed-up; perfect threads (serial 0) keep the evaluation where 1,000 one-thread workers had it."""
    c = Costs(population=8192, member_s=1e-3, replay_s=0.8, chunk_s=1e-3)
    perfect = phases(replace(c, threads=8), 1000)
    assert perfect["replay"] == pytest.approx(0.1)
    assert perfect["evaluation"] == pytest.approx(phases(c, 1000)["evaluation"])
    assert perfect["coordinator"] < phases(c, 1000)["coordinator"]                  # 125 workers' calls, not 1,000
    lossy = phases(replace(c, threads=8, eval_serial=0.2, replay_serial=0.1), 1000)
    assert lossy["evaluation"] == pytest.approx(8192 * 1e-3 / 125 / thread_speedup(8, 0.2))
    assert lossy["replay"] == pytest.approx(0.8 / thread_speedup(8, 0.1))
    assert phases(replace(c, threads=8), 2)["replay"] == pytest.approx(0.4)         # 2 cores: a worker of 2 threads
    assert what_if(c, 1, workers=(1000,), threads=8)[1000] > 2 * efficiency(c, 1000)
    assert thread_speedup(8, 0.0) == 8 and thread_speedup(8, 1.0) == 1
    with pytest.raises(ValueError, match=r"threads must be >= 1 and the serial fractions in \[0, 1\], got 0"):
        Costs(64, 1e-3, threads=0)


def test_a_group_sharing_its_weights_divides_the_replay_by_its_size():
    """Groups of 8 sharing the replay (--shared-replay): each worker replays an eighth, the evaluation and the
    coordinator are the groups' as they were; fewer workers than a group: the replay splits over those."""
    c = Costs(population=8192, member_s=1e-3, replay_s=0.8, chunk_s=1e-3, group_size=8)
    shared = replace(c, shared_replay=True)
    assert phases(shared, 1000)["replay"] == pytest.approx(0.1) and phases(c, 1000)["replay"] == 0.8
    assert phases(shared, 2)["replay"] == pytest.approx(0.4)
    assert {k: v for k, v in phases(shared, 1000).items() if k != "replay"} == \
        {k: v for k, v in phases(c, 1000).items() if k != "replay"}
    assert what_if(c, 8, workers=(1000,), shared=True)[1000] > what_if(c, 8, workers=(1000,))[1000]


def test_a_serial_fraction_read_from_one_and_two_threads():
    assert serial_fraction(1.0, 0.5, 2) == 0.0          # twice as fast: nothing serial
    assert serial_fraction(1.0, 1.0, 2) == 1.0          # no faster: all serial
    assert serial_fraction(1.0, 0.6, 2) == pytest.approx(0.2)
    assert thread_speedup(2, serial_fraction(1.0, 0.6, 2)) == pytest.approx(1 / 0.6)
    assert serial_fraction(1.0, 1.3, 2) == 1.0 and serial_fraction(1.0, 0.4, 2) == 0.0   # noise clipped
    with pytest.raises(ValueError, match="needs threads >= 2"):
        serial_fraction(1.0, 0.5, 1)
