"""The precision of the update GEMM: operands rounded to a tensor-core format, fp32 accumulation.

The update (A⊙f)Bᵀ is the largest GEMM of a step after the forward (at T = 1 about half
its FLOPs). In fp32 with TF32 off a GPU runs it on the SIMT path, an order of magnitude
below its tensor cores. Rounding the operands to bf16/fp16 (or letting the GPU use TF32)
and accumulating in fp32 keeps the estimate within a stated tolerance of the fp32 one
(tests/ops/test_update_precision.py) for a fraction of the time.

``auto`` picks, per parameter: on CUDA the parameter's own precision when it is bf16/fp16,
TF32 when it is fp32; on a CPU fp32 (no tensor cores; bf16 GEMMs there are slower). On a
CPU an explicit ``bf16``/``fp16`` is emulated exactly as the GPU computes it -- operands
rounded, products summed in fp32 -- so its error can be tested without a GPU.
"""
from __future__ import annotations

import contextlib

import torch
from torch import Tensor

PRECISIONS = ("auto", "fp32", "tf32", "bf16", "fp16")
OPERAND_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def check_precision(name: str) -> str:
    if name not in PRECISIONS:
        raise ValueError(f"unknown update_precision {name!r}; choose one of {PRECISIONS}")
    return name


def resolve_precision(name: str, param_dtype: torch.dtype, device: torch.device) -> str:
    """``auto`` -> the concrete precision for one parameter on ``device``; others unchanged."""
    check_precision(name)
    if name != "auto":
        return name
    if device.type != "cuda" or not param_dtype.is_floating_point:  # integer weights: votes must stay exact
        return "fp32"
    return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(param_dtype, "tf32")


@contextlib.contextmanager
def tf32_matmuls():
    """Let CUDA fp32 GEMMs use TF32 inside the block only (the global setting is restored)."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def round_operands(left: Tensor, right: Tensor, precision: str) -> tuple[Tensor, Tensor]:
    """Both operands rounded to ``precision``'s format and back to fp32 (no-op for fp32/tf32)."""
    if precision not in OPERAND_DTYPES:
        return left, right
    dtype = OPERAND_DTYPES[precision]
    return left.to(dtype).float(), right.to(dtype).float()


def addmm_fp32_(out: Tensor, left: Tensor, right: Tensor, precision: str, accumulate: bool = True) -> Tensor:
    """out (fp32) += left @ right with operands in ``precision`` and fp32 accumulation
    (``accumulate=False``: out = left @ right, its old contents never read)."""
    beta = 1 if accumulate else 0
    if precision in ("fp32", "auto"):
        return out.addmm_(left, right, beta=beta)
    if precision == "tf32":
        with tf32_matmuls():
            return out.addmm_(left, right, beta=beta)
    if out.device.type == "cuda":  # tensor cores, fp32 output straight from the GEMM
        dtype = OPERAND_DTYPES[precision]
        try:
            product = torch.mm(left.to(dtype), right.to(dtype), out_dtype=torch.float32)
            return out.add_(product) if accumulate else out.copy_(product)
        except (TypeError, RuntimeError):  # a torch without mm(out_dtype=): rounded operands are exact
            with tf32_matmuls():          # in TF32 (10 mantissa bits >= bf16's 7, fp16's 10)
                return out.addmm_(*round_operands(left, right, precision), beta=beta)
    return out.addmm_(*round_operands(left, right, precision), beta=beta)  # the same rounding, summed in fp32
