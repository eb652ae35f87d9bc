"""convert_fitnesses: HyperscaleES's z-score, grouped z-score, episode weights, NaN handling."""
import warnings

import pytest
import torch

from hyperscalees.functional import EGGROLLBSNoiser, EGGROLLNoiser, OpenESNoiser


def noiser(**kw):
    return EGGROLLNoiser.init_noiser({}, 0.1, 0.1, **kw)


def test_global_z_score_numbers():
    frozen, nparams = noiser()
    f = EGGROLLNoiser.convert_fitnesses(frozen, nparams, [1.0, 2.0, 3.0, 6.0])
    # mean 3, population variance (4 + 1 + 0 + 9) / 4 = 3.5
    want = (torch.tensor([1.0, 2.0, 3.0, 6.0]) - 3.0) / (3.5 + 1e-5) ** 0.5
    torch.testing.assert_close(f, want)
    const = OpenESNoiser.convert_fitnesses(*OpenESNoiser.init_noiser({}, 0.1, 0.1), torch.full((4,), 7.0))
    assert torch.equal(const, torch.zeros(4))  # eps inside the sqrt: no division by zero


def test_grouped_subtracts_group_mean_and_divides_by_global_std():
    frozen, nparams = noiser(group_size=2)
    raw = torch.tensor([1.0, 3.0, 10.0, 14.0])
    f = EGGROLLNoiser.convert_fitnesses(frozen, nparams, raw)
    std = (raw.var(unbiased=False) + 1e-5).sqrt()
    torch.testing.assert_close(f, torch.tensor([-1.0, 1.0, -2.0, 2.0]) / std)
    with pytest.raises(ValueError, match="divide"):
        EGGROLLNoiser.convert_fitnesses(frozen, nparams, torch.ones(5))


def test_num_episodes_list_weights_mean_and_variance():
    frozen, nparams = noiser()
    raw = torch.tensor([0.0, 4.0, 8.0, 100.0])
    f = EGGROLLNoiser.convert_fitnesses(frozen, nparams, raw, num_episodes_list=[1, 1, 2, 0])
    # weights 1,1,2 -> mean 5, var (25 + 1 + 2*9) / 4 = 11; the 0-episode thread gets 0
    want = torch.tensor([-5.0, -1.0, 3.0, 0.0]) / (11 + 1e-5) ** 0.5
    want[3] = 0.0
    torch.testing.assert_close(f, want)
    with pytest.raises(ValueError, match="shape"):
        EGGROLLNoiser.convert_fitnesses(frozen, nparams, raw, num_episodes_list=[1, 1])
    with pytest.raises(ValueError, match="group_size"):
        EGGROLLNoiser.convert_fitnesses(*noiser(group_size=2), raw, num_episodes_list=[1, 1, 1, 1])


def test_nonfinite_scores_count_as_the_worst():
    frozen, nparams = noiser()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # sanitize warns once per process
        f = EGGROLLNoiser.convert_fitnesses(frozen, nparams, torch.tensor([1.0, float("nan"), 3.0, float("inf")]))
    want = EGGROLLNoiser.convert_fitnesses(frozen, nparams, torch.tensor([1.0, 1.0, 3.0, 1.0]))
    assert torch.isfinite(f).all()
    torch.testing.assert_close(f, want)


def test_eggrollbs_per_direction_fitness():
    frozen, nparams = EGGROLLBSNoiser.init_noiser({}, 0.1, 0.1, group_size=4)
    raw = torch.tensor([[1.0, 1.0, 3.0, 0.0],      # prompt 0: directions 0..3, 0/1 are baselines
                        [2.0, 2.0, 2.0, 6.0]])     # prompt 1
    f = EGGROLLBSNoiser.convert_fitnesses(frozen, nparams, raw.reshape(-1))
    d0 = torch.tensor([0.0, 0.0, 2.0, -1.0]) / (raw[0].var(unbiased=False) + 1e-5).sqrt()
    d1 = torch.tensor([0.0, 0.0, 0.0, 4.0]) / (raw[1].var(unbiased=False) + 1e-5).sqrt()
    torch.testing.assert_close(f, (d0 + d1) / 2)


def test_bad_fitness_shapes():
    frozen, nparams = noiser()
    with pytest.raises(ValueError, match="1-D"):
        EGGROLLNoiser.convert_fitnesses(frozen, nparams, torch.zeros(2, 2))
    with pytest.raises(ValueError, match="1-D"):
        EGGROLLNoiser.convert_fitnesses(frozen, nparams, torch.zeros(0))
