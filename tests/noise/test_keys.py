"""The int32 tensor hash is bit-identical to its pure-Python twins, edge values included."""
import random

import pytest
import torch

from hyperscalees.noise.keys import (MASK32, element_bits, element_bits_int, epoch_key, fold_in, mix, mix_int,
                                     name_key, pair_key_int, pair_keys)

EDGES = [0, 1, 2, 0x7FFFFFFF, 0x80000000, 0x80000001, 0xFFFFFFFF, 0xFFFFFFFE, 0x9E3779B9, 0x0000FFFF, 0xFFFF0000]


def signed(v: int) -> int:
    v &= MASK32
    return v - (1 << 32) if v >= 1 << 31 else v


def as_tensor(values):
    return torch.tensor([signed(v) for v in values], dtype=torch.int32)


def unsigned(t: torch.Tensor):
    return [int(v) & MASK32 for v in t.tolist()]


def test_mix_matches_python_twin():
    rng = random.Random(0)
    xs = EDGES + [rng.getrandbits(32) for _ in range(5000)]
    assert unsigned(mix(as_tensor(xs))) == [mix_int(x) for x in xs]


def test_mix_known_values_and_type_check():
    assert mix_int(0) == 0                       # lowbias32 fixes 0
    assert mix_int(1) != 1 and mix_int(1) != mix_int(2)
    with pytest.raises(TypeError, match="int64"):
        mix(torch.zeros(3, dtype=torch.int64))


def test_mix_is_a_bijection_on_a_sample():
    xs = torch.arange(-(1 << 16), 1 << 16, dtype=torch.int32)
    assert torch.unique(mix(xs)).numel() == xs.numel()


@pytest.mark.parametrize("key", [0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 123456789])
def test_pair_keys_match_python_twin(key):
    rng = random.Random(key)
    pairs = [0, 1, 2, 3, 1 << 20, (1 << 31) - 1] + [rng.randrange(0, 1 << 31) for _ in range(500)]
    got = unsigned(pair_keys(key, torch.tensor(pairs, dtype=torch.int64)))
    assert got == [pair_key_int(key, p) for p in pairs]


def test_element_bits_match_python_twin():
    rng = random.Random(1)
    pkeys = EDGES + [rng.getrandbits(32) for _ in range(40)]
    idx = [0, 1, 2, 1000, (1 << 31) - 1] + [rng.randrange(0, 1 << 24) for _ in range(60)]
    got = element_bits(as_tensor(pkeys).view(-1, 1), torch.tensor(idx).view(1, -1))  # (K, J)
    want = [[element_bits_int(pk, j) for j in idx] for pk in pkeys]
    assert [unsigned(row) for row in got] == want


def test_fold_in_and_name_key_separate_inputs():
    assert fold_in(5, 1) != fold_in(5, 2) != fold_in(6, 1)
    assert fold_in(5, 1, 2) != fold_in(5, 2, 1)
    assert fold_in(5, 1 << 40) != fold_in(5, 0)  # high bits of a 64-bit value count
    names = ["layer0.weight", "layer1.weight", "layer0.bias", "0.weight", "1.weight", "weight"]
    keys = {name_key(0, n) for n in names}
    assert len(keys) == len(names)
    assert name_key(0, "layer0.weight") != name_key(1, "layer0.weight")
    assert name_key(0, "x") != name_key(1 << 32, "x")
    assert all(0 <= k <= MASK32 for k in keys)
    with pytest.raises(TypeError, match="str"):
        name_key("0", "x")


def test_name_key_is_stable_across_processes():
    # a CRC, not the salted builtin hash(): this value must never change between runs
    assert name_key(0, "layer0.weight") == name_key(0, "layer0.weight")
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", "from hyperscalees.noise.keys import name_key;"
                          "print(name_key(7, 'fc.weight'))"], capture_output=True, text=True, check=True)
    assert int(out.stdout) == name_key(7, "fc.weight")


def test_epoch_key_reuse():
    k = name_key(0, "w")
    assert epoch_key(k, 0, 3) == epoch_key(k, 2, 3) != epoch_key(k, 3, 3)
    assert epoch_key(k, 0, 0) == epoch_key(k, 10_000, 0)
    assert epoch_key(k, 0, 1) != epoch_key(k, 1, 1)
