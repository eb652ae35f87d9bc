"""A perturbed population forward equals running each member's materialized weights."""
import copy

import pytest
import torch
from torch import nn

import hyperscalees as hs
from hyperscalees.noise.sampling import full_noise, lowrank_factors


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(11, 8)
        self.norm = nn.LayerNorm(8)
        self.rms = nn.RMSNorm(8)
        self.conv = nn.Conv1d(8, 8, 3, padding=1)   # no hook: runs through the vmap fallback
        self.fc = nn.Linear(8, 6)
        self.head = nn.Linear(6, 3, bias=False)

    def forward(self, idx):                  # idx (N, T)
        h = self.rms(self.norm(self.emb(idx)))
        h = self.conv(h.transpose(1, 2)).transpose(1, 2)
        return self.head(torch.tanh(self.fc(h)))


def member_model(model, es, pop, i):
    """Copy of ``model`` with member i's perturbation written into every parameter."""
    m = copy.deepcopy(model)
    k, s = i // 2, (1.0 if i % 2 == 0 else -1.0)
    pairs = torch.tensor([k])
    with torch.no_grad():
        for name, p in m.named_parameters():
            spec = es.specs[name]
            if es.strategy.is_lowrank(spec):
                a, b = lowrank_factors(pop, name, *p.shape, pairs)
                p += s * pop.sigma / pop.rank ** 0.5 * a[0] @ b[0].T
            else:
                p += s * pop.sigma * full_noise(pop, name, p.shape, pairs)[0]
    return m


@pytest.mark.parametrize("cls,rank", [(hs.EGGROLL, 1), (hs.EGGROLL, 3), (hs.OpenES, 1)])
def test_population_forward_matches_materialized_members(cls, rank):
    torch.manual_seed(0)
    model = Tiny()
    P, T = 6, 5
    es = cls(model, population=P, sigma=0.05, rank=rank, seed=3)
    idx = torch.randint(0, 11, (P, T))
    with es.perturbed():
        y = model(idx)                                  # (P, T, 3) member-major
    pop = es.ask()
    for i in range(P):
        ref = member_model(model, es, pop, i)(idx[i:i + 1])
        torch.testing.assert_close(y[i:i + 1], ref, rtol=1e-5, atol=1e-5)


def test_chunked_forward_equals_whole_population():
    torch.manual_seed(1)
    model = Tiny()
    es = hs.EGGROLL(model, population=8, sigma=0.05, rank=2)
    idx = torch.randint(0, 11, (8, 4))
    with es.perturbed():
        whole = model(idx)
    parts = []
    for lo in (0, 2, 4, 6):
        with es.perturbed((lo, lo + 2)):
            parts.append(model(idx[lo:lo + 2]))
    torch.testing.assert_close(torch.cat(parts), whole, rtol=1e-6, atol=1e-6)


def test_hooks_removed_after_context():
    torch.manual_seed(2)
    model = Tiny()
    idx = torch.randint(0, 11, (2, 4))
    before = model(idx)
    es = hs.EGGROLL(model, population=2, sigma=0.5)
    with es.perturbed():
        model(idx)
    torch.testing.assert_close(model(idx), before)


@pytest.mark.parametrize("cache_mib", [64.0, 0.0])
def test_linear_pair_blocks_give_the_same_forward(monkeypatch, cache_mib):
    """Working through a layer's pairs block by block (bounded memory) changes no value."""
    import hyperscalees.nn.layers.base as layer_base
    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(7, 5), nn.Tanh(), nn.Linear(5, 4, bias=False))
    es = hs.EGGROLL(model, population=10, sigma=0.1, rank=2, seed=1, noise_cache_mib=cache_mib)
    x = torch.randn(10 * 3, 7)
    with es.perturbed():
        whole = model(x)
    monkeypatch.setattr(layer_base, "BLOCK_BYTES", 1)  # one pair per block
    with es.perturbed():
        blocked = model(x)
    with es.perturbed(members=(4, 10)):
        part = model(x[12:])
    torch.testing.assert_close(blocked, whole, rtol=0, atol=0)
    torch.testing.assert_close(part, whole[12:], rtol=0, atol=0)


@pytest.mark.parametrize("rank", [1, 3])
def test_repeated_calls_in_a_step_reuse_a_plan_and_stay_exact(rank):
    """A policy called many times per step (RL) gets its layer plans made once; every call
    gives the same bits as the materialized members, and an in-place change of a bias
    mid-step is seen."""
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(5, 64), nn.Tanh(), nn.Linear(64, 3))
    es = hs.EGGROLL(model, population=8, sigma=0.1, rank=rank, seed=4)
    x = torch.randn(8, 5)
    pop = es.ask()
    with es.perturbed():
        outs = [model(x) for _ in range(3)]                   # ask, build, reuse
        assert es.store().memo_count == 2                      # one plan per Linear
        with torch.no_grad():
            model[2].bias += 1.0
        shifted = model(x)
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[1], outs[2])
    with torch.no_grad():
        model[2].bias -= 1.0                                      # back to the step's weights
        for i in range(8):
            ref = member_model(model, es, pop, i)(x[i:i + 1])
            torch.testing.assert_close(outs[2][i:i + 1], ref, rtol=1e-5, atol=1e-5)
        model[2].bias += 1.0
    torch.testing.assert_close(shifted, outs[0] + 1.0, rtol=0, atol=1e-5)
    es.tell(torch.randn(8))
    assert es.store().memo_count == 0                           # dropped with the step's noise
