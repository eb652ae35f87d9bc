"""RNN/GRU/LSTM and their cells run a whole population in one forward, member by member exact."""
import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

import hyperscalees as hs
from hyperscalees import ESMode
from members import member_model

P, M, T, IN, H = 4, 2, 5, 3, 4  # members, rows per member, time steps, input and hidden size


def as_tuple(h):
    return h if isinstance(h, tuple) else (h,)


def chunk_state(hx, i, dim=1):
    """Member i's slice of an initial state (a tensor or a tuple), or None."""
    return None if hx is None else tuple(s.chunk(P, dim)[i] for s in as_tuple(hx))


def unpack(hx):
    return None if hx is None else (hx if len(hx) == 2 else hx[0])


def make_state(module, n):
    """Random initial state of torch's shape (layers·directions, n, size)."""
    ld = module.num_layers * (2 if module.bidirectional else 1)
    h = torch.randn(ld, n, module.proj_size or module.hidden_size)
    return (h, torch.randn(ld, n, module.hidden_size)) if isinstance(module, nn.LSTM) else h


CASES = {  # a covering set: every module, both orientations, both directions, with/without a state, 3 strategies
    "rnn_tanh-bidir-seqfirst-h0-r1": (lambda: nn.RNN(IN, H, 2, bidirectional=True), True, hs.EGGROLL, 1),
    "rnn_relu-batchfirst-r2": (lambda: nn.RNN(IN, H, 2, nonlinearity="relu", batch_first=True), False, hs.EGGROLL, 2),
    "gru-bidir-batchfirst-r2": (lambda: nn.GRU(IN, H, 2, bidirectional=True, batch_first=True), False, hs.EGGROLL, 2),
    "gru-seqfirst-h0-openes": (lambda: nn.GRU(IN, H, 2), True, hs.OpenES, 1),
    "gru-bidir-h0-dropout_eval-r1": (lambda: nn.GRU(IN, H, 2, bidirectional=True, dropout=0.5).eval(), True,
                                     hs.EGGROLL, 1),
    "lstm-bidir-seqfirst-h0c0-r1": (lambda: nn.LSTM(IN, H, 2, bidirectional=True), True, hs.EGGROLL, 1),
    "lstm-batchfirst-openes": (lambda: nn.LSTM(IN, H, 2, batch_first=True), False, hs.OpenES, 1),
    "lstm_proj-bidir-batchfirst-h0c0-r2": (lambda: nn.LSTM(IN, H, 2, proj_size=2, bidirectional=True,
                                                           batch_first=True), True, hs.EGGROLL, 2),
    "lstm_proj-seqfirst-openes": (lambda: nn.LSTM(IN, H, 2, proj_size=3), False, hs.OpenES, 1),
    "rnn_tanh-batchfirst-h0-openes": (lambda: nn.RNN(IN, H, 2, batch_first=True), True, hs.OpenES, 1),
    "gru-nobias-fullrank_hh-r2": (lambda: nn.GRU(IN, H, 2, bias=False), False, hs.EGGROLL, 2,
                                  {"es_map": {"weight_hh_*": "full", "weight_ih_l1": "excluded"}}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_population_forward_equals_each_members_stock_module(case):
    make, with_state, cls, rank, *kwargs = CASES[case]
    torch.manual_seed(0)
    model = make()
    es = cls(model, population=P, sigma=0.05, rank=rank, seed=1, **(kwargs[0] if kwargs else {}))
    bd = 0 if model.batch_first else 1  # the batch dimension holds the members
    x = torch.randn(P * M, T, IN) if model.batch_first else torch.randn(T, P * M, IN)
    hx = make_state(model, P * M) if with_state else None
    with es.perturbed():
        y, h = model(x, hx)
    assert es.store().unapplied() == []  # every weight's and bias's noise reached the recurrence
    for i in range(P):
        xi, hi = x.chunk(P, bd)[i], unpack(chunk_state(hx, i))
        ref_y, ref_h = member_model(model, es, i)(xi, hi)
        torch.testing.assert_close(y.chunk(P, bd)[i], ref_y, rtol=1e-5, atol=1e-5)
        for got, want in zip(as_tuple(h), as_tuple(ref_h), strict=True):
            torch.testing.assert_close(got.chunk(P, 1)[i], want, rtol=1e-5, atol=1e-5)
        assert (ref_y - model(xi, hi)[0]).abs().max() > 1e-3  # member i really is perturbed
    assert y.is_contiguous() and y.shape == model(x, hx)[0].shape


CELLS = {
    "gru_cell-r2": (lambda: nn.GRUCell(IN, H), hs.EGGROLL, 2),
    "lstm_cell-r1": (lambda: nn.LSTMCell(IN, H), hs.EGGROLL, 1),
    "rnn_cell_tanh-r2": (lambda: nn.RNNCell(IN, H), hs.EGGROLL, 2),
    "rnn_cell_relu-openes": (lambda: nn.RNNCell(IN, H, nonlinearity="relu"), hs.OpenES, 1),
    "lstm_cell-openes": (lambda: nn.LSTMCell(IN, H), hs.OpenES, 1),
}


def run_loop(cell, xs):
    """The user's own loop over time: hx starts as None, then carries the cell's state."""
    hx, outs = None, []
    for x in xs:
        hx = cell(x, hx)
        outs.append(as_tuple(hx)[0])
    return torch.stack(outs), hx


@pytest.mark.parametrize("case", list(CELLS))
def test_cell_in_a_python_loop_matches_each_member(case):
    make, cls, rank = CELLS[case]
    torch.manual_seed(2)
    cell = make()
    es = cls(cell, population=P, sigma=0.05, rank=rank, seed=3)
    xs = torch.randn(T, P * M, IN)  # (T, N, in), member-major along N
    with es.perturbed():
        ys, hx = run_loop(cell, xs)
    assert es.store().unapplied() == []
    if cls is hs.EGGROLL:
        assert es.store().memo_count > 0  # later steps reuse the step's GEMM plan
    for i in range(P):
        ref_ys, ref_hx = run_loop(member_model(cell, es, i), xs.chunk(P, 1)[i])
        torch.testing.assert_close(ys.chunk(P, 1)[i], ref_ys, rtol=1e-5, atol=1e-5)
        for got, want in zip(as_tuple(hx), as_tuple(ref_hx), strict=True):
            torch.testing.assert_close(got.chunk(P, 0)[i], want, rtol=1e-5, atol=1e-5)


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(IN, H, 2, proj_size=2, bidirectional=True)
        self.cell = nn.GRUCell(IN, H)


def test_matrices_take_lowrank_noise_and_biases_full_rank():
    es = hs.EGGROLL(Policy(), population=P, sigma=0.05)
    low = ["rnn.weight_ih_l0", "rnn.weight_hh_l1_reverse", "rnn.weight_hr_l0", "cell.weight_ih", "cell.weight_hh"]
    full = ["rnn.bias_ih_l0", "rnn.bias_hh_l1_reverse", "cell.bias_ih", "cell.bias_hh"]
    assert [es.specs[n].mode for n in low] == [ESMode.MM_PARAM] * len(low)
    assert [es.specs[n].mode for n in full] == [ESMode.PARAM] * len(full)
    assert len(es.specs) == 2 * 2 * 5 + 4  # layers x directions x (ih, hh, 2 biases, hr) + the cell's four


def test_dropout_between_layers_only_in_train_mode():
    torch.manual_seed(4)
    gru = nn.GRU(IN, H, 2, dropout=0.5)
    es = hs.EGGROLL(gru, population=P, sigma=0.05, rank=1)
    x = torch.randn(T, P * M, IN)
    with es.perturbed():
        torch.manual_seed(0)
        y_train = gru(x)[0]
        torch.manual_seed(0)
        assert torch.equal(gru(x)[0], y_train)  # the mask comes from torch's RNG
        gru.eval()
        y_eval = gru(x)[0]
    assert not torch.allclose(y_train, y_eval, atol=1e-3)


class SumModel(nn.Module):
    """Reads a sequence, predicts its sum from the last hidden state."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(1, 8, batch_first=True)
        self.head = nn.Linear(8, 1)

    def forward(self, x):  # x (N, T, 1)
        return self.head(self.rnn(x)[1][-1]).squeeze(-1)  # (N,)


def test_gru_policy_learns_to_sum_a_sequence():
    torch.manual_seed(5)
    model = SumModel()
    pop, b = 32, 16
    x = torch.rand(b, 4, 1) * 2 - 1
    y = x.sum(dim=(1, 2))

    def mse():
        with torch.no_grad():
            return ((model(x) - y) ** 2).mean().item()

    es = hs.EGGROLL(model, population=pop, sigma=0.05, rank=1, lr=0.05, seed=6)
    before = mse()
    for _ in range(30):
        with es.perturbed():
            pred = model(x.repeat(pop, 1, 1)).view(pop, b)  # member-major: member i gets rows [i*b, (i+1)*b)
        es.tell(-((pred - y) ** 2).mean(dim=1))
    assert mse() < 0.3 * before


def test_inputs_that_cannot_be_member_major_are_refused():
    gru = nn.GRU(IN, H, 2)
    es = hs.EGGROLL(gru, population=P, sigma=0.05)
    x = torch.randn(T, P * M, IN)
    packed = pack_padded_sequence(x, torch.full((P * M,), T))
    cell = nn.LSTMCell(IN, H)
    es_cell = hs.EGGROLL(cell, population=P, sigma=0.05)
    with es.perturbed():
        with pytest.raises(ValueError, match="GRU.*PackedSequence"):
            gru(packed)
        with pytest.raises(ValueError, match="GRU.*unbatched"):
            gru(x[:, 0])
        with pytest.raises(ValueError, match="GRU.*7.*member-major"):
            gru(torch.randn(T, 7, IN))
        with pytest.raises(ValueError, match="h0.*6.*member-major"):
            gru(x, torch.randn(2, 6, H))
        with pytest.raises(ValueError, match=r"h0 must have shape \(2, 8, 4\)"):
            gru(x, torch.randn(2, 12, H))
    with es_cell.perturbed():
        with pytest.raises(ValueError, match="LSTMCell.*unbatched"):
            cell(torch.randn(IN))
        with pytest.raises(ValueError, match="LSTMCell.*member-major"):
            cell(torch.randn(6, IN))
