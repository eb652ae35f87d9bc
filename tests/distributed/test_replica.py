"""The worker's side without Ray: a Replica's chunk results and replayed updates reproduce the
in-process run bit for bit; ternary results shape exactly like the raw ones; drift is refused."""
import pytest
import torch

from hyperscalees.cli.main import main
from hyperscalees.distributed import LocalBackend, RayBackend, RayConfig, make_backend, wire
from hyperscalees.distributed.replica import Replica, ReplicaDrift, state_hash
from hyperscalees.engine import make_config
from hyperscalees.engine.loop import build


def coordinator_step(es, replica, chunk, hash_check=True, task=None):
    """One step driven by hand, as RayBackend does it: chunks through the wire, the task's chunk logs
    merged in member order, the update replayed on the replica with the merged task state."""
    if task is not None:
        task.begin_step(es.model, es.step)
    parts = []
    for lo in range(0, es.population, chunk):
        hi = min(es.population, lo + chunk)
        data, log = replica.evaluate(es.step, lo, hi)
        parts.append(wire.decode(data, wire.RESULT, es.step, lo, hi - lo))
        if log is not None:
            task.apply_chunk_log(log)
    fitness = torch.cat([m.values for m in parts])
    shaped = es.shape(fitness)
    msg = wire.encode(wire.SHAPED, es.step, 0, shaped,
                      wire.TERNARY if wire.ternary_scale(shaped) is not None else wire.F32)
    es.update(shaped)
    expected = state_hash(es.model) if hash_check else None
    state = task.state_dict() if task is not None else None
    return parts, replica.update(msg, expected, state or None), expected


@pytest.mark.parametrize("shaping", ["centered_rank", "ternary"])
def test_replica_replays_the_local_run_bit_for_bit(shaping):
    cfg = make_config("xor", es={"seed": 5, "population": 64, "shaping": shaping}, engine={"steps": 3})
    _, _, es = build(cfg)
    task, _, ref = build(cfg)
    replica = Replica(cfg.to_dict(), threads=None)
    for _ in range(3):
        local = LocalBackend().evaluate(ref, lambda m, lo, hi, s=ref.step: task.fitness(m, lo, hi, s), 16)
        ref.update(ref.shape(local))
        parts, theirs, mine = coordinator_step(es, replica, 16)
        assert theirs == mine == state_hash(ref.model)
        expect = wire.TERNARY if shaping == "ternary" else wire.F32
        assert {m.encoding for m in parts} == {expect}
    if shaping == "ternary":  # 1.6 bits per member on the wire, plus the header and scale
        assert len(replica.evaluate(es.step, 0, 64)[0]) == wire.HEADER + 4 + 13


def test_rl_observation_statistics_merged_from_chunk_logs_equal_the_local_run():
    """RL's fitness accumulates observation sums: the coordinator replays each chunk's logged
    increments in member order, so its statistics, and then the weights, match bit for bit."""
    pytest.importorskip("gymnasium")
    cfg = make_config("rl", es={"seed": 3, "population": 16}, engine={"steps": 3},
                      options={"max_steps": 20, "hidden": 8, "layers": 1, "eval_episodes": 2})
    task, model, es = build(cfg)
    ref_task, ref_model, ref = build(cfg)
    replica = Replica(cfg.to_dict(), threads=None)
    for _ in range(3):
        f = LocalBackend().evaluate(ref, lambda m, lo, hi, s=ref.step: ref_task.fitness(m, lo, hi, s), 4)
        ref.update(ref.shape(f))
        _, theirs, mine = coordinator_step(es, replica, 4, task=task)
        assert theirs == mine == state_hash(ref_model)
    for a, b in ((task.state_dict(), ref_task.state_dict()), (model.state_dict(), ref_model.state_dict())):
        flat_a, flat_b = torch.utils._pytree.tree_flatten(a)[0], torch.utils._pytree.tree_flatten(b)[0]
        assert len(flat_a) == len(flat_b) and all(
            torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y for x, y in zip(flat_a, flat_b))
    assert task.env_steps == ref_task.env_steps > 0 and float(task.stats.count) > 0


def test_a_drifted_replica_refuses_work_until_it_gets_the_state():
    cfg = make_config("xor", es={"seed": 5, "population": 32}, engine={"steps": 3})
    task, _, es = build(cfg)
    replica = Replica(cfg.to_dict(), threads=None, faults={"drift": 0})
    _, theirs, mine = coordinator_step(es, replica, 16)
    assert theirs != mine
    with pytest.raises(ReplicaDrift, match="parameters after step 1 hash to"):
        replica.evaluate(1, 0, 16)
    sd = es.state_dict()
    assert replica.load({"model": sd["model"], "strategy": sd["strategy"], "task": task.state_dict()}) == mine
    _, theirs, mine = coordinator_step(es, replica, 16)
    assert theirs == mine


def test_a_replica_at_another_step_answers_with_its_own_step():
    cfg = make_config("xor", es={"seed": 5, "population": 32}, engine={"steps": 3})
    replica = Replica(cfg.to_dict(), threads=None)
    with pytest.raises(wire.WireError, match="step 0, expected step 4"):
        wire.decode(replica.evaluate(4, 0, 16)[0], wire.RESULT, 4, 0, 16)


def test_backend_choice_and_its_flags_are_checked_before_anything_starts(capsys):
    assert main(["train", "xor", "--workers", "3", "--steps", "1"]) == 2
    assert "--workers needs --backend ray" in capsys.readouterr().err
    assert main(["train", "xor", "--backend", "ray", "--workers", "0", "--steps", "1"]) == 2
    assert "workers must be >= 1, got 0" in capsys.readouterr().err
    with pytest.raises(ValueError, match="straggler_timeout must be > 0"):
        RayConfig(straggler_timeout=-1.0)
    with pytest.raises(ValueError, match="unknown backend 'mpi'"):
        make_backend("mpi")
    assert isinstance(make_backend("ray", {"workers": 3}), RayBackend)


def test_ray_backend_refuses_a_task_whose_fitness_keeps_state_it_cannot_merge():
    class Stateful:
        name = "counting"

        def state_dict(self):
            return {"stats": torch.zeros(2)}

        def merges_chunks(self):
            return False

    with pytest.raises(ValueError, match="cannot run task 'counting': its fitness accumulates state"):
        RayBackend().start(None, Stateful(), None)


def test_backend_flags_reach_the_ray_config_and_chunk_size_is_chunk():
    from hyperscalees.cli.main import build_parser
    from hyperscalees.cli.train import backend_from_args, config_from_args
    args = build_parser().parse_args(["train", "xor", "--backend", "ray", "--workers", "3", "--address", "auto",
                                      "--gpus-per-worker", "0.5", "--straggler-timeout", "2.5", "--chunk-size", "64"])
    backend = backend_from_args(args)
    assert backend.config == RayConfig(workers=3, address="auto", gpus_per_worker=0.5, straggler_timeout=2.5)
    assert config_from_args(args).engine.chunk == 64
    assert config_from_args(build_parser().parse_args(["train", "xor", "--chunk", "32"])).engine.chunk == 32
