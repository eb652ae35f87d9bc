"""The lm task's options (``LMOptions``), the model sizes they choose, and the ES settings each
model starts from: what a run of the task is configured by, apart from the task itself."""
from __future__ import annotations

import inspect
import os
from dataclasses import dataclass

from ...models.registry import LM_MODELS
from ..base import check_options, option
from .sampling import check_sampling


NTT_CHOICES = ("none", "wht", "fermat")
INITS = ("random", "bigram")
BIGRAM_MODELS = ("egg", "int8-transformer")  # models whose token -> logits path init_from_bigram knows
# A bigram start's embedding and head hold the bigram: at the blocks' lr ES undid it (4-minute probes from
# the rank-64 start at 3.639 test bpb: 3.66-3.67 after 340 steps at lr 1.0 or 0.25 for every weight; with
# these at 0.08x the lr, σ 2^-9 and 256 members it went down instead, bench/egg_bigram.py).
# Per model: the int8 transformer's head is its embedding (tied); its init MLP holds the bigram's asymmetry.
BIGRAM_PARAMS = {"egg": ("embed.weight", "head.weight"),
                 "int8-transformer": ("embed.weight", "init_mlp.up.weight", "init_mlp.down.weight")}
BIGRAM_LR_SCALE = 0.08
# Per model, on top of its own es_defaults. egg: threshold SGD (acc += lr·z, ±1 steps) on centered
# ranks, lr 1.0 decaying 0.9998 per step (0.03 after 17,000 steps, about 20 CPU minutes).
# - Threshold SGD averages each weight's votes over a few steps instead of moving it on every
#   near-random vote, as the z-test does early on.
# - Centered ranks keep the size of each pair's difference, which pair signs throw away: at equal
#   steps they moved a third as many weights (4% vs 16% at lr 0.5) and learnt faster (4.03 vs 4.13
#   bits/byte at step 2,500).
# - The decay: a lower lr late was worth 0.03-0.07 bits/byte at equal steps (0.99985 vs 0.9999).
# - A step reads many streams (diverse bytes) with few members: 64 pairs x 16 streams beat 512 pairs
#   x 1 stream at equal cost; 32 pairs per step lost at equal time.
# Probes: bench/results/cpu/lm_runs.txt.
TASK_ES_DEFAULTS = {"egg": {"population": 128, "update_rule": "int_sgd", "shaping": "centered_rank", "lr": 1.0,
                            "lr_decay": 0.9998},
                    "int8-transformer": {"population": 64}}
# The egg's default start: width 64 from the train split's bigram (a random start at width 32 ended 20 CPU
# minutes above the bigram, 3.763 test bpb against 3.636), and the ES settings that then moved it down:
# σ 2^-9 (the blocks start neutral, a smaller probe keeps the bigram intact), 256 members, lr 0.25
# (bench/results/cpu/lm_egg_levers_2026-11-27.txt; checked on validation at seed 50:
# lm_egg_default_2026-11-27.txt). --init random brings back the random start's width and settings above.
# The int8 transformer's: the bigram at its own width 32 (its fit, embedding and init MLP, holds 3.77 val
# bpb against the bigram's 3.73 at step 0 where width 64 holds the same at half the steps), at its own ES
# settings but lr 0.125: 3-minute probes on validation, seed 1, from 3.77: lr 0.25 3.74, lr 0.125 3.71,
# lr 0.0625 3.77, width 64 3.84 (bench/results/cpu/lm_int8_probes_2026-11-28.txt).
MODEL_OPTION_DEFAULTS = {"egg": {"init": "bigram"}, "int8-transformer": {"init": "bigram"}}
BIGRAM_OPTION_DEFAULTS = {"egg": {"hidden": 64}}
BIGRAM_ES_DEFAULTS = {"egg": {"population": 256, "sigma": 2.0 ** -9, "lr": 0.25},
                      "int8-transformer": {"lr": 0.125}}


@dataclass(frozen=True)
class LMOptions:
    model: str = option("egg", "language model (egg, int8-transformer: integer weights; float-gru: the float "
                               "reference)", choices=lambda: tuple(sorted(LM_MODELS)))
    # sizes: a small egg that a CPU's ES budget can train (29k parameters); the earlier defaults
    # (hidden 64, layers 2, window 32, streams 2) stalled above the unigram level in 20 minutes
    hidden: int = option(32, "the model width D")
    layers: int = option(1, "recurrent or transformer layers")
    heads: int = option(0, "attention heads of a transformer (0: the model's default)")
    window: int = option(16, "tokens per stream per update (T); recurrent state carries across windows")
    streams: int = option(16, "data streams every member reads per step (all members read the same ones)")
    data: str = option("", "a file (read as bytes), a directory with d-eggs input.bin + decoding.bin, or '' for "
                           "the Python standard library's source (split by file)")
    val_fraction: float = option(0.05, "fraction held out for validation (evaluations during a run), in (0, 1)")
    test_fraction: float = option(0.05, "fraction held out for the test split, scored once at the end "
                                        "(test_bpb), in (0, 1)")
    max_bytes: int = option(4 << 20, "read at most this many bytes of data (0: all)")
    eval_tokens: int = option(32768, "validation tokens scored per evaluation")
    eval_streams: int = option(16, "parallel validation streams")
    sample_every: int = option(5, "print a generated sample every K evaluations (0: never)")
    sample_tokens: int = option(160, "tokens per printed sample")
    temperature: float = option(0.6, "sampling temperature (> 0)")
    min_p: float = option(0.08, "drop tokens below min_p x the top probability")
    presence_penalty: float = option(0.2, "nats subtracted from tokens already present")
    init: str = option("random", "initial weights: random, or bigram (egg, int8-transformer: the token's own "
                                 "path, embedding to logits, set from the train split's byte bigram, blocks "
                                 "neutral; models/bigram_init.py)",
                       choices=INITS)
    ntt: str = option("none", "extra causal transform features of the token window (float-gru only): none, "
                              "wht (Walsh-Hadamard) or fermat (number-theoretic transform mod 65537)",
                      choices=NTT_CHOICES)

    def __post_init__(self):
        check_options(self, positive=("hidden", "layers", "window", "streams", "eval_tokens", "eval_streams",
                                      "sample_tokens"))
        if self.model not in LM_MODELS:
            raise ValueError(f"unknown language model {self.model!r}; choose one of {sorted(LM_MODELS)}")
        if not isinstance(self.heads, int) or self.heads < 0:
            raise ValueError(f"heads must be an integer >= 0, got {self.heads!r}")
        if not isinstance(self.max_bytes, int) or self.max_bytes < 0:
            raise ValueError(f"max_bytes must be an integer >= 0, got {self.max_bytes!r}")
        if not isinstance(self.sample_every, int) or self.sample_every < 0:
            raise ValueError(f"sample_every must be an integer >= 0, got {self.sample_every!r}")
        if not 0 < self.val_fraction < 1:
            raise ValueError(f"val_fraction must be in (0, 1), got {self.val_fraction!r}")
        if not 0 < self.test_fraction < 1 or self.val_fraction + self.test_fraction >= 1:
            raise ValueError(f"test_fraction must be in (0, 1) with val_fraction + test_fraction < 1, "
                             f"got {self.test_fraction!r}")
        check_sampling(self.temperature, self.min_p, self.presence_penalty)
        if self.init not in INITS:
            raise ValueError(f"unknown init {self.init!r}; choose one of {INITS}")
        if self.init == "bigram" and self.model not in BIGRAM_MODELS:
            raise ValueError(f"init 'bigram' is for {' and '.join(BIGRAM_MODELS)}, not model {self.model!r}")
        if self.ntt not in NTT_CHOICES:
            raise ValueError(f"unknown ntt {self.ntt!r}; choose one of {NTT_CHOICES}")
        if self.data:  # absolute: eval, generate and --resume of the run work from any directory
            object.__setattr__(self, "data", os.path.abspath(os.path.expanduser(self.data)))


def model_sizes(o: LMOptions) -> dict:
    return lm_sizes(o.model, o.hidden, o.layers, o.window, o.heads, o.ntt)


def lm_sizes(model: str, hidden: int, layers: int, window: int, heads: int = 0, ntt: str = "none") -> dict:
    """The size keyword arguments of ``model``'s builder: width (``hidden`` or ``dim``), layers,
    context (``max_len``/``seq_len``), heads and ntt, each passed only where the builder takes it."""
    if model not in LM_MODELS:
        raise ValueError(f"unknown language model {model!r}; choose one of {sorted(LM_MODELS)}")
    sizes = {"hidden": hidden, "dim": hidden, "layers": layers, "max_len": window, "seq_len": window}
    if heads:
        sizes["heads"] = heads
    if ntt != "none":
        sizes["ntt"] = ntt
    params = inspect.signature(LM_MODELS[model]).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return sizes
    if "ntt" in sizes and "ntt" not in params:
        raise ValueError(f"model {model!r} has no ntt option (--ntt is an option of float-gru)")
    if "heads" in sizes and "heads" not in params:
        raise ValueError(f"model {model!r} has no attention heads (--heads is for transformers)")
    return {k: v for k, v in sizes.items() if k in params}
