"""``float-gru``: the float reference for the integer byte models, laid out like EGG.

Dimensions: B streams, T tokens, D width, L layers, V vocabulary.

Embedding(V → D) → L × [LayerNorm → GRU → residual → LayerNorm → MLP (D → m·D → D, GELU)
→ residual] → LayerNorm → head (D → V). With the default MLP ratio m = 3 a layer holds
12·D² + 14·D parameters, against EGG's 12·D² + 4·D (minGRU's four D×D matrices + a 4× MLP),
and embedding + head 514·D + 256 against 513·D: the two counts agree within ~1 % at the same
(D, L), so a curve of one against the other compares like with like. It is an ordinary
float model: trained by backprop (Adam) as the reference point, and by ES through the
population layers of ``nn.Embedding``/``nn.GRU``/``nn.Linear``/``nn.LayerNorm``.

``ntt="wht"|"fermat"``: adds causal transform features of the token window to the embedding
(``ntt_embedding.py``; the opt-in d-eggs NTT mode).

State: (B, L, D) float32, the last hidden state of every layer, carried to the next window.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .lm import AbstractLM
from .ntt_embedding import NTTEmbedding


class GRUBlock(nn.Module):
    """Pre-norm GRU mixing then a pre-norm MLP, both residual."""

    def __init__(self, d: int, mlp_ratio: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.gru = nn.GRU(d, d, batch_first=True)
        self.fc1, self.fc2 = nn.Linear(d, mlp_ratio * d), nn.Linear(mlp_ratio * d, d)

    def forward(self, x: Tensor, h: Tensor) -> tuple[Tensor, Tensor]:
        y, h = self.gru(self.ln1(x), h)                 # (B, T, D), (1, B, D)
        x = x + y
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)))), h


class FloatGRU(AbstractLM):
    """Float32 GRU byte/token LM of EGG's shape (see module docstring)."""

    def __init__(self, vocab_size: int = 256, hidden: int = 64, layers: int = 2, mlp_ratio: int = 3,
                 ntt: str = "none", **_ignored):
        super().__init__(vocab_size)
        if hidden < 1 or layers < 1 or mlp_ratio < 1:
            raise ValueError(f"hidden, layers and mlp_ratio must be >= 1, got {hidden}, {layers}, {mlp_ratio}")
        self.hidden, self.layers = hidden, layers
        self.embed = nn.Embedding(vocab_size, hidden)
        self.ntt = NTTEmbedding(ntt, hidden) if ntt != "none" else None
        self.blocks = nn.ModuleList(GRUBlock(hidden, mlp_ratio) for _ in range(layers))
        self.ln_out = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab_size)

    def forward(self, tokens: Tensor, state=None) -> tuple[Tensor, Tensor]:
        b = tokens.shape[0]
        if state is None:
            state = torch.zeros(b, self.layers, self.hidden, device=tokens.device)
        x = self.embed(tokens)                           # (B, T, D)
        if self.ntt is not None:
            x = x + self.ntt(tokens)
        out = []
        for i, block in enumerate(self.blocks):
            x, h = block(x, state[:, i].unsqueeze(0).contiguous())
            out.append(h.squeeze(0))
        return self.head(self.ln_out(x)).float(), torch.stack(out, dim=1)   # (B, T, V), (B, L, D)
