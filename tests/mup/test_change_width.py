"""change_width: one test per module type and one per ezmup bug (research/deggs_ezmup.md 2.6).

Each test says which naive behaviour it catches. "Naive" means ezmup's scheme: rebuild every
``weight``/``bias`` whose dims are divisible by the marker with ``randn·σ`` and write it back.
"""
import pytest
import torch
from torch import nn
import torch.nn.functional as F

import hyperscalees as hs
from hyperscalees.mup import change_width, compare_widths

torch.set_num_threads(1)
K = 47


def test_linear_shapes_attributes_and_forward():
    # naive: in_features/out_features keep 47·k, so anything reading them (the population layer) breaks
    m = nn.Sequential(nn.Linear(5, 2 * K), nn.ReLU(), nn.Linear(2 * K, 3))
    widths = change_width(m, 64)
    assert m[0].weight.shape == (128, 5) and m[0].out_features == 128
    assert m[2].weight.shape == (3, 128) and m[2].in_features == 128
    assert m(torch.randn(4, 5)).shape == (4, 3)
    assert widths["0.weight"].kind == "input" and widths["2.weight"].kind == "output"
    assert widths["0.bias"].kind == "input"


def test_linear_without_bias():
    # naive: looks up `bias`, finds None and crashes with KeyError (ezmup bug 3)
    m = nn.Sequential(nn.Linear(3, K, bias=False), nn.Linear(K, K, bias=False))
    widths = change_width(m, 20)
    assert m[1].weight.shape == (20, 20) and m[0].bias is None
    assert widths["1.weight"].kind == "hidden"


def test_embedding_width():
    # naive: no init rule for Embedding (ezmup bug 2: NotImplementedError) or embedding_dim left at 47
    m = nn.Embedding(10, 2 * K)
    w0 = m.weight.std().item()
    change_width(m, 300)
    assert m.weight.shape == (10, 600) and m.embedding_dim == 600
    assert m(torch.tensor([1, 2])).shape == (2, 600)
    assert abs(m.weight.std().item() - w0) < 0.1 * w0            # fan-in is 1 row: std unchanged


@pytest.mark.parametrize("norm", [nn.LayerNorm, nn.RMSNorm])
def test_norm_gains_stay_ones_and_shape_updates(norm):
    # naive: the weight gets the bias rule, i.e. initialised to exactly 0 (ezmup bug 1), and
    # normalized_shape stays (47,), so the forward fails
    m = norm(K)
    change_width(m, 96)
    assert torch.equal(m.weight, torch.ones(96)) and m.normalized_shape == (96,)
    if norm is nn.LayerNorm:
        assert torch.equal(m.bias, torch.zeros(96))
    assert m(torch.randn(2, 96)).shape == (2, 96)


def test_norm_without_affine():
    # naive: reads `weight` of LayerNorm(elementwise_affine=False), finds None (ezmup bug 3)
    m = nn.LayerNorm(K, elementwise_affine=False)
    change_width(m, 8)
    assert m.normalized_shape == (8,) and m(torch.randn(3, 8)).shape == (3, 8)


@pytest.mark.parametrize("conv,ndim", [(nn.Conv1d, 1), (nn.Conv2d, 2)])
def test_conv_fans_count_channels_not_kernel(conv, ndim):
    # naive: fan_in = last dim = kernel width (ezmup bug 8: Conv2d(47 -> 94, 3) got fan_in 3)
    m = conv(K, 2 * K, 3)
    std0 = m.weight.std().item()
    widths = change_width(m, 188)                                # 4x the marker width
    assert m.weight.shape == (376, 188) + (3,) * ndim
    assert (m.in_channels, m.out_channels) == (188, 376)
    pw = widths["weight"]
    assert pw.kind == "hidden" and pw.fan_in_mult == 4.0 and pw.fan_out_mult == 4.0
    assert abs(m.weight.std().item() / std0 - 0.5) < 0.03      # std·√(in·k^ndim) held: 1/√4
    assert m(torch.randn(1, 188, *(8,) * ndim)).shape[1] == 376


def test_batchnorm_buffers_are_resized():
    # naive: resizes parameters only; running_mean keeps 47 entries (ezmup bug 6)
    m = nn.Sequential(nn.Conv2d(3, K, 3), nn.BatchNorm2d(K))
    change_width(m, 16)
    assert m[1].running_mean.shape == (16,) and torch.equal(m[1].running_var, torch.ones(16))
    m.train()
    assert m(torch.randn(2, 3, 6, 6)).shape == (2, 16, 4, 4)


class Custom(nn.Module):
    def __init__(self):
        super().__init__()
        self.pos = nn.Parameter(torch.randn(7, K) * 0.02)        # positions (fixed) x width
        self.scale = nn.Parameter(torch.ones(K))
        self.register_buffer("mask", torch.zeros(1, K))
        self.hidden = K                                          # an attribute the forward reads
        self.lin = nn.Linear(K, K)

    def forward(self, x):                                        # x: (B, 7, hidden)
        return self.lin((x + self.pos) * self.scale + self.mask).reshape(-1, 7, self.hidden)


def test_custom_parameters_buffers_and_attributes():
    # naive: custom parameters are re-drawn in a dict but never written back, buffers and the
    # `hidden` attribute stay at 47, so the forward fails (ezmup bug 5)
    m = Custom()
    widths = change_width(m, 10)
    assert m.pos.shape == (7, 10) and m.mask.shape == (1, 10) and m.hidden == 10
    assert torch.equal(m.scale, torch.ones(10))
    assert m(torch.randn(2, 7, 10)).shape == (2, 7, 10)
    assert widths["pos"].kind == "input"                         # positions are fixed: one wide dim


def test_tied_weights_stay_tied():
    # naive: named_parameters skips the second name (KeyError) or installs two tensors (ezmup bug 9)
    emb, head = nn.Embedding(11, K), nn.Linear(K, 11, bias=False)
    head.weight = emb.weight
    m = nn.ModuleDict({"emb": emb, "head": head})
    change_width(m, 32)
    assert m["head"].weight is m["emb"].weight and m["emb"].weight.shape == (11, 32)
    assert m["head"].in_features == 32


def test_bf16_model_keeps_dtype_and_parameter_type():
    # naive: Parameter(fp32).to(bf16) is a plain tensor, and assigning it raises (ezmup bug 7)
    m = nn.Sequential(nn.Linear(4, K), nn.LayerNorm(K)).to(torch.bfloat16)
    change_width(m, 64)
    for p in m.parameters():
        assert isinstance(p, nn.Parameter) and p.dtype == torch.bfloat16
    assert m(torch.randn(2, 4, dtype=torch.bfloat16)).dtype == torch.bfloat16


def test_width_below_the_marker():
    # naive: a bias's fan-in is 47·k·(w // 47) = 0 for w < 47 and init divides by it (ezmup bug 4)
    m = nn.Sequential(nn.Linear(3, K), nn.Tanh(), nn.Linear(K, K), nn.Linear(K, 2))
    widths = change_width(m, 1, base_width=64)
    assert m[2].weight.shape == (1, 1) and torch.isfinite(m[2].weight).all()
    assert widths["2.weight"].fan_in_mult == 1 / 64
    assert m(torch.randn(5, 3)).shape == (5, 2)


def test_fixed_dimension_divisible_by_marker_is_refused():
    # naive: every multiple of 47 is a width, so a vocabulary of 94 silently becomes 2w (ezmup bug 10)
    m = nn.Sequential(nn.Embedding(2 * K, K))
    with pytest.raises(ValueError, match=r"0\.weight: dim 0 \(size 94\)"):
        change_width(m, 64)
    lin = nn.Linear(K, 3 * K)                                    # user says: the output dim is fixed
    with pytest.raises(ValueError, match=r"weight: dim 0 \(size 141\)"):
        change_width(lin, 64, fixed={"weight": (0,)})


def test_repeated_calls_start_from_the_marker_model():
    # naive: the second call reads the resized shapes, where 64 is no multiple of 47, so nothing
    # changes (or 47·k·(w // 47) compounds); frozen parameters also become trainable
    m = nn.Sequential(nn.Linear(3, 2 * K), nn.Linear(2 * K, 2))
    m[1].bias.requires_grad_(False)
    change_width(m, 64)
    change_width(m, 100)
    assert m[0].weight.shape == (200, 3) and m[1].in_features == 200
    assert not m[1].bias.requires_grad


def test_nonconstant_buffer_needs_its_own_rebuild():
    # naive: draws a rotary table as random noise, or leaves it at 47
    m = nn.Linear(K, K)
    m.register_buffer("freq", torch.arange(K, dtype=torch.float32))
    with pytest.raises(ValueError, match="buffer freq"):
        change_width(m, 8)
    m = nn.Linear(K, K)
    m.register_buffer("freq", torch.arange(K, dtype=torch.float32))
    change_width(m, 8, init={"freq": lambda shape: torch.arange(shape[0], dtype=torch.float32)})
    assert torch.equal(m.freq, torch.arange(8.0))


class Attention(nn.Module):
    """Heads of a marked size: num_heads fixed, head_dim = 47 grows."""

    def __init__(self):
        super().__init__()
        self.num_heads, self.head_dim = 2, K
        self.hidden_size = 2 * K
        self.qkv, self.out = nn.Linear(2 * K, 6 * K), nn.Linear(2 * K, 2 * K)
        self.attn_scale = None

    def forward(self, x):                                        # x: (B, T, hidden)
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, scale=self.attn_scale)
        return self.out(a.transpose(1, 2).reshape(b, t, self.hidden_size))


def test_attention_attributes():
    # naive: head_dim and hidden_size stay 47 and 94, so the view fails; MultiheadAttention's
    # embed_dim/head_dim likewise
    m = Attention()
    change_width(m, 16)
    assert (m.num_heads, m.head_dim, m.hidden_size) == (2, 16, 32)
    assert m(torch.randn(1, 3, 32)).shape == (1, 3, 32)
    mha = nn.MultiheadAttention(2 * K, 2, batch_first=True)
    change_width(mha, 16)
    assert (mha.embed_dim, mha.head_dim, mha.in_proj_weight.shape) == (32, 16, (96, 32))
    assert mha(*(torch.randn(1, 3, 32),) * 3)[0].shape == (1, 3, 32)


def test_compare_widths_for_constructor_models():
    # the constructor path: widths are the dims that differ between the two builds
    from hyperscalees.models import TinyLM
    widths = compare_widths(TinyLM(13, 64, 1, 8), TinyLM(13, 256, 1, 8))
    assert widths["head.weight"].kind == "output" and widths["head.weight"].fan_in_mult == 4
    assert widths["blocks.0.fc2.weight"].kind == "hidden" and widths["blocks.0.fc2.weight"].fan_in_mult == 4
    assert widths["tok.weight"].kind == "input" and widths["head.bias"].kind == "fixed"


@pytest.mark.parametrize("cls", [hs.EGGROLL, hs.OpenES])
def test_population_forward_equals_materialized_members_after_change_width(cls):
    # naive: in_features/normalized_shape stale -> the population layers read the wrong sizes
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 2 * K), nn.Tanh(), nn.LayerNorm(2 * K), nn.Linear(2 * K, K, bias=False),
                      nn.Linear(K, 2))
    change_width(m, 12)
    P, B = 8, 4
    es = cls(m, population=P, sigma=0.1, rank=2, seed=3)
    x = torch.randn(B, 3)
    with es.perturbed():
        rows = m(x.repeat(P, 1)).view(P, B, 2)
    for i in range(P):
        with es.materialized(i):
            torch.testing.assert_close(rows[i], m(x), rtol=1e-5, atol=1e-5)
