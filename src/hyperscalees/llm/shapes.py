"""Random causal LMs built from configs (nothing loaded, nothing downloaded), with a tokenizer to match.

What ``hyperscalees bench llm-generate`` measures when no pretrained model is at hand (and the
character tokenizer the project's studies under ``bench/`` and the tests build their small models on).

For measuring: ``random_causal_lm("llama", hidden=256, layers=4, vocab=2048)`` is a ~4M-parameter
Llama (nn.Linear) with Hugging Face's own initialisation; ``"gpt2"`` the GPT-2 of the same width
(Conv1D). The tokenizer covers the model's whole vocabulary: special tokens, one token per
character of plain text, then filler tokens ``<t123>``, so every id a random model emits decodes.
"""
from __future__ import annotations

import string

import torch

SPECIAL = ["<pad>", "<s>", "</s>", "<unk>"]
PRINTABLE = sorted(set(string.printable) - set("\t\r\x0b\x0c"))  # printable ASCII, space and newline
CHARS = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 +-*/=()<>.,:;!?'\"\n")
IDS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
ARCHS = ("llama", "gpt2")


def char_tokenizer(chars=PRINTABLE, size: int | None = None):
    """A ``PreTrainedTokenizerFast`` with one token per character of ``chars`` (left padding).

    Ids: ``<pad> <s> </s> <unk>`` (0-3), then the characters in order. ``size`` pads the
    vocabulary with filler tokens ``<t0> <t1> ...`` to exactly that many ids, so that every id a
    model with a larger vocabulary emits still decodes (:func:`random_causal_lm`).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    base = SPECIAL + list(chars)
    if size is not None and size < len(base):
        raise ValueError(f"vocab must be at least {len(base)} (special tokens and characters), got {size}")
    fillers = [] if size is None else [f"<t{i}>" for i in range(size - len(base))]
    vocab = {t: i for i, t in enumerate(base + fillers)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tok.decoder = decoders.Fuse()
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                 unk_token="<unk>")
    hf.padding_side = "left"
    return hf


def tokenizer_for(vocab: int):
    """A character tokenizer with exactly ``vocab`` ids (padded on the left)."""
    return char_tokenizer(CHARS, size=vocab)


def random_causal_lm(arch: str, hidden: int = 256, layers: int = 4, vocab: int = 2048, heads: int = 4,
                     positions: int = 512, seed: int = 0, dtype=torch.float32):
    """``(model, tokenizer)``: a randomly initialised ``arch`` ("llama" | "gpt2") in eval mode.

    Llama: MLP width 8/3·hidden (rounded to 64), ``heads // 2`` key/value heads, untied head;
    GPT-2: MLP width 4·hidden, tied head (its default).
    """
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; choose one of {ARCHS}")
    from .load import _quiet_transformers
    _quiet_transformers()
    torch.manual_seed(seed)
    if arch == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM
        mlp = -(-8 * hidden // 3 // 64) * 64
        model = LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=mlp,
                                             num_hidden_layers=layers, num_attention_heads=heads,
                                             num_key_value_heads=max(1, heads // 2), max_position_embeddings=positions,
                                             tie_word_embeddings=False, **IDS))
    else:
        from transformers import GPT2Config, GPT2LMHeadModel
        model = GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_embd=hidden, n_layer=layers, n_head=heads,
                                           n_positions=positions, **IDS))
    return model.to(dtype).eval(), tokenizer_for(vocab)
