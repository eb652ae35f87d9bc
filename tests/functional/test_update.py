"""do_updates equals a brute-force −√N·mean_i(f_i E_i) stepped by the optimizer, where each
member's perturbation E_i is read back from the *forward* ops (so forward and update agree)."""
import math

import pytest
import torch

from hyperscalees.functional import (EMB_PARAM, EXCLUDED, MM_PARAM, PARAM, AltEGGROLLNoiser, EGGROLLBSNoiser,
                                     EGGROLLNoiser, NoopNoiser, OpenESNoiser, simple_es_tree_key)
from hyperscalees.functional.threads import leaf_population, noise_name
from hyperscalees.noise.sampling import lowrank_factors

N, EPOCH, SIGMA, LR = 8, 3, 0.2, 0.05


def make_tree():
    g = torch.Generator().manual_seed(0)
    params = {"mm": torch.randn(5, 4, generator=g), "bias": torch.randn(5, generator=g),
              "emb": torch.randn(7, 3, generator=g), "blk": {"tmm": torch.randn(4, 6, generator=g)},
              "stack": torch.randn(3, 4, 2, generator=g), "skip": torch.randn(2, 2, generator=g)}
    es_map = {"mm": MM_PARAM, "bias": PARAM, "emb": EMB_PARAM, "blk": {"tmm": MM_PARAM}, "stack": MM_PARAM,
              "skip": EXCLUDED}
    scan = {"mm": (), "bias": (), "emb": (), "blk": {"tmm": ()}, "stack": (0,), "skip": ()}
    return params, es_map, simple_es_tree_key(params, 42, scan)


def member_perturbations(noiser, frozen, nparams, params, keys, epoch=EPOCH):
    """{leaf: (N, *shape)} E_i obtained by running the forward on identity inputs."""
    it = (epoch, range(N))

    def mm(w, key):  # x = I: row j of member i is e_j (W + E_i)ᵀ
        x = torch.eye(w.shape[1]).repeat(N, 1)
        return noiser.do_mm(frozen, nparams, w, key, it, x).view(N, w.shape[1], -1).transpose(1, 2) - w

    tmm = params["blk"]["tmm"]
    return {
        "mm": mm(params["mm"], keys["mm"]),
        "bias": noiser.get_noisy_standard(frozen, nparams, params["bias"], keys["bias"], it) - params["bias"],
        "emb": noiser.do_emb(frozen, nparams, params["emb"], keys["emb"], it,
                             torch.arange(7).repeat(N)).view(N, 7, 3) - params["emb"],
        "tmm": noiser.do_Tmm(frozen, nparams, tmm, keys["blk"]["tmm"], it, torch.eye(4).repeat(N, 1)).view(N, 4, 6)
        - tmm,
        "stack": torch.stack([mm(params["stack"][l], keys["stack"][l]) for l in range(3)], dim=1),
    }


def brute_grads(pert, f):
    """−√N · mean_i(f_i E_i) per leaf."""
    return {k: -math.sqrt(N) * (f.view(-1, *[1] * (e.dim() - 1)) * e).mean(0) for k, e in pert.items()}


def get(params, k):
    return params["blk"]["tmm"] if k == "tmm" else params[k]


@pytest.mark.parametrize("noiser,rank", [(EGGROLLNoiser, 1), (EGGROLLNoiser, 3), (OpenESNoiser, 1)])
def test_sgd_update_equals_brute_force(noiser, rank):
    params, es_map, keys = make_tree()
    frozen, nparams = noiser.init_noiser(params, SIGMA, LR, rank=rank, noise_reuse=2)
    f = torch.randn(N, generator=torch.Generator().manual_seed(1))
    grads = brute_grads(member_perturbations(noiser, frozen, nparams, params, keys), f)
    before = {k: v.clone() for k, v in params.items() if k != "blk"}
    new_np, new = noiser.do_updates(frozen, nparams, params, keys, f, (EPOCH, torch.arange(N)), es_map)
    for k, g in grads.items():
        torch.testing.assert_close(get(new, k), get(params, k) - LR * g, rtol=1e-5, atol=1e-6)
        assert (get(new, k) - get(params, k)).abs().max() > 1e-4
    assert new["skip"] is params["skip"]                      # EXCLUDED: untouched
    for k, v in before.items():                               # inputs are not modified in place
        torch.testing.assert_close(params[k], v, rtol=0, atol=0)
    assert new_np["step"] == 1 and nparams["step"] == 0
    _, again = noiser.do_updates(frozen, nparams, params, keys, f, (EPOCH, torch.arange(N)), es_map)  # stateless
    torch.testing.assert_close(again["mm"], new["mm"], rtol=0, atol=0)


def test_alteggroll_uses_sign_factors():
    params, es_map, keys = make_tree()
    frozen, nparams = AltEGGROLLNoiser.init_noiser(params, SIGMA, LR, rank=2)
    f = torch.randn(N, generator=torch.Generator().manual_seed(2))
    _, new = AltEGGROLLNoiser.do_updates(frozen, nparams, params, keys, f, (EPOCH, range(N)), es_map)
    pop = leaf_population(frozen, SIGMA, keys["mm"], EPOCH, N)
    a, b = lowrank_factors(pop, noise_name(frozen), 5, 4, torch.arange(N // 2))
    s = torch.tensor([1.0, -1.0]).repeat(N // 2)
    e = torch.stack([s[i] * SIGMA / math.sqrt(2) * a[i // 2].sign() @ b[i // 2].sign().T for i in range(N)])
    want = params["mm"] + LR * math.sqrt(N) * (f.view(N, 1, 1) * e).mean(0)
    torch.testing.assert_close(new["mm"], want, rtol=1e-5, atol=1e-6)
    # the non-matrix leaf keeps the Gaussian full-rank update
    pert = member_perturbations(EGGROLLNoiser, *EGGROLLNoiser.init_noiser(params, SIGMA, LR, rank=2), params, keys)
    torch.testing.assert_close(new["bias"], params["bias"] - LR * brute_grads(pert, f)["bias"])


def test_adam_state_threads_through_noiser_params_like_a_persistent_optimizer():
    params, es_map, keys = make_tree()
    frozen, nparams = EGGROLLNoiser.init_noiser(params, SIGMA, LR, solver="adam", solver_kwargs={"b1": 0.8, "b2": 0.99})
    names = ["bias", "emb", "mm", "stack", "tmm"]
    masters = {k: get(params, k).clone() for k in names}
    opt = torch.optim.Adam([masters[k] for k in names], lr=LR, betas=(0.8, 0.99))
    cur, cur_np = params, nparams
    for epoch in range(3):
        f = torch.randn(N, generator=torch.Generator().manual_seed(10 + epoch))
        grads = brute_grads(member_perturbations(EGGROLLNoiser, frozen, cur_np, cur, keys, epoch), f)
        for k in names:
            masters[k].grad = grads[k]
        opt.step()
        first = EGGROLLNoiser.do_updates(frozen, cur_np, cur, keys, f, (epoch, range(N)), es_map)
        again = EGGROLLNoiser.do_updates(frozen, cur_np, cur, keys, f, (epoch, range(N)), es_map)
        cur_np, cur = first
        for k in names:
            torch.testing.assert_close(get(cur, k), masters[k], rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(get(again[1], k), get(cur, k), rtol=0, atol=0)  # opt_state not mutated


def test_lr_schedule_and_adamw_defaults():
    params, es_map, keys = make_tree()
    frozen, nparams = EGGROLLNoiser.init_noiser(params, SIGMA, lambda step: 0.0 if step == 0 else LR, solver="adamw")
    assert frozen["solver_kwargs"]["weight_decay"] == 1e-4
    f = torch.randn(N)
    np1, p1 = EGGROLLNoiser.do_updates(frozen, nparams, params, keys, f, (0, range(N)), es_map)
    torch.testing.assert_close(p1["mm"], params["mm"], rtol=0, atol=0)       # lr(0) = 0
    _, p2 = EGGROLLNoiser.do_updates(frozen, np1, p1, keys, f, (1, range(N)), es_map)
    assert (p2["mm"] - p1["mm"]).abs().max() > 1e-3


def test_freeze_nonlora_and_noop():
    params, es_map, keys = make_tree()
    f = torch.randn(N)
    frozen, nparams = EGGROLLNoiser.init_noiser(params, SIGMA, LR, freeze_nonlora=True)
    _, new = EGGROLLNoiser.do_updates(frozen, nparams, params, keys, f, (0, range(N)), es_map)
    assert new["bias"] is params["bias"] and new["skip"] is params["skip"]
    assert (new["mm"] - params["mm"]).abs().max() > 1e-4
    frozen, nparams = NoopNoiser.init_noiser(params, SIGMA, LR)
    np2, new = NoopNoiser.do_updates(frozen, nparams, params, keys, f, (0, range(N)), es_map)
    for k in ("mm", "bias", "emb", "stack", "skip"):
        assert new[k] is params[k]
    assert np2["opt_state"] is None


def test_identical_pair_scores_give_no_update():
    params, es_map, keys = make_tree()
    frozen, nparams = EGGROLLNoiser.init_noiser(params, SIGMA, LR)
    f = torch.randn(N // 2).repeat_interleave(2)
    _, new = EGGROLLNoiser.do_updates(frozen, nparams, params, keys, f, (0, range(N)), es_map)
    torch.testing.assert_close(new["mm"], params["mm"], rtol=0, atol=1e-6)


def test_eggrollbs_update_over_directions_with_clipping():
    params, es_map, keys = make_tree()
    g = 8
    frozen, nparams = EGGROLLBSNoiser.init_noiser(params, SIGMA, LR, group_size=g)
    raw = torch.randn(3 * g, generator=torch.Generator().manual_seed(4))
    f = EGGROLLBSNoiser.convert_fitnesses(frozen, nparams, raw)
    assert f.shape == (g,) and f[:2].abs().max() == 0
    _, new = EGGROLLBSNoiser.do_updates(frozen, nparams, params, keys, f, (EPOCH, range(g)), es_map)
    grads = brute_grads(member_perturbations(EGGROLLBSNoiser, frozen, nparams, params, keys), f)
    norm = math.sqrt(sum(float(v.pow(2).sum()) for v in grads.values()))
    clip = min(1.0, 1.0 / (norm + 1e-6))
    for k, v in grads.items():
        torch.testing.assert_close(get(new, k), get(params, k) - LR * clip * v, rtol=1e-4, atol=1e-6)


def test_update_errors():
    params, es_map, keys = make_tree()
    frozen, nparams = EGGROLLNoiser.init_noiser(params, SIGMA, LR)
    f = torch.randn(N)
    with pytest.raises(ValueError, match="entries"):
        EGGROLLNoiser.do_updates(frozen, nparams, params, keys, f[:6], (0, range(N)), es_map)
    with pytest.raises(ValueError, match="1-D"):
        EGGROLLNoiser.do_updates(frozen, nparams, params, keys, f.view(2, 4), (0, range(N)), es_map)
    with pytest.raises(ValueError, match="even count"):
        EGGROLLNoiser.do_updates(frozen, nparams, params, keys, f[:7], (0, range(7)), es_map)
    with pytest.raises(ValueError, match="0, 1, ..."):
        EGGROLLNoiser.do_updates(frozen, nparams, params, keys, f, (0, range(2, 10)), es_map)
    with pytest.raises(ValueError, match="finite"):
        EGGROLLNoiser.do_updates(frozen, nparams, params, keys, torch.full((N,), float("nan")), (0, range(N)), es_map)
    with pytest.raises(ValueError, match="None"):
        EGGROLLNoiser.do_updates(frozen, nparams, params, keys, f, None, es_map)


@pytest.fixture
def restore_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("noiser,kw", [(EGGROLLNoiser, {"solver": "adam", "rank": 2}),
                                       (EGGROLLBSNoiser, {"group_size": 4})])
def test_update_bits_do_not_depend_on_thread_count(noiser, kw, restore_threads):
    """Leaves big enough that the estimate's GEMMs and the clip's sums are split over threads."""
    g = torch.Generator().manual_seed(3)
    params = {"mm": torch.randn(320, 256, generator=g), "bias": torch.randn(66_000, generator=g)}
    es_map = {"mm": MM_PARAM, "bias": PARAM}
    keys = simple_es_tree_key(params, 7, None)
    n = 1024                                                  # 512 pairs: two reduction blocks
    f = torch.randn(n, generator=g)
    frozen, nparams = noiser.init_noiser(params, SIGMA, LR, update_chunk=100, **kw)
    runs = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        runs.append(noiser.do_updates(frozen, nparams, params, keys, f, (EPOCH, range(n)), es_map)[1])
    for k in params:
        assert torch.equal(runs[0][k], runs[1][k]), k
        assert not torch.equal(runs[0][k], params[k])
