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
