"""Language-model pretraining by ES: fitness is minus the bits per byte of each member on a window.

Dimensions: P members in the slice [lo, hi), M streams per member, T tokens per window
(``--window``), V vocabulary; population rows are member-major, row i·M + m = member i,
stream m.

Data layout (nano-egg's, ``hyperscalees.md`` §5.5): the train stream is cut into M
contiguous segments; at step s every stream reads window ``w = s mod W`` of its segment
(T inputs, the T next tokens as targets), so every member -- both twins of a pair included --
sees identical bytes and a step's data is a function of the step alone. After W steps the
streams start over from their segments' beginnings.

Truncated ES: each (member, stream) row carries its model's recurrent state to the next
window, as nano-egg does; the state a row starts step s with is the one it ended step s-1 with
(under step s-1's perturbation). The states live in the task state, so a resumed run continues
bit for bit; they are reset to the model's fresh state when the streams start over.

Fitness is (P, M): -(bits of the window's targets)/(bytes they spell) per member and stream
(the engine averages over M). ``evaluate`` scores the unperturbed model on the start of the
validation split (what settings are tuned on): real cross-entropy in bits per byte (``val_bpb``)
next to the add-one unigram and bigram baselines of the same targets (``metrics.py``).
``final_evaluate`` scores it once, at the end of a run, on the **whole** test split
(``test_bpb``, ``bigram_test_bpb``, ``unigram_test_bpb``): the figure to report.
"""
from __future__ import annotations

import sys

import torch
from torch import Tensor, nn

from ...models.bigram_init import bigram_log2, init_from_bigram
from ...models.registry import LM_MODELS, build_lm
from ..base import AbstractTask
from .data import Corpus, DataError, load_corpus
from .vocabulary import Vocabulary
from .metrics import baselines, token_bits
from .options import (BIGRAM_ES_DEFAULTS, BIGRAM_LR_SCALE, BIGRAM_OPTION_DEFAULTS, BIGRAM_PARAMS,
                      MODEL_OPTION_DEFAULTS, TASK_ES_DEFAULTS, LMOptions, lm_sizes, model_sizes)  # noqa: F401
# lm_sizes is re-exported: callers import the task's names from here (cli/arch.py)
from .sampling import generate
from .states import cat_states, detach, slice_state


class LMTask(AbstractTask):
    """Byte/token language model (egg, int8-transformer, float-gru); fitness is -bits/byte.

    ES settings not given on the command line come from the chosen model's ``es_defaults`` (and
    ``TASK_ES_DEFAULTS``), not from the defaults listed below: egg runs with int noise, σ 2^-8,
    centered ranks, threshold SGD (lr 1.0, decay 0.9998) and population 128; int8-transformer with
    d-eggs' uniform noise, filtered pair signs and integer AdamW. ``--trainer backprop`` trains a float
    model with Adam.
    """

    name = "lm"
    metric = "val_bpb"
    goal = "min"
    defaults = {"population": 128, "sigma": 0.02, "rank": 1, "lr": 0.01, "optimizer": "adam", "steps": 100000,
                "eval_every": 500}
    Options = LMOptions
    data_options = ("data",)

    def __init__(self, seed=0, device=None, options=None, vocabulary: Vocabulary | None = None):
        """``vocabulary``: build the task for a saved model only (:meth:`without_data`): it builds the
        model and turns text into ids and back, reads no data, and can neither train nor evaluate."""
        super().__init__(seed, device, options)
        self.corpus: Corpus | None = None
        self.vocabulary = vocabulary
        if vocabulary is None:
            self._read_data()
        self.target = None
        self._baselines: dict | None = None
        self._evals = 0
        self._start: tuple[int, object] | None = None                      # (step, (P·M, ...) state)
        self._pending: tuple[int, dict] | None = None                      # (step, {lo: (hi, state)})
        self._cached: tuple[int, Tensor] | None = None
        self._bp_state = None                                              # backprop reference only
        self._tokens = 0                                                   # read by fitness since progress()

    def _read_data(self) -> None:
        o = self.options
        self.corpus = load_corpus(o.data or None, o.val_fraction, o.max_bytes, o.test_fraction)
        if self.corpus.info.get("note"):  # part of the data is unused: say so, once, before training starts
            print(f"note: {self.corpus.info['note']}", file=sys.stderr)
        self.vocabulary = self.corpus.vocabulary
        n = self.corpus.train.numel()
        self.seg = n // o.streams
        if self.seg < o.window + 1:
            raise DataError(f"window {o.window} (+1 target) is longer than each of the {o.streams} training streams "
                            f"({self.seg} tokens of {n}); use a smaller --window or fewer --streams")
        self.windows = (self.seg - 1) // o.window                          # W: windows per pass
        self.token_bytes = self.corpus.token_bytes().to(self.device)

    @classmethod
    def without_data(cls, seed, device, options, state: dict) -> "LMTask | None":
        """The task for the saved model, from the vocabulary the checkpoint holds (None for a run saved
        before checkpoints kept it: its data must be read)."""
        saved = (state or {}).get("vocabulary")
        return None if saved is None else cls(seed, device, options, vocabulary=Vocabulary.from_state(saved))

    # -- model -------------------------------------------------------------------------
    def make_model(self) -> nn.Module:
        model = build_lm(self.options.model, self.vocabulary.size, **model_sizes(self.options))
        if self.options.init == "bigram" and self.corpus is not None:  # without data: weights come from a file
            init_from_bigram(model, *bigram_log2(self.corpus.train, self.vocabulary.size))
        return model

    def es_options(self, model: nn.Module) -> dict:
        """The model's parameter groups (e.g. a larger σ for an integer model's vectors); a bigram start
        keeps its embedding and head at a fraction of the lr (BIGRAM_LR_SCALE)."""
        groups = list(model.es_groups()) if hasattr(model, "es_groups") else []
        if self.options.init == "bigram":
            groups.append({"params": list(BIGRAM_PARAMS[self.options.model]), "lr_scale": BIGRAM_LR_SCALE, "name": "bigram"})
        return {"groups": groups} if groups else {}

    @classmethod
    def defaults_help(cls) -> str:
        def flags(d: dict) -> str:
            return ", ".join(f"--{k.replace('_', '-')} {v:g}" if isinstance(v, float) else f"--{k.replace('_', '-')} {v}"
                             for k, v in d.items())
        rows = []
        for name in sorted(LM_MODELS):
            options = {"model": name, **cls.option_defaults({"model": name})}
            chosen = {k: v for k, v in options.items() if k != "model"} | cls.model_es_defaults(options)
            if chosen:
                row = f"{name}: {flags(chosen)}"
                if options.get("init") == "bigram":
                    random = {"model": name, "init": "random"}
                    random = {"hidden": LMOptions.hidden, **cls.option_defaults(random),
                              **cls.model_es_defaults(random)}
                    row += f" (with --init random: {flags(random)})"
                rows.append(row)
        return ("Each model brings its own defaults, used for the flags you do not give (they replace the "
                "defaults shown above): " + "; ".join(rows) + ".") if rows else ""

    @classmethod
    def option_defaults(cls, options: dict) -> dict:
        """The chosen model's start (``MODEL_OPTION_DEFAULTS``) and a bigram start's width, for options the
        user did not give; ``options`` holds the ones they did."""
        chosen = dict(MODEL_OPTION_DEFAULTS.get(options.get("model", LMOptions.model), {}))
        if options.get("init", chosen.get("init", LMOptions.init)) == "bigram":
            chosen.update(BIGRAM_OPTION_DEFAULTS.get(options.get("model", LMOptions.model), {}))
        return chosen

    @classmethod
    def model_es_defaults(cls, options: dict) -> dict:
        """The chosen model's ``es_defaults`` (ES settings the user did not give), and a bigram start's."""
        name = options.get("model", LMOptions.model)
        builder = LM_MODELS.get(name)
        start = BIGRAM_ES_DEFAULTS.get(name, {}) if options.get("init", LMOptions.init) == "bigram" else {}
        return {**(getattr(builder, "es_defaults", {}) or {}), **TASK_ES_DEFAULTS.get(name, {}), **start}

    # -- data ----------------------------------------------------------------------------
    def window_index(self, step: int) -> int:
        return step % self.windows

    def batch(self, step: int) -> Tensor:
        """(M, T+1) token ids of ``step``'s window on every stream (a function of the step only)."""
        if self._cached is None or self._cached[0] != step:
            o = self.options
            starts = torch.arange(o.streams) * self.seg + self.window_index(step) * o.window   # (M,)
            idx = starts[:, None] + torch.arange(o.window + 1)                              # (M, T+1)
            self._cached = (step, self.corpus.train[idx].to(self.device))
        return self._cached[1]

    # -- recurrent state per (member, stream) row, carried across steps ------------------
    def _commit(self) -> None:
        """Turn the chunks of the last evaluated step into the start state of the next one."""
        if self._pending is None:
            return
        step, parts = self._pending
        self._pending = None
        his, at, chunks = sorted(parts.items()), 0, []
        for lo, (hi, st) in his:
            if lo != at:           # not one contiguous population starting at member 0: nothing to carry
                self._start = None
                return
            chunks.append(st)
            at = hi
        self._start = (step + 1, cat_states(chunks))

    def _state_for(self, step: int, lo: int, hi: int):
        if self._pending is not None and self._pending[0] != step:
            self._commit()
        if self.window_index(step) == 0 or self._start is None or self._start[0] != step:
            return None
        m = self.options.streams
        st = self._start[1]
        rows = st.shape[0] if isinstance(st, Tensor) else (st[0].shape[0] if st else 0)
        return slice_state(st, lo * m, hi * m) if st is not None and rows >= hi * m else None

    def fitness(self, model: nn.Module, lo: int, hi: int, step: int = 0) -> Tensor:
        p, m = hi - lo, self.options.streams
        state = self._state_for(step, lo, hi)
        win = self.batch(step)                                             # (M, T+1)
        x, y = win[:, :-1].repeat(p, 1), win[:, 1:].repeat(p, 1)           # (P·M, T) member-major
        logits, new_state = model(x, state)
        self._tokens += x.numel()
        bits = token_bits(logits, y).sum(dim=1).double()                   # (P·M,)
        nbytes = self.token_bytes[y].sum(dim=1).clamp(min=1)               # (P·M,)
        if self._pending is None or self._pending[0] != step:
            self._pending = (step, {})
        self._pending[1][lo] = (hi, detach(new_state))
        return (-(bits / nbytes)).float().view(p, m)

    def loss(self, model: nn.Module, step: int) -> Tensor:
        """Differentiable bits per byte of the unperturbed model on ``step``'s window (the backprop
        reference; truncated BPTT: its state is carried across windows, gradients are not)."""
        win = self.batch(step)                                             # (M, T+1)
        state = self._bp_state if self.window_index(step) and self._bp_state is not None else None
        logits, new_state = model(win[:, :-1], state)
        self._bp_state = detach(new_state)
        y = win[:, 1:]
        return token_bits(logits, y).sum() / self.token_bytes[y].sum().float()

    # -- evaluation ----------------------------------------------------------------------
    def eval_streams(self) -> Tensor:
        """(E, L) validation streams: the first ``eval_tokens`` of the validation split."""
        o, val = self.options, self.corpus.val
        n = min(val.numel(), o.eval_tokens)
        e = max(1, min(o.eval_streams, n // 2))
        length = n // e
        return val[:e * length].view(e, length)

    def baselines(self) -> dict[str, float]:
        if self._baselines is None:
            self._baselines = baselines(self.corpus.train, self.eval_streams(), self.corpus.vocab_size,
                                        self.corpus.token_bytes())
        return self._baselines

    def score(self, model: nn.Module, streams: Tensor) -> tuple[float, float, int]:
        """(bits, bytes, targets) of the model on (E, L) streams, read ``window`` tokens at a time;
        a stop request (:meth:`check_stop`) cuts it short between two windows."""
        streams, t = streams.to(self.device), self.options.window
        bits = nbytes = 0.0
        count, state = 0, None
        for j in range(0, streams.shape[1] - 1, t):
            self.check_stop()
            x = streams[:, j:j + t]
            y = streams[:, j + 1:j + t + 1]
            x = x[:, :y.shape[1]]
            logits, state = model(x, state)
            bits += float(token_bits(logits, y).double().sum())
            nbytes += float(self.token_bytes[y].sum())
            count += y.numel()
        return bits, nbytes, count

    def test_streams(self) -> list[Tensor]:
        """The whole test split as (E, L) streams plus, if any, the (1, rest) tail: every token is a
        target except the first of each stream."""
        test, e = self.corpus.test, self.options.eval_streams
        e = max(1, min(e, test.numel() // 2))
        length = test.numel() // e
        parts = [test[:e * length].view(e, length)]
        if test.numel() - e * length >= 2:
            parts.append(test[e * length:].view(1, -1))
        return parts

    @torch.no_grad()
    def final_evaluate(self, model: nn.Module) -> dict[str, float]:
        """Test bits per byte over the whole test split, next to the unigram and bigram on the same
        bytes; run once, at the end of a run (the figure to report; never tuned on)."""
        bits = nbytes = 0.0
        base_bits = {"unigram": 0.0, "bigram": 0.0}
        for streams in self.test_streams():
            b, n, _ = self.score(model, streams)
            bits, nbytes = bits + b, nbytes + n
            base = baselines(self.corpus.train, streams, self.corpus.vocab_size, self.corpus.token_bytes())
            for k in base_bits:
                base_bits[k] += base[f"{k}_bpb"] * n                   # the baselines' bits on these bytes
        n = max(nbytes, 1.0)
        return {"test_bpb": bits / n, "bigram_test_bpb": base_bits["bigram"] / n,
                "unigram_test_bpb": base_bits["unigram"] / n, "test_bytes": int(nbytes)}

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        bits, nbytes, count = self.score(model, self.eval_streams())
        base = self.baselines()
        self.target = base["bigram_bpb"]      # "solved": below the bigram baseline of the same targets
        out = {"val_bpb": bits / max(nbytes, 1.0), **{k: base[k] for k in ("bigram_bpb", "unigram_bpb")}}
        if not self.corpus.is_bytes:
            out.update(val_bpt=bits / max(count, 1), bigram_bpt=base["bigram_bpt"], unigram_bpt=base["unigram_bpt"])
        self._evals += 1
        if self.options.sample_every and self._evals % self.options.sample_every == 0:
            print(f"sample: {self.sample(model)!r}", file=sys.stderr, flush=True)
        return out

    def sample(self, model: nn.Module, prompt_tokens: int = 32) -> str:
        """A generated continuation of the start of the validation split (prompt included)."""
        o = self.options
        prompt = self.corpus.val[1:1 + prompt_tokens].tolist()
        out = generate(model, prompt, o.sample_tokens, o.temperature, o.min_p, o.presence_penalty,
                       seed=self.seed + self._evals, context=o.window)
        return self.corpus.decode(prompt) + "|" + self.corpus.decode(out)

    def progress(self, step_seconds: float) -> dict[str, str]:
        """Tokens/s: the tokens the members read this step (every member's windows) over its time;
        nothing where workers ran the fitness (a distributed run's coordinator reads none)."""
        tokens, self._tokens = self._tokens, 0
        return {"tok/s": f"{tokens / max(step_seconds, 1e-9):,.0f}"} if tokens else {}

    def metric_names(self):
        names = ("val_bpb", "bigram_bpb", "unigram_bpb")
        return names if self.corpus.is_bytes else names + ("val_bpt", "bigram_bpt", "unigram_bpt")

    # -- state a resumed run must restore ----------------------------------------------
    def state_dict(self) -> dict:
        self._commit()
        start = self._start
        st = None if start is None else start[1]
        split = {k: v for k, v in self.corpus.info.items() if k.endswith(("split", "_files", "_tokens"))}
        return {"data_sha256": self.corpus.info.get("sha256"), "data_split": split, "evals": self._evals,
                "start_step": -1 if start is None else start[0],
                "state": [] if st is None else ([st] if isinstance(st, Tensor) else list(st)),
                "state_is_tensor": isinstance(st, Tensor),
                "vocabulary": self.vocabulary.to_state()}  # generate needs it, and nothing else of the data

    def load_state_dict(self, state: dict) -> None:
        if not state or self.corpus is None:  # a task for the saved model only: no data, no streams
            return
        if state["data_sha256"] != self.corpus.info.get("sha256"):
            raise ValueError(f"the data differs from the run's (sha256 {state['data_sha256']} vs "
                             f"{self.corpus.info.get('sha256')}): give the data the run was trained on")
        self._evals = int(state["evals"])
        parts = [t.to(self.device) for t in state["state"]]
        self._pending = None
        if state["start_step"] < 0 or not parts:
            self._start = None
        else:
            self._start = (int(state["start_step"]), parts[0] if state["state_is_tensor"] else tuple(parts))
