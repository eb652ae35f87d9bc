"""Question: at equal wall clock, does ES (``train llm``) raise held-out accuracy more than GRPO (TRL)?

For every reported seed, one run per method, one after the other (the order rotates with the
seed), or with ``--side-by-side`` both at the same time, one per core, so both meet the same
contention and a 2-core machine takes half the wall clock; each in its own subprocess with the same
intra-op thread count (``OMP_NUM_THREADS``, default 1) and the same training budget in seconds:

- ``es``: ``hyperscalees train llm --model M --task T --seed S --time-budget B`` (EGGROLL, the
  task's defaults: population 32, sigma 1e-3, lr 1e-3, Adam, rank 1, scores normalised per
  prompt), its exported model scored by this process after the run (the run's own evaluation,
  at the end only, may be cut short by the budget's deadline). Its clock starts at
  the engine's start (after imports, with transformers imported first so its import is not
  counted: ``bench/es_run.py``), so loading the model and building the strategy count against ES.
- ``grpo``: ``python bench/grpo_run.py`` (TRL's ``GRPOTrainer``, TRL's
  defaults but temperature 1, beta 0; needs the ``grpo`` extra): the same model folder, the same
  train prompts in the same order (step s: problems s·P ... s·P+P-1), the same reward, the same
  max new tokens; its clock starts at ``on_train_begin``. G = 8 completions per prompt.

Both stop before the next step would pass the budget. One evaluator (``tasks/problems/evaluate.py``):
greedy answers to the first E held-out problems (the same for every seed), before and after,
outside the clock. By default neither side is tuned: both run their library defaults. With
``--tune`` (``llm_tuning``), each method first trains every setting of its grid (ES: lr, sigma,
population; GRPO: learning rate, generations; the same number of settings) on ``--tuning-seeds``
(default 0) for the same budget, and the reported seeds run the setting with the best mean
validation accuracy (the task's validation split: neither training nor test problems); the grid, every
score and the choice go into the JSON (``tuning``).

Reported per method and seed: held-out accuracy before and after, formatted share, steps,
training seconds, generations per second (completions of the step's prompts per training
second), and per method the median and range over seeds. ``--plot FILE`` draws the mean train
reward per step against training wall clock; ``--runs-dir DIR`` keeps every run's JSON as it ends, and
the same command again with the same DIR reads the finished runs back
(``hyperscalees.benchmarks.run_store``): a study longer than a working session resumes where it was cut.

``--settings JSON`` runs given settings instead of either side's defaults, with no tuning:
``{"es": {"lr": 1e-4, "sigma": 1e-2, "optimizer": "sgd"}, "grpo": {"learning_rate": 3e-4}}`` (the
keys ``llm_tuning.SETTING_KEYS`` allows; a method left out runs its defaults), for settings a
tuning chose earlier, now on fresh seeds or a larger population. ``--arms JSON`` runs named arms instead
of one ES and one GRPO run a seed, each a method with its settings (``{"es_k256": {"method": "es",
"settings": {"subspace": 256}}, ...}``): two settings of one method side by side, as a
pre-registration's further arms; each arm's records and medians go under its name. ``--device cuda`` trains and
scores every run on the GPU (runs one at a time: two runs would share the one GPU).

``--warm-start-minutes M`` first builds a small Llama from a config (hidden 64, 2 layers, a
character vocabulary; ``bench/warm_start.py``), trains it by backprop on the task's reference solutions
for M minutes, saves it (under ``--runs-dir``, or a temporary folder) and uses it as the model:
demonstration 1 of the LLM guide. ``--warm-start-options JSON`` changes the task's options for the
warm start alone (``{"train_size": 64}``: 64 distinct problems, so ES and GRPO then train on
problems it has not memorised). ``--quick`` builds a tiny model and runs a few seconds.

One of the project's studies (demonstrations 1 and 2 of the LLM guide, docs/llm-vs-grpo.md), run
from a source checkout; the runs themselves are in ``bench/llm_runs.py``:

    python bench/llm_vs_grpo.py [--quick] [--json] (--model DIR | --warm-start-minutes M [--warm-start-options JSON])
                                [--seeds S ...]
                                [--budget SECONDS] [--threads N] [--plot FILE] [--runs-dir DIR] [--out FILE]
                                [--tune [--tuning-seeds S ...] | --settings JSON] [--side-by-side] [--eval-prompts N] [--max-new-tokens N]
                                [--device cpu|cuda]
"""
from __future__ import annotations

import json
import os
import statistics
import tempfile
import textwrap
import time
from pathlib import Path

import llm_tuning
import study_cli
from hyperscalees.benchmarks.base import BenchSetupError, Report, environment
from hyperscalees.benchmarks.run_store import RunStore
from hyperscalees.engine.plotting import pyplot, save_figure
from llm_runs import (_json_object, before_accuracy, check_side_by_side, concurrently, run_es, run_grid, run_grpo,
                      stopped_early, with_task)
from warm_start import warm_start

QUESTION = ("held-out accuracy after equal training wall clock: ES (train llm, EGGROLL) vs GRPO (TRL), one evaluator, "
            "the same tuning budget on both sides (none by default, --tune for a grid on tuning seeds)")
UNTUNED = "nothing: ES runs train llm's defaults, GRPO TRL's defaults (temperature 1, beta 0)"
GIVEN = ("nothing here: the settings were given (--settings) {given}; a method not named runs its defaults "
         "(ES train llm's, GRPO TRL's)")
ARMS = "nothing here: every arm's method and settings were given (--arms) {arms}"
METHODS = ("es", "grpo")
HELD_OUT = {"test": "the first {e} distinct test problems (the same for every seed)",
            "pooled": "every distinct validation and test problem, pooled ({n} problems)"}
TASK = "arithmetic"
# two steps, operands up to 5: thousands of distinct problems, so a 9-minute warm start reaches ~40% held-out
# accuracy without memorising the training problems (one step: ~100 problems, memorised; operands up to 9: 5%)
TASK_OPTIONS = {"min_steps": 2, "max_steps": 2, "max_number": 5}
COLUMNS = ["method", "seed", "acc_before", "acc_after", "formatted_after", "reward_after", "steps", "train_s",
           "gen_per_s"]


def configs(quick: bool) -> dict:
    """The benchmark's settings. 64 new tokens: a two-step solution is 40-57 characters (the char Llama's
    tokens) plus the answer tag; at 48, 39% of them were cut before their answer."""
    task = dict(task=TASK, task_options=dict(TASK_OPTIONS))
    if quick:
        return dict(seeds=(100,), budget=3.0, prompts=2, generations=4, population=8, max_new_tokens=8,
                    eval_prompts=4, **task)
    return dict(seeds=(100, 101, 102), budget=240.0, prompts=4, generations=8, population=32, max_new_tokens=64,
                eval_prompts=128, **task)






























# -- summaries and the report -------------------------------------------------------------
def device_name(device: str) -> str:
    """The device in words for the report: a GPU's name, or "the CPU"."""
    if device == "cpu":
        return "the CPU"
    import torch
    return f"{device} ({torch.cuda.get_device_name()})" if torch.cuda.is_available() else device


def _median(values):
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def summarize(runs: list[dict]) -> dict:
    ok = [r for r in runs if r["status"] == "ok"]
    acc = [r["after"]["accuracy"] for r in ok]
    return {"seeds": [r["seed"] for r in runs], "ok": len(ok), "acc_after_median": _median(acc),
            "acc_after_min": min(acc) if acc else None, "acc_after_max": max(acc) if acc else None,
            "steps_median": _median([r.get("steps") for r in ok]),
            "train_s_median": _median([r.get("train_s") for r in ok]),
            "gen_per_s_median": _median([r.get("generations_per_s") for r in ok])}


def build_report(model: str, before: dict, runs: dict[str, list[dict]], budget: float, threads: int, c: dict,
                 notes=(), warm: dict | None = None, tuning: dict | None = None, side_by_side: bool = False,
                 given: dict | None = None, arms: dict | None = None) -> Report:
    rep = Report("llm", QUESTION, COLUMNS)
    nan = lambda v: float("nan") if v is None else v
    summaries = {}
    for m, rs in runs.items():
        for r in rs:
            a = r.get("after") or {}
            rep.rows.append([m, r["seed"], before["accuracy"], nan(a.get("accuracy")), nan(a.get("formatted")),
                             nan(a.get("reward")), nan(r.get("steps")), nan(r.get("train_s")),
                             nan(r.get("generations_per_s"))])
        s = summaries[m] = summarize(rs)
        spread = ("n/a" if s["acc_after_min"] is None
                  else f"{s['acc_after_median']:.3g} [{s['acc_after_min']:.3g}, {s['acc_after_max']:.3g}]")
        rep.rows.append([m, "median [min, max]", before["accuracy"], spread, "", "", nan(s["steps_median"]),
                         nan(s["train_s_median"]), nan(s["gen_per_s_median"])])
    med = {m: s["acc_after_median"] for m, s in summaries.items() if s["acc_after_median"] is not None}
    rep.summary = {"model": model, "task": c["task"], "task_options": c["task_options"], "budget_s": budget,
                   "threads": threads, "side_by_side": side_by_side, "before": before, "acc_after_median": med,
                   "settings": {k: c[k] for k in ("prompts", "generations", "population", "max_new_tokens",
                                                  "eval_prompts")},
                   "tuned": (llm_tuning.PROTOCOL.format(seeds=tuning["seeds"], budget=tuning.get("budget_s", budget),
                                                        chosen={m: t["chosen"] for m, t in tuning["methods"].items()})
                             if tuning else ARMS.format(arms={a: {"method": m, "settings": st} for a, (m, st) in arms.items()})
                             if arms else GIVEN.format(given=given) if given else UNTUNED),
                   "device": device_name(c.get("device", "cpu")), "environment": environment()}
    if warm:
        rep.summary["warm_start"] = warm
    if tuning:
        rep.summary["tuning"] = {**tuning, "validation": llm_tuning.VALIDATION.format(count=c["eval_prompts"])}
    rep.details = {"methods": summaries, "runs": runs}
    scored = before.get("problems", c["eval_prompts"])
    rep.notes += [f"acc: held-out accuracy, greedy, "
                  + HELD_OUT[c.get("held_out", "test")].format(e=c["eval_prompts"], n=scored) + "; "
                  f"acc_before is the starting model's; a score's standard error is up to "
                  f"{50 / scored ** 0.5:.1f} points (--eval-prompts / --held-out set how many problems)",
                  f"every run: {budget:g} s of training wall clock on {device_name(c.get('device', 'cpu'))}, "
                  f"OMP_NUM_THREADS={threads}, "
                  + (f"a seed's {' and '.join(arms) if arms else 'ES and GRPO'} runs side by side (started together, "
                     "one per core)" if side_by_side else "one run at a time") + "; evaluation outside the clock",
                  "steps: ES steps (population x prompts) or GRPO steps (prompts x completions), "
                  + ("each method's chosen setting (tuning)" if tuning else "each arm's given setting (--arms)" if arms else
                     "each method's given setting (--settings; a method not named: its defaults)" if given else
                     f"ES {c['population']} x {c['prompts']}, GRPO {c['prompts']} x {c['generations']}")
                  + "; gen_per_s: completions per training second",
                  "ES's clock includes loading the model and building the strategy; GRPO's starts at on_train_begin"]
    rep.notes += [f"{r['method']} seed {r['seed']}: {r['status']}" for rs in runs.values() for r in rs
                  if r["status"] != "ok"]
    rep.notes += [why for rs in runs.values() for r in rs if (why := stopped_early(r))]
    rep.notes += list(notes)
    return rep


LABELS = {"es": ("ES: EGGROLL (train llm)", "C0"), "grpo": ("GRPO (TRL)", "C1")}


SMOOTH_STEPS = 20  # the running mean drawn over each seed's raw per-step reward (4 prompts a step is noisy)


def running_mean(values: list[float], window: int) -> list[float]:
    """Mean of the last ``window`` values (fewer at the start) at every position: a trend that
    a per-step reward over a handful of prompts hides."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a whole number >= 1, got {window!r}")
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v - (values[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def plot_curves(runs: dict[str, list[dict]], path: Path, title: str = "", before: float | None = None) -> str:
    """Left: train reward per step against training wall clock, every seed of both methods (raw,
    faint; a running mean of :data:`SMOOTH_STEPS` steps, bold). Right: each seed's held-out
    accuracy after training, against the starting model's (``before``, dashed)."""
    try:
        plt = pyplot()
    except ImportError as e:
        return f"no plot: {e}"
    fig, (ax, acc) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [3, 1]})
    for k, (m, rs) in enumerate(runs.items()):
        label, color = LABELS.get(m, (m, None))
        for i, r in enumerate(x for x in rs if x.get("curve")):
            t, reward = [p[0] for p in r["curve"]], [p[1] for p in r["curve"]]
            ax.plot(t, reward, color=color, alpha=0.15, lw=0.8)
            ax.plot(t, running_mean(reward, SMOOTH_STEPS), color=color, lw=1.8,
                    label=f"{label} ({len(rs)} seeds)" if i == 0 else None)
        after = [r["after"]["accuracy"] for r in rs if r.get("after")]
        acc.scatter([k] * len(after), after, color=color, zorder=3)
    if before is not None:
        acc.axhline(before, color="gray", ls="--", lw=1, label="start")
        acc.legend(fontsize=8)
    acc.set(xticks=range(len(runs)), xticklabels=list(runs), xlim=(-0.6, len(runs) - 0.4),
            ylabel="held-out accuracy after", title="each seed")
    ax.set(xlabel="training wall clock (s)", ylabel="mean train reward per step")
    ax.set_title(textwrap.fill(title, 70), fontsize=10)  # a task's options can outrun the axes
    for a in (ax, acc):
        a.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = save_figure(fig, path)
    return (f"plot: {path} (one line per seed, a {SMOOTH_STEPS}-step running mean over the raw reward; "
            "reward 1 correct, 0.1 well formed, 0 otherwise; right: held-out accuracy after, per seed)")


def _quick_model(folder: Path) -> str:
    from hyperscalees import llm
    from warm_start import char_llama
    model, tok = char_llama(hidden=32, layers=2, heads=4, seed=0)
    return str(llm.save_pretrained(model, tok, folder, overwrite=True))






def given_settings(text, methods) -> dict:
    """``--settings``: ``{method: settings}`` from JSON text (or a dict), each checked by
    ``llm_tuning.check_settings``; a method not in ``methods`` is refused (its settings would go unused)."""
    value = _json_object(text, "--settings")
    for m, settings in value.items():
        if m not in methods:
            raise BenchSetupError(f"--settings names {m!r}, which is not a method run here ({list(methods)})")
        try:
            value[m] = llm_tuning.check_settings(m, settings)
        except ValueError as e:
            raise BenchSetupError(f"--settings: {e}") from None
    return value


def given_arms(text) -> dict[str, tuple[str, dict]]:
    """``--arms``: ``{name: {"method": "es"|"grpo", "settings": {...}}}`` from JSON text (or a dict), each
    arm's settings checked as ``--settings``'s: two settings of one method run as two arms, side by
    side on a seed (a pre-registration's further arms, e.g. ES at two subspace sizes)."""
    value = _json_object(text, "--arms")
    if len(value) < 1:
        raise BenchSetupError("--arms needs at least one arm")
    arms = {}
    for name, arm in value.items():
        if not (isinstance(name, str) and name.replace("_", "").isalnum()):
            raise BenchSetupError(f"--arms: an arm's name must be letters, digits and _, got {name!r}")
        if not isinstance(arm, dict) or set(arm) - {"method", "settings"} or arm.get("method") not in METHODS:
            raise BenchSetupError(f"--arms: arm {name!r} must be {{\"method\": one of {list(METHODS)}, \"settings\": "
                                  f"{{...}}}}, got {arm!r}")
        try:
            arms[name] = (arm["method"], llm_tuning.check_settings(arm["method"], arm.get("settings", {})))
        except ValueError as e:
            raise BenchSetupError(f"--arms: {name}: {e}") from None
    return arms


def given_grids(text, methods) -> dict:
    """``--grid``: ``{method: [settings, ...]}`` from JSON text (or a dict), one list for every method run
    here, each entry checked and the lists of equal length (``llm_tuning.check_grids``: the same tuning
    budget on both sides)."""
    value = _json_object(text, "--grid")
    if set(value) != set(methods):
        raise BenchSetupError(f"--grid needs a list of settings for each method run here ({list(methods)}), "
                              f"got {sorted(value)}")
    if not all(isinstance(g, list) for g in value.values()):
        raise BenchSetupError(f"--grid: each method's grid is a JSON list of settings, got {value}")
    grids = {m: tuple(value[m]) for m in methods}
    try:
        llm_tuning.check_grids(grids)
    except ValueError as e:
        raise BenchSetupError(f"--grid: {e}") from None
    return grids


def with_eval_prompts(c: dict, count) -> dict:
    """``c`` scoring on the first ``count`` distinct problems of the test (and validation) split,
    refused unless both splits hold that many."""
    from hyperscalees.tasks.problems import PROBLEM_SETS
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise BenchSetupError(f"--eval-prompts must be a whole number >= 1, got {count!r}")
    task = PROBLEM_SETS[c["task"]](seed=0, options=c["task_options"])
    held = min(task.distinct_size("test"), task.distinct_size("validation"))
    if count > held:
        raise BenchSetupError(f"--eval-prompts {count}: task {c['task']!r} holds {held} distinct test (or "
                              "validation) problems (its options set how many; a score over repeats would count "
                              "some twice)")
    return {**c, "eval_prompts": count}


def run(quick: bool = False, device: str = "cpu", log=print, seeds=None, budget=None, plot=None, threads: int = 1,
        runs_dir=None, model=None, warm_start_minutes=None, methods=None, tune: bool = False,
        tuning_seeds=None, task=None, task_options=None, warm_start_options=None,
        side_by_side: bool = False, eval_prompts=None, settings=None, grid=None, tune_only: bool = False,
        tuning_budget=None, held_out: str = "test", snapshot_every=None, arms=None, max_new_tokens=None) -> Report:
    if device not in ("cpu", "cuda"):
        raise BenchSetupError(f"llm_vs_grpo runs on cpu or cuda, got --device {device!r}")
    if held_out not in HELD_OUT:
        raise BenchSetupError(f"--held-out must be one of {list(HELD_OUT)}, got {held_out!r}")
    c = {**with_task(configs(quick), task, task_options), "device": device, "held_out": held_out,
         "snapshot_s": snapshot_every}
    if eval_prompts is not None:
        c = with_eval_prompts(c, eval_prompts)
    if max_new_tokens is not None:
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise BenchSetupError(f"--max-new-tokens must be a whole number >= 1, got {max_new_tokens!r}")
        c = {**c, "max_new_tokens": max_new_tokens}  # both sides' training answers and every score's
    if warm_start_options is not None:
        if not warm_start_minutes:
            raise BenchSetupError("--warm-start-options needs --warm-start-minutes")
        warm_start_options = with_task(c, None, {**c["task_options"], **_json_object(warm_start_options)})[
            "task_options"]
    seeds, budget = tuple(seeds or c["seeds"]), float(budget or c["budget"])
    if arms is not None:
        arms = given_arms(arms)
        if tune or settings is not None or methods:
            raise BenchSetupError("--arms gives every run's method and settings: leave out --tune and --settings")
    methods = tuple(arms or methods or METHODS)  # each arm runs under its own name, with its method's runner
    if (tune_only or tuning_budget is not None) and not tune:
        raise BenchSetupError("--tune-only and --tuning-budget need --tune")
    if tuning_seeds is not None and not tune:
        raise BenchSetupError("--tuning-seeds needs --tune (without it nothing is tuned)")
    tuning_seeds = tuple(llm_tuning.TUNING_SEEDS if tuning_seeds is None else tuning_seeds)
    if tune and set(seeds) & set(tuning_seeds):
        raise BenchSetupError(f"seeds {sorted(set(seeds) & set(tuning_seeds))} are tuning seeds: report seeds "
                              "the settings were not chosen on")
    if tune and settings is not None:
        raise BenchSetupError("--settings gives each method its settings, --tune chooses them: use one")
    given = given_settings(settings, methods) if settings is not None else None
    grids = given_grids(grid, methods) if grid is not None else None
    if grids is not None and not tune:
        raise BenchSetupError("--grid gives the settings --tune chooses from: it needs --tune")
    if side_by_side:
        check_side_by_side(methods, threads, device=device)
    if "grpo" in methods or any(m == "grpo" for m, _ in (arms or {}).values()):
        import importlib.util
        if importlib.util.find_spec("trl") is None:
            raise BenchSetupError("the GRPO side needs trl: pip install 'hyperscalees[grpo]'")
    with tempfile.TemporaryDirectory(prefix="hs_bench_llm_model_") as tmp:
        warm = None
        if warm_start_minutes:
            folder = Path(runs_dir or tmp) / "warm_start_model"
            log(f"llm_vs_grpo: warm start, {warm_start_minutes:g} min of supervised training -> {folder}")
            warm = warm_start(folder, warm_start_minutes, c, log=log, options=warm_start_options)
            log(f"  warm start: {warm['steps']} steps, held-out accuracy {warm['before']['accuracy']:.3f} -> "
                f"{warm['after']['accuracy']:.3f}")
            model = str(folder)
        elif model is None:
            if not quick:
                raise BenchSetupError("give --model DIR (a local model folder) or --warm-start-minutes M")
            model = _quick_model(Path(tmp) / "quick_model")
        # a warm-started model is trained again on every call: nothing saved before describes it
        store = RunStore(runs_dir if runs_dir is not None and not warm_start_minutes else None)
        scoring = {k: v for k, v in c.items() if k not in ("seeds", "budget")}  # every setting a run or score reads
        method_of = {m: arms[m][0] if arms else m for m in methods}

        def key_of(m: str, seed: int, settings: dict | None, run_budget: float, validate: bool) -> dict:
            return {"arm": m, "method": method_of[m], "seed": seed, "budget_s": run_budget, "settings": settings or {},
                    "model": str(model), "threads": threads, "side_by_side": side_by_side, "validate": validate,
                    "config": scoring}

        before_key = {"model": str(model), "config": scoring}
        before = store.load("before", before_key)
        if before is None:
            before = before_accuracy(model, c)
            store.save("before", before_key, before)
        log(f"llm_vs_grpo: {model}: held-out accuracy before {before['accuracy']:.3f}")
        sides = {"es": run_es, "grpo": run_grpo}
        sides |= {name: sides[m] for name, (m, _) in (arms or {}).items()}
        tuning_budget = float(tuning_budget or budget)
        tuning = (run_grid(sides, model, methods, tuning_seeds, tuning_budget, threads, c, quick, log,
                           side_by_side=side_by_side, grids=grids, store=store,
                           key_of=lambda m, seed, settings: key_of(m, seed, settings, tuning_budget, True))
                  if tune else None)
        chosen = {m: tuning[m]["chosen"] if tuning else arms[m][1] if arms else (given or {}).get(m) for m in methods}
        runs = {m: [] for m in methods}

        def one_run(m: str, seed: int) -> dict:
            load = os.getloadavg()[0]
            log(f"  seed {seed}: {m} (budget {budget:g} s, load {load:.2f}{', side by side' if side_by_side else ''})")
            t = time.perf_counter()
            return {**sides[m](model, seed, budget, threads, c, chosen[m]), "arm": m, "load_before": load,
                    "wall_s": round(time.perf_counter() - t, 1), "side_by_side": side_by_side}

        def keep(m: str, seed: int, rec: dict, fresh: bool = True) -> None:
            """Saved as soon as it ends (a pair, once both end): a crash loses no finished run."""
            runs[m].append(rec)
            if fresh:
                store.save(f"{m}_seed{seed}", key_of(m, seed, chosen[m], budget, False),
                           {"load_after": list(os.getloadavg()), **rec})
            a = rec.get("after")
            log(f"    {m} seed {seed}: {rec['status']}{'' if fresh else ' (read back)'}; accuracy "
                f"{before['accuracy']:.3f} -> " + (f"{a['accuracy']:.3f} in {rec.get('steps')} steps" if a else "n/a"))

        for i, seed in enumerate(() if tune_only else seeds):
            order = methods[i % len(methods):] + methods[:i % len(methods)]  # rotate who goes first
            saved = {m: store.load(f"{m}_seed{seed}", key_of(m, seed, chosen[m], budget, False)) for m in order}
            if side_by_side and any(r is None for r in saved.values()):  # a pair runs again whole
                for m, rec in zip(order, concurrently([lambda m=m: one_run(m, seed) for m in order])):
                    keep(m, seed, rec)
                continue
            for m in order:
                if saved[m] is not None:
                    keep(m, seed, saved[m], fresh=False)
                else:
                    keep(m, seed, one_run(m, seed))
    notes = ([plot_curves(runs, plot, f"{c['task']} {json.dumps(c['task_options'])}", before["accuracy"])]
             if plot else [])
    if runs_dir is not None:
        notes.append(f"every run's record: {runs_dir}/METHOD_seedS.json")
    return build_report(model, before, runs, budget, threads, c, notes, warm,
                        tuning and {"seeds": list(tuning_seeds), "budget_s": tuning_budget, "methods": tuning},
                        side_by_side, given, arms)


def flags(p) -> None:
    """This study's own flags (each passed to :func:`run` when given)."""
    p.add_argument("--model", default=None, metavar="DIR", help="the local model folder ES and GRPO fine-tune")
    p.add_argument("--warm-start-minutes", type=study_cli.positive_float, default=None, metavar="M",
                   help="build a small Llama, train it by backprop on the task's solutions for M minutes, and "
                        "fine-tune that (demonstration 1)")
    p.add_argument("--warm-start-options", default=None, metavar="JSON",
                   help="task options for the warm start alone, over --task-options, e.g. '{\"train_size\": 64}' "
                        "(a warm start on 64 problems; ES and GRPO train on them all)")
    p.add_argument("--task", default=None, metavar="NAME", help=f"the task both methods train on (default {TASK})")
    p.add_argument("--task-options", default=None, metavar="JSON",
                   help="the task's options as JSON (default: the demonstration's with its task, else none)")
    p.add_argument("--seeds", type=study_cli.seed, nargs="+", default=None, metavar="S",
                   help="seeds to report (default: 100 101 102; with --quick: 100); never a tuning seed")
    p.add_argument("--budget", type=study_cli.positive_float, default=None, metavar="SECONDS",
                   help="wall-clock budget of every run, ES and GRPO alike (default 240; --quick 3)")
    p.add_argument("--tune", action="store_true", default=None,
                   help="first train each method's grid (the same number of settings for ES and GRPO) on "
                        "--tuning-seeds and pick its settings by validation accuracy (validation problems: never a "
                        "training or test one)")
    p.add_argument("--tuning-seeds", type=study_cli.seed, nargs="+", default=None, metavar="S",
                   help="with --tune: the seeds settings are tuned on, refused as --seeds (default 0)")
    p.add_argument("--settings", default=None, metavar="JSON",
                   help="each method's settings instead of its defaults, no tuning, e.g. '{\"es\": {\"lr\": 1e-4, "
                        "\"sigma\": 1e-2, \"optimizer\": \"sgd\", \"population\": 512}, \"grpo\": {\"learning_rate\": "
                        "3e-4, \"prompts\": 16}}' (settings a tuning chose, on fresh seeds)")
    p.add_argument("--arms", default=None, metavar="JSON",
                   help="runs of given settings under names of their own instead of one ES and one GRPO run a seed, "
                        "e.g. two ES subspace sizes side by side: '{\"es_k256\": {\"method\": \"es\", \"settings\": "
                        "{\"subspace\": 256}}, \"es_k4096\": {\"method\": \"es\", \"settings\": {\"subspace\": 4096}}}'")
    p.add_argument("--held-out", default=None, choices=tuple(HELD_OUT),
                   help="what every reported score answers: test (the first --eval-prompts distinct test problems, "
                        "the default) or pooled (every distinct validation and test problem)")
    p.add_argument("--snapshot-every", type=study_cli.positive_float, default=None, metavar="SECONDS",
                   help="both sides save their model every SECONDS of training; each is scored afterwards, outside "
                        "the clock: a held-out curve against wall clock per run (held_out_curve)")
    p.add_argument("--tune-only", action="store_true", default=None,
                   help="with --tune: stop after tuning (the reported seeds then run later, with --settings set to "
                        "the choice)")
    p.add_argument("--tuning-budget", type=study_cli.positive_float, default=None, metavar="SECONDS",
                   help="with --tune: each tuning run's wall-clock budget (default: --budget)")
    p.add_argument("--grid", default=None, metavar="JSON",
                   help="with --tune: each method's grid instead of the built-in one, the same length for every "
                        "method, e.g. '{\"es\": [{\"lr\": 1e-4}, {\"lr\": 1e-3}], \"grpo\": [{\"learning_rate\": "
                        "1e-4}, {\"learning_rate\": 1e-3}]}' (a pre-registration's grid)")
    p.add_argument("--side-by-side", action="store_true", default=None,
                   help="run each seed's ES and GRPO runs (and each tuning setting pair) at the same time, one per "
                        "core: both meet the same contention, in half the wall clock; needs 2 x --threads CPUs")
    p.add_argument("--eval-prompts", type=int, default=None, metavar="N",
                   help="the held-out problems every score uses (test; validation with --tune; default 128). A "
                        "score over N problems has a standard error of up to 50/sqrt(N) points (4.4 at 128, 2.2 at 512)")
    p.add_argument("--max-new-tokens", type=int, default=None, metavar="N",
                   help="new tokens at most per answer, for both methods' training and every score (default 64: a "
                        "two-step Countdown solution of the char Llama; a chat model's one-step answer needs fewer)")
    p.add_argument("--plot", type=Path, default=None, metavar="FILE",
                   help="draw train reward vs wall clock of every method and seed to this PNG (needs matplotlib)")
    p.add_argument("--runs-dir", type=Path, default=None, metavar="DIR",
                   help="save every run's record (curve, times, status, load) as DIR/METHOD_seedS.json (tuning "
                        "runs under DIR/tuning/) as it ends; the same command again with the same DIR reads finished "
                        "runs back instead of training them again (a study spanning sessions; a side-by-side pair "
                        "cut short runs again whole)")


def main(argv=None) -> int:
    p = study_cli.parser("llm_vs_grpo.py", __doc__)
    flags(p)
    return study_cli.main(p, run, argv, child_threads=True)


if __name__ == "__main__":
    raise SystemExit(main())
