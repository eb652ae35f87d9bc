"""The update GEMM in bf16/fp16/TF32 operands with fp32 accumulation stays close to fp32.

On a CPU the reduced-precision operands are emulated exactly as tensor cores take them
(rounded, then products summed in fp32), so the tolerance is tested here too.
"""
import pytest
import torch
from torch import nn

import hyperscalees as hs
from hyperscalees.ops.precision import PRECISIONS, addmm_fp32_, resolve_precision
from hyperscalees.ops.update import lowrank_sum_

# Stated tolerance: relative Frobenius error of ĝ against the fp32 update. bf16 keeps 8 bits
# of each operand (relative rounding 2⁻⁹), fp16 11; errors of independent terms average out.
TOLERANCE = {"bf16": 1e-2, "fp16": 2e-3, "tf32": 2e-3, "fp32": 0.0}   # tf32: fp16's 10 mantissa bits
CUDA = torch.cuda.is_available()


def factors(k=512, rows=96, cols=80, r=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(k, rows, r, generator=g), torch.randn(k, cols, r, generator=g),
            torch.randn(k, generator=g))


@pytest.mark.parametrize("precision", ["bf16", "fp16",
                                       pytest.param("tf32", marks=pytest.mark.skipif(not CUDA, reason="TF32 is CUDA's"))])
@pytest.mark.parametrize("fixed", [True, False])
def test_reduced_precision_sum_is_within_its_tolerance(precision, fixed):
    device = "cuda" if precision == "tf32" else "cpu"
    a, b, w = (t.to(device) for t in factors())
    exact = lowrank_sum_(torch.zeros(96, 80, dtype=torch.float64), a.double().cpu(), b.double().cpu(), w.double().cpu())
    fp32 = lowrank_sum_(torch.zeros(96, 80, device=device), a, b, w, fixed).cpu()
    low = lowrank_sum_(torch.zeros(96, 80, device=device), a, b, w, fixed, precision)
    rel = float((low.double().cpu() - exact).norm() / exact.norm())
    assert rel <= TOLERANCE[precision] + float((fp32.double() - exact).norm() / exact.norm()) * 2
    assert rel > 1e-5                                   # the rounding really happened (no silent fp32)
    assert low.dtype == torch.float32


@pytest.mark.parametrize("fixed", [True, False])
def test_tf32_on_a_cpu_is_fp32_bit_for_bit(fixed):
    """A CPU has no TF32 units: asking for it there runs the fp32 GEMM unchanged (and says nothing else)."""
    a, b, w = factors()
    fp32 = lowrank_sum_(torch.zeros(96, 80), a, b, w, fixed)
    assert torch.equal(lowrank_sum_(torch.zeros(96, 80), a, b, w, fixed, "tf32"), fp32)


def test_emulated_operands_equal_rounded_then_summed_in_fp32():
    a, b, w = factors(k=64)
    left = (a * w.view(-1, 1, 1)).transpose(1, 2).reshape(-1, 96)
    right = b.transpose(1, 2).reshape(-1, 80)
    want = left.bfloat16().float().T @ right.bfloat16().float()
    got = addmm_fp32_(torch.zeros(96, 80), left.T, right, "bf16")
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-5)


def test_es_step_in_bf16_update_precision_tracks_fp32():
    """Same step, two precisions: the estimates agree within the stated tolerance."""
    def estimate(precision):
        torch.manual_seed(0)
        model = nn.Linear(64, 48, bias=False)
        es = hs.EGGROLL(model, population=512, sigma=0.1, rank=1, lr=0.1, update_precision=precision)
        x = torch.randn(512, 64, generator=torch.Generator().manual_seed(2))
        with es.perturbed():
            f = model(x).pow(2).mean(dim=1)
        return es.gradient_estimate(f)["weight"]
    fp32, bf16 = estimate("fp32"), estimate("bf16")
    assert float((bf16 - fp32).norm() / fp32.norm()) <= TOLERANCE["bf16"]


def test_auto_resolves_by_device_and_dtype():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve_precision("auto", torch.bfloat16, cpu) == "fp32"
    assert resolve_precision("auto", torch.bfloat16, cuda) == "bf16"
    assert resolve_precision("auto", torch.float16, cuda) == "fp16"
    assert resolve_precision("auto", torch.float32, cuda) == "tf32"
    assert resolve_precision("fp16", torch.float32, cpu) == "fp16"
    with pytest.raises(ValueError, match="'int4'"):
        resolve_precision("int4", torch.float32, cpu)
    with pytest.raises(ValueError, match="update_precision 'half'"):
        hs.EGGROLL(nn.Linear(2, 2), population=4, update_precision="half")
    assert set(PRECISIONS) >= {"auto", "fp32", "tf32", "bf16", "fp16"}
