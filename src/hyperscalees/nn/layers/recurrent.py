"""``nn.RNN`` / ``nn.GRU`` / ``nn.LSTM`` and their cells: the recurrence re-run with population matmuls.

torch's fused recurrent kernels take one weight set, and vmap has no batching rule for
them, so the recurrence is written out here with torch's own equations and gate order.
Every matmul goes through :func:`population_linear`: the input projection once for all
time steps (the inputs are known up front), the hidden projection once per step. From
the second step on that call reuses the step's GEMM plan, so a long sequence pays for
its noise once. The input-to-hidden, hidden-to-hidden and LSTM projection matrices take
low-rank noise; biases are full-rank vectors.

Dimensions: P members, N = P·M batch rows (member-major), T time steps, H hidden size,
H_out = proj_size or H, G gates (1 RNN, 3 GRU, 4 LSTM), L layers, D directions.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence

from .base import AbstractLayer, PopulationContext
from .matmul import population_linear

State = tuple[Tensor, ...]  # (h,) for RNN/GRU, (h, c) for LSTM; each (N, ·)


# -- gate maths: (gi, gh, state) -> state; gi/gh are the (N, G·H) input/hidden projections with biases --
def rnn_tanh_gates(gi: Tensor, gh: Tensor, state: State) -> State:
    return (torch.tanh(gi + gh),)


def rnn_relu_gates(gi: Tensor, gh: Tensor, state: State) -> State:
    return (torch.relu(gi + gh),)


def gru_gates(gi: Tensor, gh: Tensor, state: State) -> State:
    """Gates (r, z, n); r multiplies the hidden projection *with* its bias, as torch does."""
    i_r, i_z, i_n = gi.chunk(3, -1)
    h_r, h_z, h_n = gh.chunk(3, -1)
    r = torch.sigmoid(i_r + h_r)
    z = torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + r * h_n)
    return ((1 - z) * n + z * state[0],)


def lstm_gates(gi: Tensor, gh: Tensor, state: State) -> State:
    """Gates (i, f, g, o); returns the unprojected h' and c'."""
    i, f, g, o = (gi + gh).chunk(4, -1)
    c = torch.sigmoid(f) * state[1] + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


GATES = {"RNN_TANH": rnn_tanh_gates, "RNN_RELU": rnn_relu_gates, "GRU": gru_gates, "LSTM": lstm_gates}


def cell_mode(module: nn.Module) -> str:
    """The key of ``module``'s gate maths in :data:`GATES` (nn.RNN names it ``mode``, cells do not)."""
    if isinstance(module, nn.RNNBase):
        return module.mode
    if isinstance(module, nn.RNNCell):
        return "RNN_" + module.nonlinearity.upper()
    return "LSTM" if isinstance(module, nn.LSTMCell) else "GRU"


# -- one step, shared by the stacked modules and the cells ------------------------------------------------
def _affine(ctx: PopulationContext, module: nn.Module, active: dict, kind: str, sfx: str, x: Tensor,
            what: str) -> Tensor:
    """x (N, ..., in) -> (N, ..., out) through ``weight_{kind}{sfx}`` and its bias (if any), every member's own."""
    w, b = f"weight_{kind}{sfx}", f"bias_{kind}{sfx}"
    return population_linear(ctx, x, getattr(module, w), active.get(w), getattr(module, b, None), active.get(b),
                             "out_in", what=what)


def cell_step(ctx: PopulationContext, module: nn.Module, active: dict, sfx: str, gi: Tensor, state: State,
              what: str) -> State:
    """One time step from the precomputed input projection gi (N, G·H): hidden projection, gates, LSTM proj."""
    gh = _affine(ctx, module, active, "hh", sfx, state[0], what)  # (N, G·H)
    state = GATES[cell_mode(module)](gi, gh, state)
    if getattr(module, "proj_size", 0) > 0:  # h' <- W_hr h' (no bias), before it is fed back
        state = (_affine(ctx, module, active, "hr", sfx, state[0], what), state[1])
    return state


# -- the stacked, possibly bidirectional modules -----------------------------------------------------------
def _suffix(layer: int, direction: int) -> str:
    return f"_l{layer}" + ("_reverse" if direction else "")


def _param_names(module: nn.RNNBase) -> list[str]:
    """Every parameter the module's configuration creates (torch names them per layer and direction)."""
    kinds = ["ih", "hh"]
    names = []
    for layer in range(module.num_layers):
        for d in range(2 if module.bidirectional else 1):
            sfx = _suffix(layer, d)
            names += [f"weight_{k}{sfx}" for k in kinds]
            names += [f"bias_{k}{sfx}" for k in kinds] if module.bias else []
            names += [f"weight_hr{sfx}"] if module.proj_size > 0 else []
    return names


def _direction(ctx, module, active, sfx: str, x: Tensor, state: State, reverse: bool, what: str):
    """One layer, one direction over x (N, T, in) -> (outputs (N, T, H_out), final state)."""
    gi = _affine(ctx, module, active, "ih", sfx, x, what)  # (N, T, G·H): all steps in one GEMM
    steps = range(x.shape[1] - 1, -1, -1) if reverse else range(x.shape[1])
    outs = [None] * x.shape[1]
    for t in steps:
        state = cell_step(ctx, module, active, sfx, gi[:, t], state, what)
        outs[t] = state[0]
    return torch.stack(outs, dim=1), state


def _check_state(t: Tensor, shape: tuple, ctx: PopulationContext, what: str, name: str) -> Tensor:
    ctx.check_rows(t, f"{what} {name}", dim=1)
    if tuple(t.shape) != shape:
        raise ValueError(f"{what}: {name} must have shape {shape} (layers·directions, batch, size), "
                         f"got {tuple(t.shape)}")
    return t


def _initial_states(ctx, module: nn.RNNBase, hx, x: Tensor, what: str) -> list[State]:
    """Per (layer, direction) index j = layer·D + d, its (h0[j],) or (h0[j], c0[j]); zeros if hx is None."""
    ld, n = module.num_layers * (2 if module.bidirectional else 1), x.shape[0]
    h_out = module.proj_size or module.hidden_size
    shapes = [(ld, n, h_out)] + ([(ld, n, module.hidden_size)] if module.mode == "LSTM" else [])
    if hx is None:
        parts = [x.new_zeros(s) for s in shapes]
    else:
        parts = list(hx) if isinstance(hx, (tuple, list)) else [hx]
        if len(parts) != len(shapes):
            raise ValueError(f"{what}: expected {len(shapes)} initial state tensor(s), got {len(parts)}")
        parts = [_check_state(p, s, ctx, what, nm) for p, s, nm in zip(parts, shapes, ("h0", "c0"))]
    return [tuple(p[j] for p in parts) for j in range(ld)]


def _check_input(ctx: PopulationContext, module: nn.RNNBase, x, what: str) -> Tensor:
    if isinstance(x, PackedSequence):
        raise ValueError(f"{what}: PackedSequence input cannot be split into members (its batch is re-sorted "
                         "by length); pass a padded (batch, seq, feature) tensor, member-major along batch")
    if x.dim() != 3:
        raise ValueError(f"{what}: got a {x.dim()}-D input; unbatched input has no batch dimension to hold "
                         "members -- pass (seq, batch, feature) or (batch, seq, feature) with batch_first")
    ctx.check_rows(x, what, dim=0 if module.batch_first else 1)
    if x.shape[-1] != module.input_size:
        raise ValueError(f"{what}: input has {x.shape[-1]} features, expected input_size={module.input_size}")
    return x if module.batch_first else x.transpose(0, 1)  # (N, T, in)


def run_recurrent(ctx: PopulationContext, module: nn.RNNBase, active: dict, input, hx=None):
    """torch's ``(output, h_n)`` / ``(output, (h_n, c_n))`` for every member at once."""
    what = type(module).__name__
    x = _check_input(ctx, module, input, what)  # (N, T, in)
    states = _initial_states(ctx, module, hx, x, what)
    dirs = 2 if module.bidirectional else 1
    finals = []
    for layer in range(module.num_layers):
        if layer and module.training and module.dropout > 0:  # between layers only, as torch
            x = F.dropout(x, module.dropout, training=True)
        outs = []
        for d in range(dirs):
            out, state = _direction(ctx, module, active, _suffix(layer, d), x, states[layer * dirs + d], d == 1,
                                    what)
            outs.append(out)
            finals.append(state)
        x = torch.cat(outs, dim=-1)  # (N, T, D·H_out)
    output = x if module.batch_first else x.transpose(0, 1)
    h_n = torch.stack([s[0] for s in finals])  # (L·D, N, H_out)
    if module.mode != "LSTM":
        return output.contiguous(), h_n
    return output.contiguous(), (h_n, torch.stack([s[1] for s in finals]))  # c_n (L·D, N, H)


class RecurrentLayer(AbstractLayer):
    """``nn.RNN`` (tanh/relu), ``nn.GRU``, ``nn.LSTM`` (with ``proj_size``): padded, batched input only."""

    def params(self, module):
        return _param_names(module)

    def lowrank(self, module):
        return {n: "out_in" for n in _param_names(module) if n.startswith("weight_")}

    def forward(self, ctx: PopulationContext, module: nn.RNNBase, active: dict[str, str]):
        def forward(input, hx=None):
            return run_recurrent(ctx, module, active, input, hx)
        return forward


# -- cells: one step per call, the user's loop over time ---------------------------------------------------
def run_cell(ctx: PopulationContext, module: nn.RNNCellBase, active: dict, input: Tensor, hx=None):
    """torch's ``h'`` / ``(h', c')`` of one step for every member; input (N, in), states (N, H)."""
    what = type(module).__name__
    if input.dim() != 2:
        raise ValueError(f"{what}: got a {input.dim()}-D input; unbatched input has no batch dimension to "
                         "hold members -- pass (batch, feature), member-major along batch")
    ctx.check_rows(input, what)
    lstm = isinstance(module, nn.LSTMCell)
    if hx is None:
        zeros = input.new_zeros(input.shape[0], module.hidden_size)
        state = (zeros, zeros) if lstm else (zeros,)
    else:
        if lstm != isinstance(hx, (tuple, list)):
            raise ValueError(f"{what}: hx must be {'a tuple (h, c)' if lstm else 'one tensor'}")
        state = tuple(hx) if lstm else (hx,)
        for s in state:
            ctx.check_rows(s, f"{what} hidden state")
    gi = _affine(ctx, module, active, "ih", "", input, what)  # (N, G·H)
    state = cell_step(ctx, module, active, "", gi, state, what)
    return state if lstm else state[0]


class CellLayer(AbstractLayer):
    """``nn.RNNCell``, ``nn.GRUCell``, ``nn.LSTMCell``."""

    def params(self, module):
        return ("weight_ih", "weight_hh", "bias_ih", "bias_hh")

    def lowrank(self, module):
        return {"weight_ih": "out_in", "weight_hh": "out_in"}

    def forward(self, ctx: PopulationContext, module: nn.RNNCellBase, active: dict[str, str]):
        def forward(input, hx=None):
            return run_cell(ctx, module, active, input, hx)
        return forward
