"""Question: how fast is the integer population forward against the float forward of the same shapes?

For each integer model (``egg``, ``int8-transformer``) a float twin has the same matmul shapes
and the same loop structure (float GRU gates / softmax attention, RMSNorm/LayerNorm, Linear
layers, Gaussian low-rank noise); both run a whole population in one perturbed forward
(``es.perturbed()``), and both run unperturbed. Reported: tokens/s (members x streams x tokens
per second) of all four, side by side in one process, round-robin repeats, median.

On a CPU the integer path pays for exactness: int8 x int8 products summed in float32
(``ops.int8``), the per-member low-rank term in float64, integer floor divisions, clamps and
table lookups as separate passes. On CUDA the base GEMM is ``torch._int_mm`` (not measured here).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..models.egg import Egg
from ..models.int8_transformer import Int8Transformer
from ..nn.module_es import EGGROLL
from .base import Report, environment, side_by_side

QUESTION = "integer population forward vs the float forward of the same shapes (tokens/s)"
COLUMNS = ["model", "dim", "layers", "members", "tokens", "int_pop_tok_s", "float_pop_tok_s", "int_over_float_pop",
           "int_infer_tok_s", "float_infer_tok_s", "int_over_float_infer"]


class FloatEggBlock(nn.Module):
    """EGG's layer in float: the same four D x D matrices, MLP and norms; sigmoid/tanh GRU."""

    def __init__(self, d: int, ratio: int = 4):
        super().__init__()
        self.norm1, self.norm2 = nn.RMSNorm(d), nn.RMSNorm(d)
        self.wf, self.wh = nn.Linear(d, d), nn.Linear(d, d)
        self.uf, self.uh = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.up, self.down = nn.Linear(d, ratio * d, bias=False), nn.Linear(ratio * d, d, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        xn = self.norm1(x)
        fx, hx = self.wf(xn), self.wh(xn)
        s = x.new_zeros(x.shape[0], x.shape[2])
        outs = []
        for t in range(x.shape[1]):
            f = torch.sigmoid(fx[:, t] + self.uf(s))
            h = torch.tanh(hx[:, t] + self.uh(f * s))
            s = s + f * (h - s)
            outs.append(s)
        x = x + torch.stack(outs, dim=1)
        return x + self.down(self.up(self.norm2(x)))


class FloatEgg(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(FloatEggBlock(d) for _ in range(layers))
        self.norm_out, self.head = nn.RMSNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens)
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm_out(x))


class FloatTransformerBlock(nn.Module):
    """The int8 transformer's layer in float: q, k, v, o, up, down of the same shapes; SDPA."""

    def __init__(self, d: int, heads: int, ratio: int = 4):
        super().__init__()
        self.heads = heads
        self.norm, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.up, self.down = nn.Linear(d, ratio * d), nn.Linear(ratio * d, d)

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        h = self.norm(x)
        split = lambda z: z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        a = F.scaled_dot_product_attention(split(self.q(h)), split(self.k(h)), split(self.v(h)), is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class FloatTransformer(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(FloatTransformerBlock(d, heads) for _ in range(layers))
        self.norm_out, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens)
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm_out(x))


def configs(quick: bool) -> list[dict]:
    if quick:
        return [dict(model="egg", dim=16, layers=1, members=4, tokens=4, repeats=2),
                dict(model="int8-transformer", dim=16, layers=1, members=4, tokens=4, repeats=2)]
    return [dict(model="egg", dim=128, layers=2, members=256, tokens=32, repeats=5),
            dict(model="egg", dim=256, layers=2, members=128, tokens=32, repeats=5),
            dict(model="int8-transformer", dim=128, layers=2, members=128, tokens=64, repeats=5),
            dict(model="int8-transformer", dim=256, layers=2, members=64, tokens=64, repeats=5)]


def _pair(cfg: dict, device):
    torch.manual_seed(0)
    d, layers = cfg["dim"], cfg["layers"]
    if cfg["model"] == "egg":
        return Egg(dim=d, layers=layers).to(device), FloatEgg(256, d, layers).to(device)
    heads = max(1, d // 64)
    return (Int8Transformer(dim=d, layers=layers, heads=heads).to(device),
            FloatTransformer(256, d, layers, heads).to(device))


def run(quick: bool = False, device: str = "cpu", log=print) -> Report:
    rep = Report("int8", QUESTION, COLUMNS)
    for cfg in configs(quick):
        int_model, float_model = _pair(cfg, device)
        p = cfg["members"]
        int_es = EGGROLL(int_model, population=p, groups=int_model.es_groups(), **int_model.es_defaults)
        float_es = EGGROLL(float_model, population=p, sigma=0.01, rank=1)
        tokens = torch.randint(1, 256, (p, cfg["tokens"]), generator=torch.Generator().manual_seed(1)).to(device)

        def pop(es, model):
            def call():
                with es.perturbed():
                    model(tokens)
            return call

        def infer(model):
            def call():
                with torch.no_grad():
                    model(tokens)
            return call

        t = side_by_side({"int_pop": pop(int_es, int_model), "float_pop": pop(float_es, float_model),
                          "int_infer": infer(int_model), "float_infer": infer(float_model)},
                         warmup=1, repeats=cfg["repeats"], device=device)
        n = p * cfg["tokens"]
        tok_s = {k: n / v.median for k, v in t.items()}
        rep.rows.append([cfg["model"], cfg["dim"], cfg["layers"], p, cfg["tokens"], tok_s["int_pop"],
                         tok_s["float_pop"], tok_s["int_pop"] / tok_s["float_pop"], tok_s["int_infer"],
                         tok_s["float_infer"], tok_s["int_infer"] / tok_s["float_infer"]])
        log(f"  {cfg['model']} d={cfg['dim']}: int/float population forward = "
            f"{tok_s['int_pop'] / tok_s['float_pop']:.2f}")
    rep.summary = {"device": device, "environment": environment()}
    rep.notes += ["tok_s = members x tokens / median seconds of one forward (one stream per member)",
                  "int_over_float_*: > 1 means the integer path is faster",
                  "int models: es_defaults noise (integer, power-of-two scale); float twins: Gaussian, σ 0.01, rank 1"]
    return rep
