"""Integer transforms are exact (inverse recovers the input) and the window features are causal."""
import pytest
import torch

from hyperscalees.models.ntt_embedding import NTTEmbedding
from hyperscalees.ops.ntt import (FERMAT_PRIME, causal_transform, causal_windows, hadamard_matrix, inverse_ntt,
                                  inverse_wht, ntt, wht)


@pytest.mark.parametrize("n", [1, 2, 8, 64, 256])
def test_inverse_recovers_the_input_exactly(n):
    g = torch.Generator().manual_seed(n)
    x = torch.randint(-(2 ** 20), 2 ** 20, (5, n), generator=g)
    assert torch.equal(inverse_wht(wht(x)), x)
    t = torch.randint(0, 8192, (5, n), generator=g)        # token ids < p
    assert torch.equal(inverse_ntt(ntt(t)), t)


def test_transforms_match_their_definitions():
    x = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6])
    n, p = 8, FERMAT_PRIME
    ref_wht = [sum(int(x[j]) * (-1) ** bin(j & k).count("1") for j in range(n)) for k in range(n)]
    assert wht(x).tolist() == ref_wht
    w = pow(3, (p - 1) // n, p)
    assert pow(w, n, p) == 1 and pow(w, n // 2, p) != 1          # a primitive n-th root of unity
    ref_ntt = [sum(int(x[j]) * pow(w, j * k, p) for j in range(n)) % p for k in range(n)]
    assert ntt(x).tolist() == ref_ntt
    h = hadamard_matrix(16)
    assert torch.equal(h @ h, 16 * torch.eye(16, dtype=torch.long))


def test_bad_lengths_are_refused():
    with pytest.raises(ValueError, match="power of two"):
        wht(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="unknown transform"):
        causal_transform(torch.zeros(1, 4, dtype=torch.long), "fft", 4)


@pytest.mark.parametrize("mode", ["wht", "fermat"])
def test_features_at_t_do_not_depend_on_later_tokens(mode):
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 256, (3, 40), generator=g)
    emb = NTTEmbedding(mode, dim=8, length=16, coefficients=4)
    base = emb(tokens)
    for t in (0, 7, 20, 38):
        changed = tokens.clone()
        changed[:, t + 1:] = torch.randint(0, 256, changed[:, t + 1:].shape, generator=g)
        other = emb(changed)
        assert torch.equal(other[:, :t + 1], base[:, :t + 1])          # nothing at or before t moves
        assert not torch.equal(other[:, t + 1:], base[:, t + 1:])      # later positions do see the change
    w = causal_windows(tokens, 4)
    assert w.shape == (3, 40, 4) and torch.equal(w[:, 10], tokens[:, 7:11]) and (w[:, 0, :3] == 0).all()
