"""Tiny random causal LMs (Llama, GPT-2, RWKV-7) and a character tokenizer, saved to a folder.

Weights are drawn wider than Hugging Face's init (std 0.3) so that next-token logits have
clear winners: greedy decoding then does not hinge on the last bits of a near tie, and
two arithmetic paths of the same maths (batched low-rank vs materialised member) agree.
"""
from __future__ import annotations

from pathlib import Path

import torch

from hyperscalees.llm import shapes

CHARS = list("abcdefghijklmnopqrstuvwxyz0123456789 +-*/=()<>.,:!?'\n")


def char_tokenizer():
    """The library's character tokenizer over this smaller alphabet (56 ids)."""
    return shapes.char_tokenizer(CHARS)


VOCAB = len(shapes.SPECIAL) + len(CHARS)
IDS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)


def build(kind: str, seed: int = 0, std: float = 0.3, dtype=torch.float32):
    torch.manual_seed(seed)
    if kind == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM
        model = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                             max_position_embeddings=128, tie_word_embeddings=False, **IDS))
    elif kind == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel
        model = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=128, **IDS))
    elif kind == "rwkv7":
        from rwkv7_hf import RWKV7Config, RWKV7ForCausalLM
        model = RWKV7ForCausalLM(RWKV7Config(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, head_dim=16,
                                             **IDS))
    else:
        raise ValueError(kind)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, std)
    return model.to(dtype).eval()


def save(kind: str, folder: Path, seed: int = 0, dtype=torch.float32) -> Path:
    folder = Path(folder)
    build(kind, seed, dtype=dtype).save_pretrained(folder)
    char_tokenizer().save_pretrained(folder)
    return folder
