"""A matrix layer's GEMM plan, cut to the block's members once per perturbation block, against
the per-call path it replaces (different arithmetic order: allclose), and against itself (exact)."""
import pytest
import torch
from torch import nn

import hyperscalees as hs
from hyperscalees.nn.perturb import perturbation


@pytest.mark.parametrize("bias", [True, False])
def test_a_plan_kept_for_the_block_gives_the_per_call_result(bias):
    """First call: the layer builds its term per call; second: the step's plan is made; later calls
    reuse the block's cut of it. All agree, and a sub-block reads the same members' rows."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 24, bias=bias), nn.Tanh(), nn.Linear(24, 8, bias=bias))
    es = hs.EGGROLL(model, population=8, sigma=0.1, rank=1, seed=1)
    x = torch.randn(8 * 3, 12)
    with perturbation(model, es.store()) as ctx:
        outs = [model(x) for _ in range(4)]
        assert len(ctx.plans) == 2  # one per layer, cut once for the block
    for out in outs[1:]:
        torch.testing.assert_close(out, outs[0], rtol=1e-6, atol=1e-6)
    assert torch.equal(outs[2], outs[3])  # the same cached plan reproduces itself exactly
    with es.perturbed((2, 6)):
        part = [model(x[6:18]) for _ in range(3)]
    for out in part:
        torch.testing.assert_close(out, outs[0][6:18], rtol=1e-6, atol=1e-6)


def _count_general_calls(monkeypatch):
    from hyperscalees.nn.layers import matmul
    calls = []
    general = matmul.population_linear

    def counting(*args, **kwargs):
        calls.append(1)
        return general(*args, **kwargs)

    monkeypatch.setattr(matmul, "population_linear", counting)
    return calls


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("rank", [1, 3])
def test_once_the_plan_is_cached_a_linear_takes_the_direct_path_with_the_same_result(bias, rank, monkeypatch):
    """A generate calls each layer once per token: after the second call (which caches the plan) the layer
    skips the general path's look-ups; the kernels are the same, so the result is bit for bit the same."""
    torch.manual_seed(0)
    lin = nn.Linear(12, 24, bias=bias)
    es = hs.EGGROLL(nn.Sequential(lin), population=8, sigma=0.1, rank=rank, seed=1)
    x = torch.randn(8 * 3, 1, 12)
    calls = _count_general_calls(monkeypatch)
    with perturbation(es.model, es.store()):
        outs = [lin(x) for _ in range(5)]
    assert len(calls) == 2                                       # calls 3-5 took the direct path
    assert all(torch.equal(o, outs[2]) for o in outs[1:])        # call 2 made the plan; 3-5 reuse it
    assert outs[2].shape == (24, 1, 24)


@pytest.mark.parametrize("bias", [True, False])
def test_a_repeated_block_makes_plans_on_the_first_call_with_the_same_results(bias, monkeypatch):
    """``repeated=True`` (a generate): the plan is made on the first call and the direct path taken
    from the second; the outputs equal an ordinary block's (which makes the plan on the second call)."""
    torch.manual_seed(0)
    lin = nn.Linear(12, 24, bias=bias)
    es = hs.EGGROLL(nn.Sequential(lin), population=8, sigma=0.1, rank=1, seed=1)
    x = torch.randn(8 * 3, 1, 12)
    with perturbation(es.model, es.store()):
        ordinary = [lin(x) for _ in range(3)]
    es.strategy.set_step(es.step)  # a fresh store: nothing asked yet
    calls = _count_general_calls(monkeypatch)
    with perturbation(es.model, es.store(), repeated=True) as ctx:
        first = lin(x)
        assert len(ctx.plans) == 1 and es.store().memo_count == 1  # made on the first call
        later = [lin(x) for _ in range(2)]
    assert len(calls) == 1                                         # calls 2-3: the direct path
    torch.testing.assert_close(first, ordinary[0], rtol=1e-6, atol=1e-6)
    assert all(torch.equal(o, ordinary[2]) for o in [first, *later])  # the planned path, as ordinary's 3rd


def test_memo_makes_a_value_on_its_second_ask_or_its_first_when_told():
    from hyperscalees.noise.store import NoiseStore
    es = hs.EGGROLL(nn.Sequential(nn.Linear(4, 4)), population=4, sigma=0.1, seed=1)
    store: NoiseStore = es.store()
    made = []
    assert store.memo("a", 16, lambda: made.append("a") or "A") is None and not made
    assert store.memo("a", 16, lambda: made.append("a") or "A") == "A"
    assert store.memo("b", 16, lambda: made.append("b") or "B", first_use=True) == "B"
    assert made == ["a", "b"] and store.memo_count == 2
    assert store.memo("big", 1 << 60, lambda: "X", first_use=True) is None  # past the budget: never made


def test_the_direct_path_steps_aside_when_the_module_changes_inside_the_block(monkeypatch):
    torch.manual_seed(0)
    lin = nn.Linear(12, 24)
    es = hs.EGGROLL(nn.Sequential(lin), population=8, sigma=0.1, rank=1, seed=1)
    x = torch.randn(8 * 3, 12)
    calls = _count_general_calls(monkeypatch)
    with perturbation(es.model, es.store()):
        for _ in range(3):
            lin(x)
        before = lin(x)
        with torch.no_grad():
            lin.bias.add_(1.0)                                   # an in-place change: a new bias version
        after = lin(x)
        assert len(calls) == 3                                   # the general path ran again
        torch.testing.assert_close(after, before + 1.0)
        lin.weight = nn.Parameter(lin.weight.detach() * 0)       # a new weight: the direct path refuses it
        n = len(calls)
        lin(x)
        assert len(calls) == n + 1
    with pytest.raises(ValueError, match="not a multiple of the 8 members"):
        with perturbation(es.model, es.store()):
            for _ in range(3):
                lin(x)
            lin(x[:5])                                           # the direct path checks the rows too
