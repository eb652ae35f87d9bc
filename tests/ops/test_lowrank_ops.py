"""Every batched op equals its materialized loop-over-members twin in ops/_reference.py."""
import math

import pytest
import torch

from hyperscalees.ops import (add_lowrank_, do_emb, do_mm, do_mm_dense, do_Tmm, full_sum, get_noisy_standard,
                              lowrank_sum, pair_weights)
from hyperscalees.ops._reference import (do_emb_reference, do_mm_reference, do_Tmm_reference,
                                         gradient_reference, member_matrix)

TOL = dict(rtol=1e-5, atol=1e-5)


def signs_for(k: int, baseline: bool) -> torch.Tensor:
    s = torch.tensor([[1.0, -1.0]]).repeat(k, 1)
    if baseline:
        s[0] = 0.0                                   # first pair: unperturbed baseline members
    return s


def gen(seed):
    return torch.Generator().manual_seed(seed)


CASES = [(k, r, lead, base) for k, r, lead, base in
         [(1, 1, (3,), False), (2, 2, (5,), True), (3, 4, (2, 7), False), (4, 3, (1, 4), True), (2, 1, (4, 3), True)]]


@pytest.mark.parametrize("k,r,lead,baseline", CASES)
def test_do_mm_matches_reference(k, r, lead, baseline):
    g = gen(k * 10 + r)
    din, dout = 6, 5
    x = torch.randn(2 * k * lead[0], *lead[1:], din, generator=g)    # (P*B, [T,] din)
    w, bias = torch.randn(dout, din, generator=g), torch.randn(dout, generator=g)
    a, b = torch.randn(k, dout, r, generator=g), torch.randn(k, din, r, generator=g)
    e = torch.randn(k, dout, generator=g)
    s, scale, sigma = signs_for(k, baseline), 0.3 / math.sqrt(r), 0.3
    y = do_mm(x, w, a, b, s, scale, bias, e, sigma)
    torch.testing.assert_close(y, do_mm_reference(x, w, a, b, s, scale, bias, e, sigma), **TOL)
    torch.testing.assert_close(do_mm(x, w, a, b, s, scale), do_mm_reference(x, w, a, b, s, scale), **TOL)
    if baseline:                                       # sign 0 members see exactly the base weights
        m = x.shape[0] // (2 * k)
        torch.testing.assert_close(y[: 2 * m], torch.nn.functional.linear(x[: 2 * m], w, bias), rtol=0, atol=0)


@pytest.mark.parametrize("k,r,lead,baseline", CASES)
def test_do_Tmm_matches_reference(k, r, lead, baseline):
    g = gen(k * 7 + r)
    din, dout = 4, 9
    x = torch.randn(2 * k * lead[0], *lead[1:], din, generator=g)
    w = torch.randn(din, dout, generator=g)
    a, b = torch.randn(k, din, r, generator=g), torch.randn(k, dout, r, generator=g)
    s, scale = signs_for(k, baseline), 0.2
    torch.testing.assert_close(do_Tmm(x, w, a, b, s, scale), do_Tmm_reference(x, w, a, b, s, scale), **TOL)


@pytest.mark.parametrize("k,r,lead,baseline", CASES)
def test_do_emb_matches_reference(k, r, lead, baseline):
    g = gen(k * 3 + r)
    vocab, dim = 11, 6
    idx = torch.randint(0, vocab, (2 * k * lead[0], *lead[1:]), generator=g)
    w = torch.randn(vocab, dim, generator=g)
    a_full, b = torch.randn(k, vocab, r, generator=g), torch.randn(k, dim, r, generator=g)
    rows = idx.reshape(k, -1)                          # (K, 2M): each pair's looked-up rows
    a_rows = torch.stack([a_full[j, rows[j]] for j in range(k)])
    s, scale = signs_for(k, baseline), 0.5
    torch.testing.assert_close(do_emb(idx, w, a_rows, b, s, scale),
                               do_emb_reference(idx, w, a_full, b, s, scale), **TOL)


@pytest.mark.parametrize("k,shape,baseline", [(1, (5,), False), (3, (4,), True), (2, (3, 4), False)])
def test_get_noisy_standard_matches_materialized(k, shape, baseline):
    g = gen(k)
    p, eps = torch.randn(*shape, generator=g), torch.randn(k, *shape, generator=g)
    s = signs_for(k, baseline)
    got = get_noisy_standard(p, eps, s, 0.1)                       # (P, *shape)
    want = torch.stack([p + float(s.reshape(-1)[i]) * 0.1 * eps[i // 2] for i in range(2 * k)])
    torch.testing.assert_close(got, want, **TOL)


@pytest.mark.parametrize("k,lead,baseline,with_bias", [(1, (3,), False, True), (3, (2, 5), True, True),
                                                       (2, (4,), False, False)])
def test_do_mm_dense_matches_materialized(k, lead, baseline, with_bias):
    g = gen(k + 100)
    din, dout = 5, 4
    x = torch.randn(2 * k * lead[0], *lead[1:], din, generator=g)
    w, noise = torch.randn(dout, din, generator=g), torch.randn(k, dout, din, generator=g)
    bias = torch.randn(dout, generator=g) if with_bias else None
    e = torch.randn(k, dout, generator=g) if with_bias else None
    s, sigma = signs_for(k, baseline), 0.2
    got = do_mm_dense(x, w, noise, s, sigma, bias, e)
    xs = x.reshape(2 * k, -1, din)
    outs = []
    for i in range(2 * k):
        si = float(s.reshape(-1)[i])
        y = xs[i] @ (w + si * sigma * noise[i // 2]).T
        if with_bias:
            y = y + bias + si * sigma * e[i // 2]
        outs.append(y)
    torch.testing.assert_close(got, torch.stack(outs).reshape(*x.shape[:-1], dout), **TOL)


def test_add_lowrank_rejects_rows_not_divisible_by_members():
    x, y = torch.randn(6, 3), torch.randn(6, 2)
    with pytest.raises(ValueError, match="6 input rows.*4 members"):
        add_lowrank_(y, x, torch.randn(2, 3, 1), torch.randn(2, 2, 1), signs_for(2, False), 1.0)


def test_add_lowrank_is_differentiable_when_grad_is_on():
    x = torch.randn(4, 3, requires_grad=True)
    y = x @ torch.randn(3, 2)
    out = add_lowrank_(y, x, torch.randn(2, 3, 1), torch.randn(2, 2, 1), signs_for(2, False), 0.1)
    out.sum().backward()
    assert x.grad is not None and bool(torch.isfinite(x.grad).all())


def test_pair_weights():
    shaped = torch.tensor([1.0, 3.0, -2.0, 5.0, 4.0, 4.0])
    s = torch.tensor([[1.0, -1.0], [1.0, -1.0], [0.0, 0.0]])
    assert pair_weights(shaped, s).tolist() == [-2.0, -7.0, 0.0]


@pytest.mark.parametrize("k,rows,cols,r", [(1, 3, 4, 1), (5, 6, 2, 3), (9, 4, 7, 4)])
def test_lowrank_sum_equals_brute_force(k, rows, cols, r):
    g = gen(k * r)
    a, b, w = torch.randn(k, rows, r, generator=g), torch.randn(k, cols, r, generator=g), torch.randn(k, generator=g)
    want = sum(float(w[j]) * a[j] @ b[j].T for j in range(k))
    torch.testing.assert_close(lowrank_sum(a, b, w), want, **TOL)


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 2, 3)])
def test_full_sum_equals_brute_force(shape):
    g = gen(len(shape))
    eps, w = torch.randn(6, *shape, generator=g), torch.randn(6, generator=g)
    torch.testing.assert_close(full_sum(eps, w), sum(float(w[j]) * eps[j] for j in range(6)), **TOL)


def test_update_sums_equal_gradient_reference():
    """Σ_k w_k A_k B_kᵀ/√r /(Nσ) with w from pair_weights == (1/(Nσ)) Σ_i f_i ε_i, ε_i materialized."""
    g = gen(42)
    k, r, sigma = 6, 2, 0.05
    a, b = torch.randn(k, 5, r, generator=g), torch.randn(k, 3, r, generator=g)
    f = torch.randn(2 * k, generator=g)
    s = signs_for(k, True)
    eps = [member_matrix(torch.zeros(5, 3), a[i // 2], b[i // 2], float(s.reshape(-1)[i]), 1 / math.sqrt(r))
           for i in range(2 * k)]
    fast = lowrank_sum(a, b, pair_weights(f, s)) / math.sqrt(r) / (2 * k * sigma)
    torch.testing.assert_close(fast, gradient_reference(eps, f, sigma), **TOL)


def test_ops_keep_low_precision_dtype():
    k, r = 2, 2
    x = torch.randn(8, 6).bfloat16()
    w = torch.randn(5, 6).bfloat16()
    a, b = torch.randn(k, 5, r), torch.randn(k, 6, r)
    y = do_mm(x, w, a, b, signs_for(k, False), 0.1)
    assert y.dtype == torch.bfloat16
    ref = do_mm_reference(x.float(), w.float(), a, b, signs_for(k, False), 0.1)
    torch.testing.assert_close(y.float(), ref, rtol=2e-2, atol=5e-2)   # stated bf16 tolerance


@pytest.mark.parametrize("k,r,lead,baseline", CASES)
@pytest.mark.parametrize("with_bias,with_noise", [(True, True), (True, False), (False, True), (False, False)])
@pytest.mark.parametrize("dout", [6, 90])  # below / above torch's naive-bmm size: both term kernels
def test_perturbed_linear_no_grad_and_autograd_paths_agree(k, r, lead, baseline, with_bias, with_noise, dout):
    """do_mm without grad writes bias + perturbation first and accumulates the GEMM onto it;
    with grad it adds the perturbation after F.linear. Both equal the materialized loop."""
    g = gen(k * 13 + r)
    din = 7
    x = torch.randn(2 * k * lead[0], *lead[1:], din, generator=g)
    w = torch.randn(dout, din, generator=g)
    bias = torch.randn(dout, generator=g) if with_bias else None
    e = torch.randn(k, dout, generator=g) if with_noise else None
    a, b = torch.randn(k, dout, r, generator=g), torch.randn(k, din, r, generator=g)
    s, scale, sigma = signs_for(k, baseline), 0.4 / math.sqrt(r), 0.2
    ref = do_mm_reference(x, w, a, b, s, scale, bias, e, sigma)
    with torch.no_grad():
        fast = do_mm(x, w, a, b, s, scale, bias, e, sigma)
    wg = w.clone().requires_grad_(True)
    slow = do_mm(x, wg, a, b, s, scale, bias, e, sigma)
    assert slow.requires_grad and not fast.requires_grad
    torch.testing.assert_close(fast, ref, **TOL)
    torch.testing.assert_close(slow.detach(), ref, **TOL)
    if baseline:  # sign-0 members see the base layer: a different arithmetic path (bias first, then
        # addmm_), so equal to float rounding, not bit for bit -- BLAS blocks GEMMs by thread count
        m = x.shape[0] // (2 * k)
        torch.testing.assert_close(fast[: 2 * m], torch.nn.functional.linear(x, w, bias)[: 2 * m])
