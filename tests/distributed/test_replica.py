"""The worker's side without Ray: a Replica's chunk results and replayed updates reproduce the
in-process run bit for bit; ternary results shape exactly like the raw ones; drift is refused."""
import pytest
import torch

from hyperscalees.cli.main import main
from hyperscalees.distributed import LocalBackend, RayBackend, RayConfig, make_backend, wire
from hyperscalees.distributed.replica import Replica, ReplicaDrift, state_hash
from hyperscalees.engine import make_config
from hyperscalees.engine.loop import build


def coordinator_step(es, replica, chunk, hash_check=True):
    """One step driven by hand: chunks through the wire, update replayed on the replica."""
    parts = []
    for lo in range(0, es.population, chunk):
        hi = min(es.population, lo + chunk)
        parts.append(wire.decode(replica.evaluate(es.step, lo, hi), wire.RESULT, es.step, lo, hi - lo))
    fitness = torch.cat([m.values for m in parts])
    shaped = es.shape(fitness)
    msg = wire.encode(wire.SHAPED, es.step, 0, shaped,
                      wire.TERNARY if wire.ternary_scale(shaped) is not None else wire.F32)
    es.update(shaped)
    expected = state_hash(es.model) if hash_check else None
    return parts, replica.update(msg, expected), expected


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
        assert len(replica.evaluate(es.step, 0, 64)) == wire.HEADER + 4 + 13


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
        wire.decode(replica.evaluate(4, 0, 16), wire.RESULT, 4, 0, 16)


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


def test_ray_backend_refuses_a_task_whose_fitness_keeps_state():
    class Stateful:
        name = "counting"

        def state_dict(self):
            return {"stats": torch.zeros(2)}

    with pytest.raises(ValueError, match="cannot run task 'counting' yet: its fitness accumulates state"):
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
