"""A step whose antithetic pairs all tie moves nothing; with ``tie_sigma_growth`` the next step widens σ."""
import pytest
import torch
from torch import nn

import hyperscalees as hs


def quantized_case(growth, seed=0):
    """Fitness in steps of 1 of a weight sum near 0.5: a small σ never leaves the step, so every pair ties."""
    torch.manual_seed(seed)
    model = nn.Linear(8, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(0.5 / 8)
    es = hs.EGGROLL(model, population=16, sigma=1e-3, rank=1, lr=0.05, optimizer="sgd", seed=seed,
                    tie_sigma_growth=growth)
    x = torch.ones(16, 8)

    def fitness():
        with es.perturbed():
            return torch.floor(model(x).view(16) * 1.0)              # (P,) members' weight sums, floored
    return model, es, fitness


def test_all_tied_pairs_widen_the_next_sigma_and_a_varied_step_resets_it():
    model, es, _ = quantized_case(4.0)
    sigma = es.ask().sigma
    es.tell(torch.zeros(16))                                          # every pair ties
    assert es.ask().sigma == 4.0 * sigma
    es.tell(torch.ones(16))
    assert es.ask().sigma == 16.0 * sigma                             # compounds while ties last
    es.tell(torch.arange(16.0))                                       # twins differ: back to σ
    assert es.ask().sigma == sigma
    tied_within_pairs = torch.arange(8.0).repeat_interleave(2)        # pairs differ, twins tie: still no update
    es.tell(tied_within_pairs)
    assert es.ask().sigma == 4.0 * sigma


def test_off_by_default_and_ties_then_stop_the_run():
    model, es, fitness = quantized_case(1.0)
    before = model.weight.clone()
    for _ in range(20):
        es.tell(fitness())
    assert es.ask().sigma == 1e-3 and torch.equal(model.weight, before)   # stuck: σ·ε never crosses a step


def test_widening_escapes_the_tie_and_is_deterministic_and_resumable():
    def train(steps, es_state=None):
        model, es, fitness = quantized_case(4.0)
        if es_state is not None:
            model.load_state_dict(es_state[0])
            es.load_state_dict(es_state[1])
        for _ in range(steps):
            es.tell(fitness())
        return model, es
    model, es = train(12)
    assert not torch.equal(model.weight, torch.full_like(model.weight, 0.5 / 8))   # it moved
    again, _ = train(12)
    assert torch.equal(again.weight, model.weight)                                  # same seed, same bits
    half_model, half_es = train(2)
    assert half_es.strategy.tie_scale > 1                                          # mid-widening
    resumed, _ = train(10, ({k: v.clone() for k, v in half_model.state_dict().items()}, half_es.state_dict()))
    assert torch.equal(resumed.weight, model.weight)


def test_growth_below_one_is_refused():
    with pytest.raises(ValueError, match="tie_sigma_growth"):
        hs.EGGROLL(nn.Linear(2, 2), population=4, tie_sigma_growth=0.5)
