"""The update's bits are a function of (state, step, shaped fitness) alone.

A replica replaying the update, or a run resumed on another machine, must land on the
very same weights: whatever the thread count, ``update_chunk``, noise cache or chunking of
the population. Compared with ``torch.equal``, never a tolerance.
"""
import pytest
import torch
from torch import nn

import hyperscalees as hs
from hyperscalees.strategies.shaping import fixed_sum, z_score

POP = 1200  # 600 pairs: more than two reduction blocks (256 pairs), and not a multiple of one


@pytest.fixture
def threads():
    saved = torch.get_num_threads()
    yield
    torch.set_num_threads(saved)


def train(threads=None, update_chunk=4096, noise_cache_mib=64.0, chunk=POP, optimizer="adam", steps=2,
          shaping="centered_rank", deterministic=True):
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 160), nn.Tanh(), nn.LayerNorm(160), nn.Linear(160, 10))
    es = hs.EGGROLL(model, population=POP, sigma=0.05, rank=2, lr=0.05, optimizer=optimizer, seed=1,
                    update_chunk=update_chunk, noise_cache_mib=noise_cache_mib, shaping=shaping,
                    deterministic=deterministic)
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(2))

    def fitness(m, lo, hi, step):
        return -m(x.repeat(hi - lo, 1)).pow(2).view(hi - lo, -1).mean(dim=1)

    for _ in range(steps):
        es.tell(hs.evaluate(es, fitness, chunk))
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_update_bits_do_not_depend_on_threads_chunking_or_cache(threads, optimizer):
    base = train(threads=1, optimizer=optimizer)
    variants = {"2 threads": dict(threads=2), "3 threads": dict(threads=3),
                "update_chunk 100": dict(update_chunk=100), "update_chunk 300, 2 threads": dict(update_chunk=300, threads=2),
                "no noise cache": dict(noise_cache_mib=0.0), "no cache, chunk 100": dict(noise_cache_mib=0.0, update_chunk=100),
                "chunks of 200 members": dict(chunk=200), "chunks of 2 members, 2 threads": dict(chunk=2, threads=2)}
    for what, kw in variants.items():
        got = train(optimizer=optimizer, **{"threads": 1, **kw})
        assert torch.equal(got, base), f"{what}: max diff {float((got - base).abs().max()):.3g}"


def test_the_update_actually_moved_the_weights(threads):
    assert not torch.equal(train(threads=1, steps=0), train(threads=1, steps=1))


def test_z_score_shaping_bits_do_not_depend_on_threads(threads):
    f = torch.randn(1 << 17, generator=torch.Generator().manual_seed(3)) * 50 + 7
    out = []
    for n in (1, 2, 3):
        torch.set_num_threads(n)
        out.append((z_score(f), fixed_sum(f)))
    for z, s in out[1:]:
        assert torch.equal(z, out[0][0]) and torch.equal(s, out[0][1])
    torch.testing.assert_close(out[0][1].double(), f.double().sum(), rtol=1e-6, atol=0)


def test_without_the_guarantee_the_update_is_the_same_to_float_rounding(threads):
    """deterministic=False lets BLAS use every thread (one GEMM per chunk): the same update up to
    float rounding, no longer bit for bit across threads or chunking.

    Compared as the norm of the difference over the norm of the weights' move: elementwise, a
    weight whose estimate is near zero (Adam's ε) or a different BLAS kernel on another CPU moves
    single elements by far more than rounding while the update as a whole agrees to ~1e-5."""
    init, base = train(threads=1, steps=0), train(threads=1)
    for kw in (dict(threads=2), dict(threads=2, update_chunk=100), dict(threads=1, noise_cache_mib=0.0)):
        got = train(deterministic=False, **kw)
        rel = float((got - base).norm() / (base - init).norm())
        assert rel < 1e-3, f"{kw}: |Δ| / |move| = {rel:.3g}"
