"""An update split by parameter moves each parameter exactly as the whole update does.

The workers of one node that share their weights (``distributed/shared_group.py``) each replay one part of
every update and see the others' parts through the shared memory. Emulated here in one process: k replicas,
each moving its part, their parameters copied across after each step (what sharing does), must end on the
weights of one replica moving everything, bit for bit, for every torch optimizer and through fp32 masters.
"""
import pytest
import torch
from torch import nn

import hyperscalees as hs
from hyperscalees.distributed.shared_weights import partition

POP = 64


def make(optimizer="adam", dtype=torch.float32, **kw):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 24), nn.Tanh(), nn.LayerNorm(24), nn.Linear(24, 6)).to(dtype)
    return hs.EGGROLL(model, population=POP, sigma=0.05, rank=2, lr=0.03, optimizer=optimizer, seed=4, **kw)


X = torch.randn(3, 12, generator=torch.Generator().manual_seed(1))


def fitness(m, lo, hi, step):
    x = X.to(next(m.parameters()).dtype)
    return -m(x.repeat(hi - lo, 1)).float().pow(2).view(hi - lo, -1).mean(dim=1) + 0.01 * step


def flat(es):
    return torch.cat([p.detach().float().flatten() for p in es.model.parameters()])


def run_in_parts(k: int, steps: int = 3, **kw):
    """k replicas, replica j moving part j; after each step every replica takes each part from its owner."""
    replicas = [make(**kw) for _ in range(k)]
    sizes = {n: p.numel() for n, p in replicas[0].model.named_parameters()}
    parts = partition(sizes, k)
    for _ in range(steps):
        shaped = replicas[0].shape(hs.evaluate(replicas[0], fitness, 16))
        for es, part in zip(replicas, parts):
            es.update(shaped, names=part)
        with torch.no_grad():
            for j, part in enumerate(parts):
                owner = dict(replicas[j].model.named_parameters())
                for es in replicas:
                    mine = dict(es.model.named_parameters())
                    for n in part:
                        mine[n].copy_(owner[n])
    return replicas


@pytest.mark.parametrize("optimizer, dtype", [("sgd", torch.float32), ("adam", torch.float32),
                                              ("muon", torch.float32), ("adam", torch.bfloat16)])
def test_parts_replayed_apart_equal_the_whole_update(optimizer, dtype):
    whole = make(optimizer, dtype)
    for _ in range(3):
        whole.tell(hs.evaluate(whole, fitness, 16))
    got = run_in_parts(3, optimizer=optimizer, dtype=dtype)
    assert not torch.equal(flat(whole), flat(make(optimizer, dtype)))   # the weights moved
    for es in got:
        assert torch.equal(flat(es), flat(whole))


def test_a_part_moves_its_parameters_and_no_other():
    es, before = make(), make()
    shaped = es.shape(hs.evaluate(es, fitness, 16))
    part = ["0.weight", "3.bias"]
    es.update(shaped, names=part)
    now, then = dict(es.model.named_parameters()), dict(before.model.named_parameters())
    assert {n for n in now if not torch.equal(now[n], then[n])} == set(part)
    assert es.step == 1


def test_an_empty_part_only_moves_the_step():
    es = make()
    es.update(es.shape(hs.evaluate(es, fitness, 16)), names=[])
    assert es.step == 1 and torch.equal(flat(es), flat(make()))


def test_a_rule_that_may_couple_parameters_refuses_a_part():
    es = make(optimizer=lambda groups: torch.optim.SGD(groups))
    shaped = es.shape(hs.evaluate(es, fitness, 16))
    with pytest.raises(ValueError, match="cannot move a part of the parameters alone"):
        es.update(shaped, names=["0.weight"])
    with pytest.raises(ValueError, match=r"names must be trainable parameters; not: \['nope'\]"):
        make().update(shaped, names=["nope"])


def test_partition_balances_whole_parameters_the_same_everywhere():
    sizes = {"a": 10, "b": 40, "c": 25, "d": 25, "e": 5}
    parts = partition(sizes, 2)
    assert parts == [["a", "b", "e"], ["c", "d"]] == partition(dict(sizes), 2)  # 40, 25, 25, 10, then 5 on a tie
    assert sorted(n for p in parts for n in p) == sorted(sizes)
    assert [sum(sizes[n] for n in p) for p in parts] == [55, 50]
    assert partition({"a": 3}, 3) == [["a"], [], []]
    with pytest.raises(ValueError, match="parts must be >= 1, got 0"):
        partition(sizes, 0)
