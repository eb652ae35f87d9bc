"""The compiled hash -> 2u − 1 loop gives exactly the torch path's values, or is not used."""
import pytest
import torch

from hyperscalees.noise import native, sampling
from hyperscalees.noise.distributions import centred_uniform_from_bits_
from hyperscalees.noise.keys import element_bits
from hyperscalees.noise.population import Population

needs_kernel = pytest.mark.skipif(not native.available(), reason="no C compiler here")


def keys(k, seed=0):
    return torch.randint(-2**31, 2**31 - 1, (k,), dtype=torch.int32, generator=torch.Generator().manual_seed(seed))


@needs_kernel
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("k,n", [(1, 7), (3, 100_003), (257, 513), (1, 300_000)])
def test_kernel_equals_torch_ops_bit_for_bit(threads, k, n):
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        pk = keys(k)
        shared = torch.arange(n, dtype=torch.int32) * 7 - 3       # negative and wrapping indices too
        out = native.centred_uniform_(pk, shared, torch.empty(k, n), per_pair=False)
        ref = centred_uniform_from_bits_(element_bits(pk.view(-1, 1), shared), torch.empty(k, n))
        assert torch.equal(out, ref)
        per = torch.randint(0, 2**31 - 1, (k, n), dtype=torch.int32, generator=torch.Generator().manual_seed(1))
        out = native.centred_uniform_(pk, per, torch.empty(k, n), per_pair=True)
        assert torch.equal(out, centred_uniform_from_bits_(element_bits(pk.view(-1, 1), per), torch.empty(k, n)))
        assert bool((out > -1).all() and (out < 1).all())
    finally:
        torch.set_num_threads(old)


@needs_kernel
@pytest.mark.parametrize("distribution", ["gaussian", "int"])
def test_draws_are_identical_with_and_without_the_kernel(monkeypatch, distribution):
    pop = Population(step=3, seed=11, size=600, sigma=0.1, rank=2, distribution=distribution)
    pairs = pop.pairs()
    idx = torch.arange(1000, dtype=torch.int32)
    rows = torch.randint(0, 50, (300, 4, 2), dtype=torch.int32)
    fast = (sampling.draw(pop, "w", pairs, idx), sampling.draw(pop, "e", pairs, rows, per_pair=True),
            sampling.draw(pop, "w", pairs, idx, dtype=torch.int8 if distribution == "int" else torch.bfloat16))
    monkeypatch.setattr(native, "available", lambda: False)
    slow = (sampling.draw(pop, "w", pairs, idx), sampling.draw(pop, "e", pairs, rows, per_pair=True),
            sampling.draw(pop, "w", pairs, idx, dtype=torch.int8 if distribution == "int" else torch.bfloat16))
    for a, b in zip(fast, slow):
        assert a.dtype == b.dtype and torch.equal(a, b)


@needs_kernel
def test_kernel_rejects_wrong_inputs():
    pk, idx = keys(2), torch.arange(5, dtype=torch.int32)
    with pytest.raises(TypeError, match="int32"):
        native.centred_uniform_(pk, idx.long(), torch.empty(2, 5), per_pair=False)
    with pytest.raises(ValueError, match="unit-stride"):
        native.centred_uniform_(pk, idx, torch.empty(5, 2).T, per_pair=False)


def test_disabled_by_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("HYPERSCALEES_NATIVE", "0")
    native.library.cache_clear()
    try:
        assert not native.available()
        with pytest.raises(RuntimeError, match="HYPERSCALEES_NATIVE"):
            native.centred_uniform_(keys(1), torch.arange(3, dtype=torch.int32), torch.empty(1, 3), per_pair=False)
    finally:
        monkeypatch.delenv("HYPERSCALEES_NATIVE")
        native.library.cache_clear()


@needs_kernel
def test_build_goes_to_the_cache_dir_once(monkeypatch, tmp_path):
    monkeypatch.setenv("HYPERSCALEES_CACHE", str(tmp_path))
    cc = native.shutil.which("cc") or native.shutil.which("gcc")
    first = native._build(cc)
    assert first is not None and first.parent == tmp_path and first.exists()
    stamp = first.stat().st_mtime_ns
    assert native._build(cc) == first and first.stat().st_mtime_ns == stamp   # reused, not rebuilt
    assert [p.name for p in tmp_path.iterdir()] == [first.name]                 # no temp files left


@needs_kernel
def test_a_forked_child_can_still_draw():
    """The thread pool is per process: a child forked after the parent used it must not hang."""
    import os
    import select
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        pk, idx = keys(8), torch.arange(1 << 16, dtype=torch.int32)
        parent = native.centred_uniform_(pk, idx, torch.empty(8, 1 << 16), per_pair=False)  # pool now exists
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: draw with two threads, report the checksum, never return into pytest
            try:  # numpy for the checksum: torch's own OpenMP ops are not fork-safe, ours must be
                out = native.centred_uniform_(pk, idx, torch.empty(8, 1 << 16), per_pair=False)
                os.write(write, repr(float(out.numpy().astype("float64").sum())).encode())
            finally:
                os._exit(0)
        os.close(write)
        ready, _, _ = select.select([read], [], [], 60)
        got = os.read(read, 100).decode() if ready else ""
        if not ready:
            os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(read)
        assert got, "the forked child hung drawing noise"
        assert float(got) == float(parent.numpy().astype("float64").sum())
    finally:
        torch.set_num_threads(old)


@needs_kernel
def test_compiled_pair_keys_equal_the_torch_ops():
    from hyperscalees.noise.keys import mix_int, pair_keys
    pairs = torch.cat([torch.arange(300), torch.tensor([2**31 - 1, 2**31, 2**32 + 5, 10**12])])
    for key in (0, 1, 0x9E3779B9, 0xFFFFFFFF):
        assert torch.equal(native.pair_keys(key, mix_int(key), pairs), pair_keys(key, pairs))


@needs_kernel
@pytest.mark.parametrize("k,n", [(1, 300_000), (5, 300_000), (40, 50)])  # column split, row split, one thread
def test_whole_draws_without_an_index_equal_the_torch_path(monkeypatch, k, n):
    pop = Population(step=1, seed=2, size=2 * k, sigma=0.1)
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        fast = sampling.full_noise(pop, "w", (n,), pop.pairs())
        monkeypatch.setattr(native, "available", lambda: False)
        assert torch.equal(fast, sampling.full_noise(pop, "w", (n,), pop.pairs()))
    finally:
        torch.set_num_threads(old)
