"""The worker's side without Ray: a Replica built from a recipe reproduces the in-process run bit
for bit through the wire; a stateful fitness's chunks merge exactly; drift is refused."""
import pytest
import torch

from hyperscalees.cli.main import main
from hyperscalees.distributed import LocalBackend, RayBackend, RayConfig, backend_factory, wire
from hyperscalees.distributed.recipe import check_distributable, fitness_state
from hyperscalees.distributed.replica import Replica, ReplicaDrift, coordinator_state, state_hash
from hyperscalees.engine import make_config
from hyperscalees.engine.recipe import TaskRecipe

from faulty import faulty


def coordinator_step(es, fitness, replica, chunk, hash_check=True):
    """One step driven by hand, as RayBackend does it: chunks through the wire, a stateful fitness's
    chunk states merged in member order, the update replayed on the replica with the merged state."""
    parts, added = [], []
    for lo in range(0, es.population, chunk):
        hi = min(es.population, lo + chunk)
        data, state = replica.evaluate(es.step, lo, hi)
        parts.append(wire.decode(data, wire.RESULT, es.step, lo, hi - lo))
        added.append(state)
    if any(a is not None for a in added):
        fitness.merge(es.model, es.step, added)
    shaped = es.shape(torch.cat([m.values for m in parts]))
    msg = wire.encode(wire.SHAPED, es.step, 0, shaped,
                      wire.TERNARY if wire.ternary_scale(shaped) is not None else wire.F32)
    es.update(shaped)
    expected = state_hash(es.model) if hash_check else None
    return parts, replica.update(msg, expected, fitness_state(fitness) or None), expected


@pytest.mark.parametrize("shaping", ["centered_rank", "ternary"])
def test_replica_replays_the_local_run_bit_for_bit(shaping):
    recipe = TaskRecipe(make_config("xor", es={"seed": 5, "population": 64, "shaping": shaping}).to_dict())
    es, fitness = recipe()
    local = LocalBackend(recipe, chunk=16)
    replica = Replica(recipe, threads=None)
    for _ in range(3):
        local.step()
        parts, theirs, mine = coordinator_step(es, fitness, replica, 16)
        assert theirs == mine == state_hash(local.model)
        expect = wire.TERNARY if shaping == "ternary" else wire.F32
        assert {m.encoding for m in parts} == {expect}
    if shaping == "ternary":  # 1.6 bits per member on the wire, plus the header and scale
        assert len(replica.evaluate(es.step, 0, 64)[0]) == wire.HEADER + 4 + 13


def test_rl_observation_statistics_merged_from_chunk_states_equal_the_local_run():
    """RL's fitness accumulates observation sums: the coordinator replays each chunk's recorded
    increments in member order, so its statistics, and then the weights, match bit for bit."""
    pytest.importorskip("gymnasium")
    recipe = TaskRecipe(make_config("rl", es={"seed": 3, "population": 16}, options={
        "max_steps": 20, "hidden": 8, "layers": 1, "eval_episodes": 2}).to_dict())
    es, fitness = recipe()
    local = LocalBackend(recipe, chunk=4)
    replica = Replica(recipe, threads=None)
    for _ in range(3):
        local.step()
        _, theirs, mine = coordinator_step(es, fitness, replica, 4)
        assert theirs == mine == state_hash(local.model)
    for a, b in ((fitness.state_dict(), local.fitness.state_dict()), (es.model.state_dict(), local.model.state_dict())):
        flat_a, flat_b = torch.utils._pytree.tree_flatten(a)[0], torch.utils._pytree.tree_flatten(b)[0]
        assert len(flat_a) == len(flat_b) and all(
            torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y for x, y in zip(flat_a, flat_b))
    assert fitness.task.env_steps == local.fitness.task.env_steps > 0 and float(fitness.task.stats.count) > 0


def test_a_drifted_replica_refuses_work_until_it_gets_the_state():
    recipe = TaskRecipe(make_config("xor", es={"seed": 5, "population": 32}).to_dict())
    es, fitness = recipe()
    replica = faulty({0: {"drift": 0}})(recipe, threads=None)
    _, theirs, mine = coordinator_step(es, fitness, replica, 16)
    assert theirs != mine
    with pytest.raises(ReplicaDrift, match="parameters after step 1 hash to"):
        replica.evaluate(1, 0, 16)
    assert replica.load(coordinator_state(es, fitness)) == mine
    _, theirs, mine = coordinator_step(es, fitness, replica, 16)
    assert theirs == mine


def test_a_replica_at_another_step_answers_with_its_own_step():
    replica = Replica(TaskRecipe(make_config("xor", es={"seed": 5, "population": 32}).to_dict()), threads=None)
    with pytest.raises(wire.WireError, match="step 0, expected step 4"):
        wire.decode(replica.evaluate(4, 0, 16)[0], wire.RESULT, 4, 0, 16)


def test_backend_choice_and_its_flags_are_checked_before_anything_starts(capsys):
    assert main(["train", "xor", "--workers", "3", "--steps", "1"]) == 2
    assert "--workers needs --backend ray" in capsys.readouterr().err
    assert main(["train", "xor", "--backend", "ray", "--workers", "0", "--steps", "1"]) == 2
    assert "workers must be >= 1, got 0" in capsys.readouterr().err
    with pytest.raises(ValueError, match="straggler_timeout must be > 0"):
        RayConfig(straggler_timeout=-1.0)


def test_a_fitness_that_keeps_state_it_cannot_merge_is_refused(tmp_path):
    class Counting:
        def __call__(self, model, lo, hi, step):
            return torch.zeros(hi - lo)

        def state_dict(self):
            return {"seen": torch.zeros(2)}

    with pytest.raises(ValueError, match=r"accumulates state \(seen\) but cannot merge.*lacks chunk_state, merge"):
        check_distributable(Counting())
    data = tmp_path / "text.txt"
    data.write_bytes(b"the quick brown fox jumps over the lazy dog. " * 400)
    lm = TaskRecipe(make_config("lm", options={"data": str(data)}).to_dict())
    with pytest.raises(ValueError, match="cannot merge the workers' chunks"):
        RayBackend(lm, workers=1)  # refused before Ray starts


def test_backend_flags_reach_the_ray_config_and_chunk_size_is_chunk():
    from hyperscalees.cli.main import build_parser
    from hyperscalees.cli.train import backend_from_args, config_from_args
    args = build_parser().parse_args(["train", "xor", "--backend", "ray", "--workers", "3", "--address", "auto",
                                      "--gpus-per-worker", "0.5", "--straggler-timeout", "2.5", "--chunk-size", "64"])
    factory = backend_from_args(args)
    assert factory.func is RayBackend
    assert factory.keywords["config"] == RayConfig(workers=3, address="auto", gpus_per_worker=0.5, straggler_timeout=2.5)
    assert config_from_args(args).engine.chunk == 64
    assert config_from_args(build_parser().parse_args(["train", "xor", "--chunk", "32"])).engine.chunk == 32
    assert backend_factory("local") is LocalBackend
