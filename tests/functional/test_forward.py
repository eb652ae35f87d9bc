"""Functional forward ops equal the materialized per-member reference (ops._reference)."""
import math

import pytest
import torch

from hyperscalees.functional import (AltEGGROLLNoiser, EGGROLLBSNoiser, EGGROLLNoiser, NoopNoiser, OpenESNoiser,
                                     all_noisers)
from hyperscalees.functional.threads import leaf_population, noise_name
from hyperscalees.noise.sampling import full_noise, lowrank_factors
from hyperscalees.ops import _reference as ref

SIGMA = 0.3


def threads_cases():
    return [range(0, 6), range(2, 8), range(4, 6), torch.tensor([6, 7, 2, 3]), torch.tensor([0, 1, 0, 1])]


def member_setup(noiser, thread_ids, key, rank, epoch=3, **kw):
    frozen, nparams = noiser.init_noiser({}, SIGMA, 0.1, rank=rank, **kw)
    ids = torch.as_tensor(list(thread_ids) if isinstance(thread_ids, range) else thread_ids)
    pairs = ids[0::2] // 2
    pop = leaf_population(frozen, SIGMA, key, epoch, 2 * (int(pairs.max()) + 1))
    signs = (1.0 - 2.0 * (ids % 2).float()).view(-1, 2)
    return frozen, nparams, (epoch, thread_ids), pop, pairs, signs


@pytest.mark.parametrize("thread_ids", threads_cases())
@pytest.mark.parametrize("rank", [1, 3])
def test_do_mm_and_do_Tmm_match_reference(thread_ids, rank):
    g = torch.Generator().manual_seed(rank)
    out, inp, m = 5, 7, 3
    frozen, nparams, it, pop, pairs, signs = member_setup(EGGROLLNoiser, thread_ids, 1234, rank)
    p = len(signs) * 2
    x = torch.randn(p * m, inp, generator=g)
    w = torch.randn(out, inp, generator=g)
    a, b = lowrank_factors(pop, noise_name(frozen), out, inp, pairs)
    got = EGGROLLNoiser.do_mm(frozen, nparams, w, 1234, it, x)
    want = ref.do_mm_reference(x, w, a, b, signs, SIGMA / math.sqrt(rank))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # (in, out) storage: the perturbation is A Bᵀ in W's own orientation
    wt = torch.randn(inp, out, generator=g)
    a, b = lowrank_factors(pop, noise_name(frozen), inp, out, pairs)
    got = EGGROLLNoiser.do_Tmm(frozen, nparams, wt, 1234, it, x.view(p, m, inp))
    want = ref.do_Tmm_reference(x.view(p, m, inp), wt, a, b, signs, SIGMA / math.sqrt(rank))
    assert got.shape == (p, m, out)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("thread_ids", threads_cases())
@pytest.mark.parametrize("noiser", [EGGROLLNoiser, OpenESNoiser])
def test_do_emb_matches_reference(thread_ids, noiser):
    g = torch.Generator().manual_seed(5)
    vocab, dim, rank, t = 11, 6, 2, 4
    frozen, nparams, it, pop, pairs, signs = member_setup(noiser, thread_ids, 99, rank)
    idx = torch.randint(0, vocab, (len(signs) * 2, t), generator=g)
    w = torch.randn(vocab, dim, generator=g)
    got = noiser.do_emb(frozen, nparams, w, 99, it, idx)
    if noiser is EGGROLLNoiser:
        a, b = lowrank_factors(pop, noise_name(frozen), vocab, dim, pairs)
        want = ref.do_emb_reference(idx, w, a, b, signs, SIGMA / math.sqrt(rank))
    else:
        eps = full_noise(pop, noise_name(frozen), (vocab, dim), pairs)
        want = torch.stack([(w + s * SIGMA * eps[i // 2])[idx[i]] for i, s in enumerate(signs.view(-1))])
    assert got.shape == (len(signs) * 2, t, dim)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("thread_ids", threads_cases())
def test_get_noisy_standard_and_openes_mm_match_materialized(thread_ids):
    g = torch.Generator().manual_seed(7)
    frozen, nparams, it, pop, pairs, signs = member_setup(OpenESNoiser, thread_ids, 7, 1)
    bias = torch.randn(4, 3, generator=g)
    eps = full_noise(pop, noise_name(frozen), (4, 3), pairs)
    got = OpenESNoiser.get_noisy_standard(frozen, nparams, bias, 7, it)
    want = torch.stack([bias + s * SIGMA * eps[i // 2] for i, s in enumerate(signs.view(-1))])
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    # OpenESNoiser matmul materializes W + s σ ε per member
    w = torch.randn(4, 3, generator=g)
    x = torch.randn(len(want) * 2, 3, generator=g)
    y = OpenESNoiser.do_mm(frozen, nparams, w, 7, it, x)
    want_y = torch.cat([x[2 * i:2 * i + 2] @ (w + s * SIGMA * eps[i // 2]).T for i, s in enumerate(signs.view(-1))])
    torch.testing.assert_close(y, want_y, rtol=1e-5, atol=1e-5)
    # ... and do_Tmm perturbs the (in, out) array in its own orientation
    xt = torch.randn(len(want), 4, generator=g)
    y = OpenESNoiser.do_Tmm(frozen, nparams, w, 7, it, xt)
    want_t = torch.cat([xt[i:i + 1] @ (w + s * SIGMA * eps[i // 2]) for i, s in enumerate(signs.view(-1))])
    torch.testing.assert_close(y, want_t, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("noiser", [EGGROLLNoiser, OpenESNoiser, AltEGGROLLNoiser])
def test_antithetic_pairs_are_opposite_and_pairs_differ(noiser):
    frozen, nparams = noiser.init_noiser({}, SIGMA, 0.1, rank=2)
    w = torch.randn(6, 5)
    x = torch.randn(5, 5).repeat(8, 1)  # every member sees the same 5 rows
    delta = (noiser.do_mm(frozen, nparams, w, 3, (0, range(8)), x) - x @ w.T).view(8, 5, 6)
    for k in range(4):
        torch.testing.assert_close(delta[2 * k], -delta[2 * k + 1])
        assert delta[2 * k].abs().max() > 1e-3
    assert (delta[0] - delta[2]).abs().max() > 1e-3
    b = noiser.get_noisy_standard(frozen, nparams, torch.zeros(6), 3, (0, range(8)))
    torch.testing.assert_close(b[0::2], -b[1::2])


def test_chunks_agree_with_whole_population_and_epochs_follow_noise_reuse():
    frozen, nparams = EGGROLLNoiser.init_noiser({}, SIGMA, 0.1, rank=2, noise_reuse=2)
    w, x = torch.randn(4, 3), torch.randn(8, 3)
    whole = EGGROLLNoiser.do_mm(frozen, nparams, w, 11, (5, range(8)), x)
    part = EGGROLLNoiser.do_mm(frozen, nparams, w, 11, (5, range(4, 8)), x[4:])
    torch.testing.assert_close(part, whole[4:])
    same = EGGROLLNoiser.do_mm(frozen, nparams, w, 11, (4, range(8)), x)      # 4 // 2 == 5 // 2
    other = EGGROLLNoiser.do_mm(frozen, nparams, w, 11, (6, range(8)), x)
    torch.testing.assert_close(same, whole)
    assert (other - whole).abs().max() > 1e-3
    assert (EGGROLLNoiser.do_mm(frozen, nparams, w, 12, (5, range(8)), x) - whole).abs().max() > 1e-3  # key matters


def test_unperturbed_calls_and_noop():
    w, x = torch.randn(4, 3), torch.randn(6, 3)
    for noiser in all_noisers.values():
        kw = {"group_size": 4} if noiser is EGGROLLBSNoiser else {}
        frozen, nparams = noiser.init_noiser({}, SIGMA, 0.1, **kw)
        torch.testing.assert_close(noiser.do_mm(frozen, nparams, w, 1, None, x), x @ w.T)
        assert noiser.get_noisy_standard(frozen, nparams, w, 1, None) is w
    frozen, nparams = NoopNoiser.init_noiser({}, SIGMA, 0.1)
    torch.testing.assert_close(NoopNoiser.do_mm(frozen, nparams, w, 1, (0, range(6)), x), x @ w.T)
    torch.testing.assert_close(NoopNoiser.get_noisy_standard(frozen, nparams, w, 1, (0, range(6))), w.expand(6, 4, 3))


def test_freeze_nonlora_keeps_params_unperturbed_but_matrices_noisy():
    frozen, nparams = EGGROLLNoiser.init_noiser({}, SIGMA, 0.1, freeze_nonlora=True)
    b = torch.randn(3)
    torch.testing.assert_close(EGGROLLNoiser.get_noisy_standard(frozen, nparams, b, 1, (0, range(4))), b.expand(4, 3))
    w, x = torch.randn(3, 2), torch.randn(4, 2)
    assert (EGGROLLNoiser.do_mm(frozen, nparams, w, 1, (0, range(4)), x) - x @ w.T).abs().max() > 1e-3


def test_eggrollbs_baseline_threads_get_zero_noise():
    frozen, nparams = EGGROLLBSNoiser.init_noiser({}, SIGMA, 0.1, group_size=4)
    w = torch.randn(5, 3)
    ids = torch.arange(16) % 4                       # 4 prompts x 4 directions, member-major
    x = torch.randn(16, 3)
    delta = EGGROLLBSNoiser.do_mm(frozen, nparams, w, 2, (1, ids), x) - x @ w.T
    assert delta[ids < 2].abs().max() == 0
    assert delta[ids >= 2].abs().min() > 0
    b = EGGROLLBSNoiser.get_noisy_standard(frozen, nparams, torch.zeros(5), 2, (1, ids))
    assert b[ids < 2].abs().max() == 0 and b[ids >= 2].abs().min() > 0


def test_bf16_inputs_follow_param_dtype():
    frozen, nparams = EGGROLLNoiser.init_noiser({}, SIGMA, 0.1)
    w, x = torch.randn(4, 3, dtype=torch.bfloat16), torch.randn(4, 3, dtype=torch.bfloat16)
    assert EGGROLLNoiser.do_mm(frozen, nparams, w, 1, (0, range(4)), x).dtype == torch.bfloat16
