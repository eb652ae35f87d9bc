"""Question: how much of one ES step, and of one GRPO step, is signal rather than noise, per completion spent?

Both methods move a language model along an estimate ĝ of a gradient g built from n completions:
ES (``train llm``) from N members × P prompts scored by the verifier, normalised per prompt
(``es.gradient_estimate``, ES's step before its optimizer); GRPO (TRL's ``GRPOTrainer``, the
``dapo`` loss of its first, on-policy step) from P prompts × G sampled completions with
group-normalised advantages: ĝ = Σ_i A_i Σ_t ∇ log π(token_it) / tokens. Their difference on a CPU
is what a completion buys, and that is measurable without training either.

The measure is what McCandlish et al. (arXiv 1812.06162) call the *simple* noise scale: with
per-completion covariance Σ, E|ĝ|² = |g|² + tr(Σ)/n, and

    B_simple = tr(Σ) / |g|²     (completions; the step size at which a step is half signal)
    signal   = |g|² / E|ĝ|² = n / (n + B_simple)    (= cos² between a step and g)

B_simple is not a training cost. The statistic their "about B/n times the steps" is about is
B_noise = tr(HΣ)/(gᵀHg), which equals B_simple only when the Hessian H is isotropic; for ES, whose
noise is isotropic, B_noise ≈ B_simple × (the Hessian's effective rank / d) (MeZO's argument,
arXiv 2305.17333). And B_simple has a floor set by the dimension alone: for isotropic noise
(Gaussian or EGGROLL's rank 1, Cov(vec ε) = I) each antithetic pair's term wε has |E[wε]|² ≤
E[w²] and E|wε|² ≈ d·E[w²], so B_simple ≥ d − 1 pairs = 2P(d − 1) completions with P prompts a
member, for any model, σ, shaping or reward (:func:`b_simple_floor`; ES rows report it beside
the measurement, and the summary their ratio: what is left once the dimension is divided out).
What predicts training is measured directly with ``--critical``: short trainings at several
populations, steps to a fixed held-out reward gain, and McCandlish's empirical critical batch
from them (``critical_batch.py``). Both signal and B_simple are read from M independent estimates (fresh prompts, fresh ES
noise or sampling draws) through their Gram matrix: |g|² is the mean dot product of two different
estimates (unbiased, since they are independent), E|ĝ|² the mean squared norm; a jackknife over the
estimates gives the standard error. The two methods follow different objectives (ES: the reward of
greedy answers, smoothed by the parameter noise; GRPO: the expected reward of answers sampled at
temperature 1), so their B_simple compare what each step buys of its own direction; ``agreement``
is the cosine between the two expected directions (ĝ_ES · ĝ_GRPO of independent estimates over
|g_ES| |g_GRPO|). Directions are read over the weights ES evolves (``llm.evolving``: every block
matrix); GRPO's optimizer (Adam) and ES's (SGD) come after, and are not part of this.

Rows: ES at 32, 512, 2,048 and 4,096 members × 4 prompts (128 to 16,384 completions a step: ES's
signal is small, and only large steps show it above the estimate's error), GRPO at 16, 64 and 256
prompts × 8 completions (128, 512 and 2,048; 128 and 2,048 are the sizes ``bench/llm_vs_grpo.py`` and
``bench/gpu_session.sh`` train at); σ 1e-2 (the CPU tuning's choice), greedy members,
the task's default options unless given (``--task``, ``--task-options``), 16 estimates a row. Each row's completions/s is the time its estimates
took here, one after another in this process (ES: generate and score; GRPO: generate, score,
forward and backward).

One of the project's studies (docs/llm-vs-grpo.md), run from a source checkout:

    python bench/llm_signal.py [--quick] [--json] --model DIR [--task NAME] [--task-options JSON]
                               [--settings JSON] [--plot FILE] [--device cpu|cuda] [--out FILE]
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import torch
from torch import Tensor

from tqdm import tqdm

import critical_batch
import study_cli
from grpo_run import STOP, cut
from hyperscalees import llm
from hyperscalees.benchmarks.base import BenchSetupError, Report, environment
from llm_runs import _json_object, with_task

QUESTION = ("signal share of one step and McCandlish's simple noise scale B_simple (completions; beside ES's "
            "dimension floor 2P(d-1)), ES (EGGROLL, normalised per prompt) vs GRPO (dapo loss, on-policy), on one "
            "model and task")
COLUMNS = ["method", "setting", "completions", "estimates", "signal", "signal_se", "b_simple", "b_simple_lo",
           "b_simple_hi", "b_simple_floor", "s_per_estimate", "completions_per_s"]
SIGMA = 1e-2  # the CPU tuning's choice for ES on both demonstration tasks (docs/llm-vs-grpo.md)
GROUP = 8  # GRPO's completions per prompt (the tuned setting)
EPS = 1e-4  # TRL's: advantages = (r - mean) / (std + 1e-4)


# -- the statistics (pure) -------------------------------------------------------------------------
def cross(a, b) -> Tensor:
    """(len(a), len(b)) float64 dot products of two sequences of flat estimates (lists of (d,) vectors,
    or (M, d) tensors), one chunked pair at a time: no (M, d) float64 copy, which for a pretrained
    model's hundred million weights is gigabytes."""
    def dot(x: Tensor, y: Tensor, chunk: int = 1 << 22) -> float:
        return sum(float(torch.dot(x[i:i + chunk].double(), y[i:i + chunk].double())) for i in range(0, len(x), chunk))

    return torch.tensor([[dot(x, y) for y in b] for x in a], dtype=torch.float64).reshape(len(a), len(b))


def gram(estimates) -> Tensor:
    """(M, M) dot products of M flat estimates (see :func:`cross`), in float64."""
    return cross(estimates, estimates)


def _moments(g: Tensor) -> tuple[float, float]:
    """(|g|² unbiased: mean off-diagonal, E|ĝ|²: mean diagonal) of a Gram matrix of independent estimates."""
    m = g.shape[0]
    diag = float(g.diagonal().sum())
    return (float(g.sum()) - diag) / (m * (m - 1)), diag / m


def _jackknife(statistic, m: int) -> float:
    """The jackknife standard error of ``statistic(keep)`` over M estimates (``keep``: a bool mask
    leaving one out); nan if a leave-one-out value is."""
    keep = torch.ones(m, dtype=torch.bool)
    loo = []
    for i in range(m):
        keep[i] = False
        loo.append(statistic(keep))
        keep[i] = True
    if any(math.isnan(x) for x in loo):
        return math.nan
    mean = sum(loo) / m
    return math.sqrt((m - 1) / m * sum((x - mean) ** 2 for x in loo))


def noise_scale(g: Tensor, completions: int) -> dict[str, float]:
    """Signal share, B_simple and their jackknife spread from the Gram matrix ``g`` (M, M) of M ≥ 3
    independent estimates, each from ``completions`` completions (see the module docstring).

    ``signal`` = |g|²/E|ĝ|² (0 or below: no signal detected, ``b_simple`` inf; nan when every estimate
    is zero); ``b_simple`` = n(1/signal - 1);
    ``signal_se`` the jackknife standard error of ``signal``, ``b_simple_lo``/``_hi`` B_simple at
    signal ± one standard error (hi inf when signal - se <= 0)."""
    m = g.shape[0]
    if g.shape != (m, m) or m < 3:
        raise ValueError(f"need the (M, M) Gram matrix of M >= 3 estimates, got shape {tuple(g.shape)}")
    if isinstance(completions, bool) or not isinstance(completions, int) or completions < 1:
        raise ValueError(f"completions must be a whole number >= 1, got {completions!r}")
    signal_sq, mean_sq = _moments(g)
    if not mean_sq > 0:  # every estimate is zero: no reward varied, nothing to measure
        nan = math.nan
        return {"signal": nan, "signal_se": nan, "b_simple": nan, "b_simple_lo": nan, "b_simple_hi": nan,
                "grad_sq": 0.0, "estimate_sq": 0.0}
    signal = signal_sq / mean_sq

    def share(keep: Tensor) -> float:
        s, ms = _moments(g[keep][:, keep])
        return s / ms if ms > 0 else 0.0

    se = _jackknife(share, m)

    def b(share: float) -> float:
        return completions * (1 / share - 1) if share > 0 else math.inf

    return {"signal": signal, "signal_se": se, "b_simple": b(signal), "b_simple_lo": b(min(signal + se, 1.0)),
            "b_simple_hi": b(signal - se), "grad_sq": signal_sq, "estimate_sq": mean_sq}


def b_simple_floor(prompts: int, dimension: int) -> int:
    """2P(d − 1): the least B_simple (completions) of any ES estimate with isotropic noise over ``dimension``
    evolved numbers and ``prompts`` prompts a member (see the module docstring), whatever the model or reward."""
    for name, v, low in (("prompts", prompts, 1), ("dimension", dimension, 2)):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise ValueError(f"{name} must be a whole number >= {low}, got {v!r}")
    return 2 * prompts * (dimension - 1)


def ratio_at_least(a: dict, b: dict, z: int = 2) -> float:
    """The least B_simple(a) / B_simple(b) both pooled estimates allow at ``z`` standard errors each:
    a's bound from below over b's bound from above, the same number of errors on both sides. nan
    where b has no such upper bound (its signal under z errors): then no ratio is claimed."""
    low, high = a.get(f"b_simple_at_least{'' if z == 2 else z}"), b.get(f"b_simple_at_most{'' if z == 2 else z}")
    if low is None or high is None:
        raise ValueError(f"need pooled estimates with bounds at {z} standard errors (pooled_b_simple)")
    if not (math.isfinite(high) and high > 0) or math.isnan(low):
        return math.nan
    return low / high


def pooled_b_simple(rows: list[tuple[int, float, float]]) -> dict[str, float]:
    """One B_simple from several rows ``(completions n, signal s, its standard error se)`` of one method.

    Each row reads 1/B_simple = s / (n (1 - s)), with standard error se / (n (1 - s)²); their
    inverse-variance weighted mean x ± e pools them (a small signal is measured best by the rows
    with the most completions). ``b_simple`` = 1/x, ``b_simple_lo``/``_hi`` at x ± e, and
    ``b_simple_at_least``/``_at_most`` at x ± 2e: the bounds to quote when the signal hardly shows
    (inf where x - e, x - 2e or x itself is not positive)."""
    xs, ws = [], []
    for n, s, se in rows:
        if not (math.isfinite(s) and math.isfinite(se) and se > 0 and s < 1):
            continue
        xs.append(s / (n * (1 - s)))
        ws.append((n * (1 - s) ** 2 / se) ** 2)
    if not xs:
        return {k: math.nan for k in ("b_simple", "b_simple_lo", "b_simple_hi", "b_simple_at_least", "b_simple_at_most")}
    x = sum(w * v for w, v in zip(ws, xs)) / sum(ws)
    e = 1 / math.sqrt(sum(ws))
    inv = lambda v: 1 / v if v > 0 else math.inf
    return {"b_simple": inv(x), "b_simple_lo": inv(x + e), "b_simple_hi": inv(x - e), "b_simple_at_least": inv(x + 2 * e),
            "b_simple_at_most": inv(x - 2 * e)}


def agreement(cross: Tensor, ga: Tensor, gb: Tensor, min_z: float = 2.0) -> tuple[float, float]:
    """(cos(g_a, g_b), its jackknife standard error) of two expected directions, from independent
    estimates: ``cross`` (Ma, Mb) their dot products, ``ga``/``gb`` each side's Gram matrix.

    ĝ_a · ĝ_b of independent estimates is unbiased for g_a · g_b, and the off-diagonal means of
    ``ga``, ``gb`` for |g_a|², |g_b|². A side whose signal share is under ``min_z`` standard errors
    gives no usable |g|² to divide by: then (nan, nan). The jackknife leaves out estimate i of
    both sides (up to the smaller count)."""
    for g in (ga, gb):
        s = noise_scale(g, 1)
        if not s["signal"] >= min_z * s["signal_se"]:
            return math.nan, math.nan

    def cos(c, a, b):
        sa, sb = _moments(a)[0], _moments(b)[0]
        return float(c.mean()) / math.sqrt(sa * sb) if sa > 0 and sb > 0 else math.nan

    m = min(ga.shape[0], gb.shape[0])
    ones_a, ones_b = torch.ones(ga.shape[0], dtype=torch.bool), torch.ones(gb.shape[0], dtype=torch.bool)

    def left_out(keep: Tensor) -> float:  # estimate i of both sides left out
        ka, kb = ones_a.clone(), ones_b.clone()
        ka[:m], kb[:m] = keep, keep
        return cos(cross[ka][:, kb], ga[ka][:, ka], gb[kb][:, kb])

    return cos(cross, ga, gb), _jackknife(left_out, m)


# -- the two estimators --------------------------------------------------------------------------
def flat(grads: dict[str, Tensor], names: list[str]) -> Tensor:
    """One float32 CPU vector of ``grads`` in ``names`` order."""
    return torch.cat([grads[n].detach().reshape(-1).float().cpu() for n in names])


def es_estimate(es, tokenizer, task, prompts: list[str], sampling: llm.Sampling, step: int, names: list[str],
                chunk: int = 64) -> tuple[Tensor, int]:
    """ES's gradient estimate at ``step`` (its noise) on ``prompts``: (flat vector in ``names`` order,
    completions)."""
    from hyperscalees.llm.generate import complete_chunk
    es.strategy.set_step(step)
    n, p = es.population, len(prompts)
    scores = []
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        with es.perturbed((lo, hi), repeated=True):
            texts, _, _ = complete_chunk(es.model, tokenizer, prompts, sampling, (lo, hi), step)
        scores += [task.reward(prompts[r % p], t) for r, t in enumerate(texts)]
    fitness = torch.tensor(scores, dtype=torch.float32).view(n, p)
    return flat(es.gradient_estimate(fitness), names), n * p


def completion_mask(tokens: Tensor, lengths: Tensor, eos: int | None) -> tuple[Tensor, Tensor]:
    """(tokens with the end token restored, mask) of completions as TRL masks them: every token up to
    and including the first end token. ``llm.complete`` pads from a row's end on, end token
    included; a row shorter than the width ended at its end token."""
    width = tokens.shape[1]
    ended = lengths < width
    tokens = tokens.clone()
    if eos is not None:
        rows = ended.nonzero().flatten()
        tokens[rows, lengths[rows]] = eos
    upto = lengths + (ended & (eos is not None)).long()
    return tokens, torch.arange(width)[None, :] < upto[:, None]


PASS_BYTES = 2 << 30  # what one forward and backward of GRPO's rows may hold in activations


def pass_rows(config, width: int, budget: int = PASS_BYTES) -> int:
    """How many rows of ``width`` tokens one forward and backward holds within ``budget`` bytes: a
    float32 estimate of what autograd keeps per token (per layer ~8 hidden-sized, 4 MLP-sized and
    one attention row per head; the logits and their log-softmax and gradient), from a transformers
    config. SmolLM2-135M keeps ~2 MB a token, so 128 rows of 88 tokens at once would need ~22 GB."""
    hidden, layers = getattr(config, "hidden_size", 0), getattr(config, "num_hidden_layers", 0)
    inner = getattr(config, "intermediate_size", None) or 4 * hidden
    heads, vocab = getattr(config, "num_attention_heads", 1), getattr(config, "vocab_size", 0)
    per_token = 4 * (layers * (8 * hidden + 4 * inner + heads * width) + 3 * vocab)
    return max(1, min(256, budget // max(1, per_token * width)))


def grpo_direction(model, tokenizer, prompts: list[str], tokens: Tensor, lengths: Tensor, rewards: Tensor,
                   params: dict[str, Tensor], rows_per_pass: int | None = None) -> Tensor:
    """GRPO's first-step ascent direction over ``params`` (flat, in their order) for sampled completions.

    ``tokens``/``lengths`` (G·P rows, member-major: row g·P + j answers prompt j) as ``llm.complete``
    returns them, ``rewards`` (G, P). TRL 1.x's ``dapo`` loss at ratio 1, beta 0: advantages
    A = (r - group mean) / (group std + 1e-4) per prompt, direction ∇ Σ_i A_i Σ_t log π(token_it) / tokens,
    tokens up to and including each row's end token. Rows go through forward and backward
    ``rows_per_pass`` at a time (default: as many as :data:`PASS_BYTES` holds), their gradients summed."""
    from hyperscalees.llm.generate import encode_prompts
    p = len(prompts)
    adv = ((rewards - rewards.mean(0)) / (rewards.std(0) + EPS)).reshape(-1)
    device = next(model.parameters()).device
    ids, mask = encode_prompts(tokenizer, prompts, device)
    reps = tokens.shape[0] // p
    ids, mask = ids.repeat(reps, 1), mask.repeat(reps, 1)
    tokens, cmask = completion_mask(tokens.cpu(), lengths.cpu(), tokenizer.eos_token_id)
    tokens, cmask = tokens.to(device), cmask.to(device)
    total = cmask.sum().clamp(min=1)
    names = list(params)
    out = [torch.zeros_like(params[n], dtype=torch.float32) for n in names]
    step = rows_per_pass or pass_rows(model.config, ids.shape[1] + tokens.shape[1])
    for lo in range(0, tokens.shape[0], step):
        sl = slice(lo, lo + step)
        full, att = torch.cat([ids[sl], tokens[sl]], 1), torch.cat([mask[sl], cmask[sl].long()], 1)
        pos = (att.cumsum(1) - 1).clamp(min=0)  # left padding: positions count real tokens, as generate's do
        with torch.enable_grad():
            logits = model(input_ids=full, attention_mask=att, position_ids=pos).logits[:, ids.shape[1] - 1:-1]
            logp = torch.log_softmax(logits.float(), -1).gather(-1, tokens[sl][..., None]).squeeze(-1)
            objective = (adv[sl].to(device, logp.dtype)[:, None] * logp * cmask[sl]).sum() / total
            grads = torch.autograd.grad(objective, [params[n] for n in names], allow_unused=True)
        for acc, g in zip(out, grads):
            if g is not None:
                acc += g.float()
    return flat(dict(zip(names, out)), names)


def grpo_estimate(model, tokenizer, task, prompts: list[str], generations: int, max_new_tokens: int,
                  seed: int, params: dict[str, Tensor]) -> tuple[Tensor, int]:
    """GRPO's first-step direction on ``prompts``: (flat ascent direction over ``params``, completions).

    As ``bench/llm_vs_grpo.py`` runs TRL: ``generations`` completions per prompt sampled at temperature 1 (no
    stop string: up to the end token or ``max_new_tokens``), the task's reward on each completion
    cut after ``</answer>``, then :func:`grpo_direction`."""
    sampling = llm.Sampling(max_new_tokens=max_new_tokens, do_sample=True, temperature=1.0)
    p = len(prompts)
    texts, new, lengths = llm.complete(model, tokenizer, prompts, sampling, repeats=generations, seed=seed)
    rewards = torch.tensor([task.reward(prompts[r % p], cut(t, STOP)) for r, t in enumerate(texts)],
                           dtype=torch.float64).view(generations, p)
    return grpo_direction(model, tokenizer, prompts, new, lengths, rewards, params), generations * p


# -- the benchmark -------------------------------------------------------------------------------
def configs(quick: bool) -> dict:
    """ES rows (members, prompts) and GRPO rows (prompts, completions per prompt), estimates per row."""
    if quick:
        return dict(es=[(8, 2)], grpo=[(2, 8)], estimates=3, max_new_tokens=32)
    return dict(es=[(32, 4), (512, 4), (2048, 4), (4096, 4)], grpo=[(16, GROUP), (64, GROUP), (256, GROUP)],
                estimates=16, max_new_tokens=64)


SETTINGS = {"es": {"sigma", "temperature", "members", "prompts", "subspace"}, "grpo": {"prompts", "generations"},
            "evolve": None, "estimates": None, "max_new_tokens": None}


def with_settings(c: dict, settings) -> dict:
    """``c`` changed by ``--settings`` (JSON text or a dict), each value checked; naming a method runs
    only the methods named. Keys: ``es`` {sigma, temperature (members sample, twins with common
    noise, as ``train llm --temperature``), members (a list), prompts, subspace (K: ES evolves a
    fixed random K-dimensional subspace, as ``train llm --subspace K``, and its estimates are read
    over z ∈ ℝᴷ; GRPO's direction is not read there, so ES alone)}, ``grpo`` {prompts (a list),
    generations}, ``evolve`` (glob patterns of the weights both read, as ``train llm --evolve``),
    ``estimates`` (per row, >= 3), ``max_new_tokens`` (both methods' answer length, >= 1)."""
    given = _json_object(settings, "--settings")
    bad = sorted(set(given) - set(SETTINGS))
    if bad:
        raise BenchSetupError(f"--settings: unknown key {bad[0]!r}; keys are {sorted(SETTINGS)}")
    c = {**c, "sigma": SIGMA, "temperature": 0.0, "subspace": 0}
    methods = [m for m in ("es", "grpo") if m in given] or ["es", "grpo"]

    def whole(v, low, what):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise BenchSetupError(f"--settings: {what} must be a whole number >= {low}, got {v!r}")
        return v

    def listed(v, low, what, even=False):
        v = v if isinstance(v, list) else [v]
        if not v:
            raise BenchSetupError(f"--settings: {what} must list at least one size")
        out = [whole(x, low, what) for x in v]
        if even and any(x % 2 for x in out):
            raise BenchSetupError(f"--settings: {what} must be even (antithetic pairs), got {v!r}")
        return out

    for meth in ("es", "grpo"):
        own = given.get(meth, {})
        if not isinstance(own, dict) or set(own) - SETTINGS[meth]:
            raise BenchSetupError(f"--settings: {meth} takes a JSON object with keys {sorted(SETTINGS[meth])}, "
                                  f"got {own!r}")
        if meth not in methods:
            c[meth] = []
        elif meth == "es":
            prompts = whole(own.get("prompts", c["es"][0][1]), 1, "es prompts")
            members = listed(own["members"], 2, "es members", even=True) if "members" in own else [
                a for a, _ in c["es"]]
            c["es"] = [(a, prompts) for a in members]
            for key, low in (("sigma", 0.0), ("temperature", 0.0)):
                v = own.get(key, c[key])
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < low or (
                        key == "sigma" and v == 0):
                    raise BenchSetupError(f"--settings: es {key} must be a number {'> 0' if key == 'sigma' else '>= 0'}"
                                          f", got {v!r}")
                c[key] = float(v)
            if "subspace" in own:
                c["subspace"] = whole(own["subspace"], 2, "es subspace")
        else:
            generations = whole(own.get("generations", c["grpo"][0][1]), 2, "grpo generations")
            prompts = listed(own["prompts"], 1, "grpo prompts") if "prompts" in own else [a for a, _ in c["grpo"]]
            c["grpo"] = [(a, generations) for a in prompts]
    if "estimates" in given:
        c["estimates"] = whole(given["estimates"], 3, "estimates")
    if "max_new_tokens" in given:
        c["max_new_tokens"] = whole(given["max_new_tokens"], 1, "max_new_tokens")
    if "evolve" in given:
        if not isinstance(given["evolve"], str) or not given["evolve"].strip():
            raise BenchSetupError(f"--settings: evolve must be comma-separated glob patterns, got {given['evolve']!r}")
        c["evolve"] = [p.strip() for p in given["evolve"].split(",") if p.strip()]
    if c["subspace"] and c["grpo"]:
        raise BenchSetupError("--settings: es subspace reads ES's estimates over z alone; GRPO's direction is not "
                              "measured in a subspace, so name only es")
    if c["subspace"] and c.get("evolve"):
        raise BenchSetupError("--settings: es subspace and evolve each choose what evolves: give one of them")
    return c


def evolved_names(model, es_map: dict) -> list[str]:
    """The parameter names ``es_map`` evolves (its glob patterns resolved as the strategies resolve them)."""
    from hyperscalees.nn.es_map import derive_specs
    from hyperscalees.noise.spec import ESMode
    return [n for n, spec in derive_specs(model, es_map).items() if spec.mode != ESMode.EXCLUDED]


def _load(model: str | None, quick: bool, device: str):
    if model:
        return llm.load_causal_lm(model, device=device)
    if not quick:
        raise BenchSetupError("llm_signal needs --model (a local model folder, e.g. bench/models/countdown_char_llama)")
    from warm_start import char_llama
    m, tok = char_llama(hidden=16, layers=1, heads=2)  # --quick: a random model, to check the pipeline
    return m.to(device), tok


def run(quick: bool = False, device: str = "cpu", log=print, model=None, task=None, task_options=None,
        plot=None, settings=None, critical=None) -> Report:
    from hyperscalees.nn.module_es import EGGROLL
    c = with_settings(configs(quick), settings if settings is not None else {})
    t = with_task({"task": "countdown", "task_options": {}}, task, task_options)
    crit = None
    if critical is not None:  # checked before anything is measured
        if not model:
            raise BenchSetupError("--critical trains the model: it needs --model (a local model folder)")
        # the trainings evolve what the estimates read, unless --critical names its own subspace
        crit = critical_batch.settings({"subspace": c["subspace"], **_json_object(critical, "--critical")}, quick)
    from hyperscalees.tasks.problems import PROBLEM_SETS
    seed = 0  # draws the training problems; the estimates' own noise is keyed per estimate
    problems = PROBLEM_SETS[t["task"]](seed=seed, options=t["task_options"])
    lm, tok = _load(model, quick, device)
    lm.eval()
    try:  # a subspace is keyed like train llm's (its ES seed), so the same K reads the same z
        es_map = llm.what_evolves(lm, subspace=c["subspace"], evolve=c.get("evolve"), seed=seed)
    except ValueError as e:
        raise BenchSetupError(f"--settings evolve: {e}") from None
    named = dict(lm.named_parameters())
    params = {n: named[n] for n in evolved_names(lm, es_map)}  # what ES evolves; GRPO's direction is read on it
    m = c["estimates"]
    dimension = sum(p.numel() for p in params.values())
    members_sample = llm.Sampling(max_new_tokens=c["max_new_tokens"], stop=(STOP,))
    if c["temperature"] > 0:  # as train llm --temperature: twins sample with the same random numbers
        members_sample = llm.Sampling(max_new_tokens=c["max_new_tokens"], stop=(STOP,), do_sample=True,
                                      temperature=c["temperature"], common_noise=True)
    offset = 0  # every estimate reads train problems no other estimate reads

    def fresh(count: int) -> list[str]:
        nonlocal offset
        offset += count
        return problems.prompts("train", offset - count, count)

    rows, stats = [], {}
    largest = {}  # method: (completions, estimates, their Gram) of its largest row, for the agreement
    agree = bool(c["es"]) and bool(c["grpo"])
    for method, sizes in (("es", c["es"]), ("grpo", c["grpo"])):
        for a, b in sizes:
            setting = f"{a} members x {b} prompts" if method == "es" else f"{a} prompts x {b} completions"
            log(f"llm-signal: {method} {setting}: {m} estimates")
            if method == "es":
                es = EGGROLL(lm, population=a, sigma=c["sigma"], rank=1, lr=1.0, optimizer="sgd", seed=seed,
                             es_map=es_map, group_fitness="per_group")
            est, t0 = [], time.perf_counter()
            for k in tqdm(range(m), desc=f"{method}, {a * b} completions", unit="estimate", leave=False,
                          disable=quick):
                if method == "es":
                    v, n = es_estimate(es, tok, problems, fresh(b), members_sample, step=k, names=list(params))
                else:
                    v, n = grpo_estimate(lm, tok, problems, fresh(a), b, c["max_new_tokens"],
                                         seed=seed * 1_000_003 + offset, params=params)
                est.append(v)
            seconds = (time.perf_counter() - t0) / m
            g = gram(est)
            s = noise_scale(g, n)
            stats[(method, n)] = s
            if agree and n >= largest.get(method, (0,))[0]:  # the agreement reads only each method's
                largest[method] = (n, est, g)                 # largest row: a pretrained model's are GBs
            del est
            floor = b_simple_floor(b, dimension) if method == "es" else None
            rows.append([method, setting, n, m, s["signal"], s["signal_se"], s["b_simple"], s["b_simple_lo"],
                         s["b_simple_hi"], floor, seconds, n / seconds])
            log(f"  signal {s['signal']:.4f} ± {s['signal_se']:.4f}, B_simple {s['b_simple']:.3g} completions, "
                f"{seconds:.2f} s per estimate")
    summary, notes = {}, []
    ran = [meth for meth in ("es", "grpo") if any(k[0] == meth for k in stats)]
    for meth in ran:
        pooled = pooled_b_simple([(k[1], v["signal"], v["signal_se"]) for k, v in stats.items() if k[0] == meth])
        summary |= {f"{meth}_{name}": value for name, value in pooled.items()}
    if ran == ["es", "grpo"]:
        rate = {meth: [r[-1] for r in rows if r[0] == meth] for meth in ran}
        summary["es_over_grpo_completions_per_s"] = (sum(rate["es"]) / len(rate["es"])) / (
            sum(rate["grpo"]) / len(rate["grpo"]))
        summary["es_over_grpo_b_simple"] = summary["es_b_simple"] / summary["grpo_b_simple"]
        pooled = {meth: {k[len(meth) + 1:]: v for k, v in summary.items() if k.startswith(meth + "_b_simple")}
                  for meth in ran}
        summary["es_over_grpo_b_simple_at_least"] = ratio_at_least(pooled["es"], pooled["grpo"], z=2)
        (_, a, ga), (_, b, gb) = largest["es"], largest["grpo"]
        summary["agreement"], summary["agreement_se"] = agreement(cross(a, b), ga, gb)
    notes.append("signal = |g|^2 / E|g_hat|^2 = cos^2(step, expected step); b_simple = completions x (1/signal - 1): "
                 "a step of n completions is n / (n + b_simple) signal")
    notes.append("the summary pools each method's rows (pooled_b_simple): lo/hi at one standard error, at_least/"
                 "at_most at two; es_over_grpo_b_simple_at_least = es at_least / grpo at_most, two errors on both "
                 "sides (n/a when GRPO's signal is under two errors)")
    if "es" in ran:
        floor = b_simple_floor(c["es"][0][1], dimension)
        summary["es_b_simple_floor"] = floor
        summary["es_b_simple_over_floor"] = summary["es_b_simple"] / floor
        notes.append(f"b_simple_floor = 2P(d-1) = {floor:,} completions for d = {dimension:,} evolved numbers: isotropic "
                     "ES noise cannot measure less, so B_simple/floor is the part not set by the dimension; B_simple "
                     "is not a training cost (McCandlish's B_noise, what steps scale with, weighs Σ by the Hessian)")
    notes.append("agreement: cos(expected ES step, expected GRPO step) from each method's largest row, with its "
                 "jackknife standard error (n/a when a side's signal is under two standard errors)")
    members = f"members sample at temperature {c['temperature']} (twins: common noise)" if c["temperature"] > 0 \
        else "greedy members"
    what = f"the {dimension:,} numbers of a fixed random subspace (z, train llm --subspace {c['subspace']})" \
        if c["subspace"] else f"the {dimension:,} weights ES evolves"
    notes.append(f"directions over {what}"
                 f"{' (' + ', '.join(c['evolve']) + ')' if c.get('evolve') else ''}; ES sigma {c['sigma']}, {members}; "
                 f"train problems of task seed {seed}, none read twice; {m} estimates a row")
    if crit is not None:
        measured = critical_batch.measure(model, t["task"], t["task_options"], crit, seed, log)
        summary |= {f"es_{k}": measured[k] for k in ("s_min", "e_min", "b_crit")}
        notes.append("es_b_crit: McCandlish's empirical critical batch (completions a step) from steps to a held-out "
                     f"reward gain of {crit['gain']} at populations {crit['populations']} (critical_batch.py): "
                     "what predicts training, unlike b_simple")
    rep = Report(name="llm-signal", question=QUESTION, columns=COLUMNS, rows=rows, summary=summary, notes=notes,
                 details={"critical": measured if crit is not None else None, "environment": environment(), "model": model, "task": t["task"],
                          "task_options": t["task_options"], "seed": seed, "sigma": c["sigma"],
                          "temperature": c["temperature"], "evolve": c.get("evolve"), "subspace": c["subspace"],
                          "max_new_tokens": c["max_new_tokens"]})
    if plot:
        draw(rep.to_dict(), plot)
    return rep


def draw(record: dict, path, title: str = "") -> None:
    """Signal share of one step against completions a step, both methods, from a run's JSON record:
    each row's share (a downward triangle at share + 2 standard errors where it does not show) and
    the curve n / (n + B_simple) of each method's pooled B_simple, shaded between its bounds."""
    from hyperscalees.engine.plotting import pyplot, save_figure
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    colors = {"es": "tab:blue", "grpo": "tab:orange"}
    labels = {"es": "ES (EGGROLL)", "grpo": "GRPO (TRL, dapo)"}
    rows = record["rows"]
    ns = [r["completions"] for r in rows]
    grid = [min(ns) / 2 * (max(ns) * 8 / min(ns)) ** (k / 99) for k in range(100)]
    floor = 1e-6
    for meth, color in colors.items():
        mine = [r for r in rows if r["method"] == meth]
        seen = [r for r in mine if r["signal"] is not None and r["signal"] > 2 * r["signal_se"]]
        unseen = [r for r in mine if r not in seen and r["signal_se"] is not None]
        if seen:
            ax.errorbar([r["completions"] for r in seen], [r["signal"] for r in seen],
                        yerr=[r["signal_se"] for r in seen], fmt="o", color=color, capsize=3, label=labels[meth])
        if unseen:
            ax.plot([r["completions"] for r in unseen], [max(r["signal"] + 2 * r["signal_se"], floor) for r in unseen],
                    "v", color=color, markerfacecolor="none", label=f"{labels[meth]}: not detected (below)")
        b, lo, hi = (record.get(f"{meth}_{k}", record.get(f"{meth}_{k.replace('simple', 'noise')}"))
                     for k in ("b_simple", "b_simple_lo", "b_simple_hi"))  # records before the rename: b_noise
        if b:
            ax.plot(grid, [n / (n + b) for n in grid], color=color, lw=1,
                    label=f"n / (n + B_simple), B_simple {b:,.0f}")
            if lo and hi:
                ax.fill_between(grid, [n / (n + hi) for n in grid], [n / (n + lo) for n in grid], color=color,
                                alpha=0.15, lw=0)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(floor, 1.2)
    ax.set_xlabel("completions a step (n)")
    ax.set_ylabel("signal share of one step, cos² to its expectation")
    ax.set_title(title or f"how much of a step is signal: {record.get('task', '')}", fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    save_figure(fig, path, dpi=90)


def main(argv=None) -> int:
    p = study_cli.parser("llm_signal.py", __doc__)
    p.add_argument("--model", default=None, metavar="DIR", help="the local model folder whose steps are measured")
    p.add_argument("--task", default=None, metavar="NAME", help="the task both methods' steps are read on "
                   "(default countdown)")
    p.add_argument("--task-options", default=None, metavar="JSON", help="the task's options as JSON (default none)")
    p.add_argument("--settings", default=None, metavar="JSON",
                   help="what to measure, e.g. '{\"es\": {\"sigma\": 3e-2, \"members\": [2048, 4096]}}' (only the "
                        f"methods named run; keys: {', '.join(sorted(SETTINGS))})")
    p.add_argument("--critical", default=None, metavar="JSON",
                   help="also train ES at several populations to a fixed held-out reward gain and fit McCandlish's "
                        "critical batch, e.g. '{\"populations\": [8, 32, 128], \"gain\": 0.02}' ('{}': defaults; "
                        f"keys: {', '.join(sorted(critical_batch.DEFAULTS))})")
    p.add_argument("--plot", type=Path, default=None, metavar="FILE",
                   help="draw signal share vs completions a step to this PNG (needs matplotlib)")
    return study_cli.main(p, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
