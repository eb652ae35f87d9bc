"""One pre-registered ES-against-GRPO comparison's result file, from the runs' own records (issue 40).

    python bench/prereg_result.py --name sparse --reported RUNS.txt [RUNS2.txt ...] [--tuning TUNING.txt]
                                  [--start-check CHECK.json] [--signal SIGNAL.txt ...] [--headline ARM]
                                  [--out bench/results/cpu/llm_prereg_sparse.json]
                                  [--plot FILE.png]

``--reported`` and ``--tuning`` are files ``bench/llm_vs_grpo.py --json --out FILE`` wrote (their last
JSON line is read): the reported seeds' runs, scored with ``--held-out pooled --snapshot-every S``,
and the ``--tune --tune-only`` run that chose their settings. Several ``--reported`` files (a
registration run across sessions, or its further arms from ``--arms``) are merged: the same task,
start, held-out set and budget, each (arm, seed) once. The result holds the keys every
pre-registration promised (``bench/prereg/README.md``): ``es_median``, ``grpo_median``, ``start``,
``seeds``, ``held_out_problems``, ``budget_s``, ``curve`` (held-out accuracy against training wall
clock, per method and seed, from the start at 0 s), plus the decision under the registered rule
(ES's median >= GRPO's), the prediction quoted from the pre-registration, the commit that
registered it, the tuning, and the start check. Nothing is recomputed: every number is a run's.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RULE = "ES wins when its median held-out accuracy over the reported seeds is >= GRPO's at equal wall clock"


def last_json(path) -> dict:
    """The last line of ``path`` that is a JSON object (a study's ``--json --out`` file)."""
    from study_cli import last_json as last_line
    value = last_line(Path(path).read_text(encoding="utf-8"))
    if value is None:
        raise ValueError(f"{path}: no JSON object line (was it written by a study's --json --out?)")
    return value


def prediction(prereg: Path) -> str:
    """The pre-registration's ``**Prediction**`` paragraph, as registered."""
    text = prereg.read_text(encoding="utf-8")
    m = re.search(r"\*\*Prediction\*\*:?(.*?)(?:\n\n|\Z)", text, re.S)
    if not m:
        raise ValueError(f"{prereg}: no **Prediction** paragraph")
    return " ".join(m.group(1).split())


def registered_in(prereg: Path) -> str | None:
    """The first commit that holds the pre-registration (the history is the record)."""
    try:
        out = subprocess.run(["git", "log", "--diff-filter=A", "--format=%H %cI", "--", prereg.name],
                             capture_output=True, text=True, cwd=prereg.parent, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return None
    return " ".join(out[-2:]) if out else None


def curves(report: dict, start: float) -> dict[str, dict[str, list]]:
    """``{method: {seed: [[seconds, accuracy], ...]}}``: every run's held-out curve from the start (0 s)."""
    out = {}
    for method, runs in report["runs"].items():
        out[method] = {str(r["seed"]): [[0.0, start]] + [[p[0], p[1]] for p in r.get("held_out_curve") or []]
                       for r in runs if r["status"] == "ok"}
    return out


LABELS = {"es": "ES", "grpo": "GRPO"}
SAME = ("task", "task_options", "budget_s", "before")  # what every merged report must share


def merge(reports: list[dict]) -> dict:
    """One report from several ``llm_vs_grpo`` reports of one registration: their runs per arm, refused
    unless they share the task, the start's held-out scores and the budget, and hold each (arm, seed)
    once; ``tuned`` lists each report's settings line."""
    if not reports:
        raise ValueError("no reported file given")
    first = reports[0]
    for i, rep in enumerate(reports[1:], 2):
        for key in SAME:
            if rep.get(key) != first.get(key):
                raise ValueError(f"reported file {i} differs from the first in {key}: {rep.get(key)!r} != "
                                 f"{first.get(key)!r} (not one registration's runs)")
    runs: dict[str, list] = {}
    for rep in reports:
        for arm, rs in (rep.get("runs") or {}).items():
            have = {r["seed"] for r in runs.get(arm, [])}
            twice = sorted(have & {r["seed"] for r in rs})
            if twice:
                raise ValueError(f"{arm} seed {twice[0]} is in two reported files")
            runs.setdefault(arm, []).extend(rs)
    tuned = [rep.get("tuned") for rep in reports]
    return {**first, "runs": runs, "tuned": tuned[0] if len(tuned) == 1 else tuned}


def es_arms(reported: dict, medians: dict) -> tuple[dict, dict]:
    """(median per ES arm, median per subspace size K) over the arms whose runs are ES's."""
    by_arm, by_k = {}, {}
    for arm, rs in reported["runs"].items():
        ok = [r for r in rs if r["status"] == "ok"]
        if not ok or any(r.get("method", arm) != "es" for r in ok) or medians.get(arm) is None:
            continue
        by_arm[arm] = medians[arm]
        ks = {(r.get("settings") or {}).get("subspace") for r in ok}
        if len(ks) == 1 and None not in ks:
            by_k[str(ks.pop())] = medians[arm]
    return by_arm, by_k


SIGNAL_KEYS = ("es_b_simple", "es_b_simple_lo", "es_b_simple_hi", "es_b_simple_at_least", "es_b_simple_floor",
               "es_b_simple_over_floor", "es_b_crit")


def signal_by_k(signals: list[dict]) -> dict[str, dict]:
    """``{k: {...}}`` from ``bench/llm_signal.py --json`` reports of one subspace each (a registration's
    signal step): ES's B_simple with its interval and dimension floor, and the critical-batch runs' steps to
    the gain per population (None: not reached in their step cap). Nothing is recomputed."""
    out = {}
    for rep in signals:
        k = rep.get("subspace")
        if not k:
            raise ValueError("a --signal file measured no subspace (llm_signal's es setting 'subspace')")
        if str(k) in out:
            raise ValueError(f"two --signal files measured k = {k}")
        crit = rep.get("critical") or {}
        out[str(k)] = {**{key.removeprefix("es_"): rep.get(key) for key in SIGNAL_KEYS},
                       "critical_steps": {str(r["population"]): r.get("steps") for r in crit.get("rows", [])},
                       "critical_settings": crit.get("settings"), "rows": rep.get("rows")}
    return out


def headline_median(medians: dict, by_arm: dict, headline: str | None) -> tuple[str | None, float | None]:
    """(the arm, its median) the decision rule reads as ES's: the arm named ``es`` or, where the
    registration names the ES arm it chose on tuning (the anchors' amendment 1), ``headline``; an
    ES arm's, never GRPO's."""
    if headline is None:
        if "es" not in medians and len(by_arm) > 1:
            raise ValueError(f"several ES arms ({', '.join(sorted(by_arm))}) and none named es: name the one the "
                             "registration's rule reads with --headline ARM")
        arm = "es" if "es" in medians or not by_arm else next(iter(by_arm))
        return arm, medians.get(arm)
    if headline not in by_arm:
        raise ValueError(f"--headline {headline!r} is not an ES arm with runs; the ES arms: {sorted(by_arm)}")
    return headline, by_arm[headline]


def build(name: str, reported: dict, tuning: dict | None = None, start_check=None, prereg: Path | None = None,
          signals: list[dict] | None = None, headline: str | None = None) -> dict:
    if not reported.get("runs"):
        raise ValueError("the reported file holds no runs (was it the --tune-only one?)")
    missing = [f"{m} seed {r['seed']}" for m, rs in reported["runs"].items() for r in rs
               if r["status"] == "ok" and not r.get("held_out_curve")]
    if missing:
        raise ValueError(f"no held-out curve for {', '.join(missing)}: run llm_vs_grpo with --snapshot-every")
    start = reported["before"]["accuracy"]
    per_seed = {m: {str(r["seed"]): r["after"]["accuracy"] for r in rs if r["status"] == "ok"}
                for m, rs in reported["runs"].items()}
    med = {m: statistics.median(v.values()) if v else None for m, v in per_seed.items()}
    prereg = prereg or HERE / "prereg" / f"llm_prereg_{name}.md"
    by_arm, by_k = es_arms(reported, med)
    es_arm, es_median = headline_median(med, by_arm, headline)
    out = {"name": name, "es_median": es_median, "es_arm": es_arm, "grpo_median": med.get("grpo"), "start": start,
           "seeds": sorted({r["seed"] for rs in reported["runs"].values() for r in rs}),
           "held_out_problems": reported["before"].get("problems"), "budget_s": reported["budget_s"],
           "curve": curves(reported, start), "accuracy_by_seed": per_seed,
           "formatted_by_seed": {m: {str(r["seed"]): r["after"]["formatted"] for r in rs if r["status"] == "ok"}
                                 for m, rs in reported["runs"].items()},
           "steps_by_seed": {m: {str(r["seed"]): r.get("steps") for r in rs} for m, rs in reported["runs"].items()},
           "failed": [f"{m} seed {r['seed']}: {r['status']}" for m, rs in reported["runs"].items() for r in rs
                      if r["status"] != "ok"],
           "rule": RULE, "es_wins": (es_median is not None and med.get("grpo") is not None
                                     and es_median >= med["grpo"]),
           "start_metrics": reported["before"], "task": reported["task"], "task_options": reported["task_options"],
           "settings": reported.get("tuned"), "prereg": str(prereg.relative_to(HERE.parent)) if prereg.is_relative_to(
               HERE.parent) else str(prereg), "registered_in": registered_in(prereg),
           "prediction": prediction(prereg), "environment": reported.get("environment")}
    if len(by_arm) > 1:
        out["es_median_by_arm"] = by_arm
    if by_k:
        out["es_median_by_k"] = by_k
    if tuning is not None:
        out["tuning"] = tuning.get("tuning")
    if start_check is not None:
        out["start_check"] = start_check
    if signals:
        out["signal_by_k"] = signal_by_k(signals)
    return out


def plot(result: dict, path: Path) -> str:
    """Held-out accuracy against training wall clock, every seed of both methods, the start dashed."""
    from hyperscalees.engine.plotting import pyplot, save_figure
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    colors = {"es": "C0", "grpo": "C1"}
    colors |= {arm: f"C{i}" for i, arm in enumerate((a for a in result["curve"] if a not in colors), 2)}
    medians = {**{m: result[f"{m}_median"] for m in ("es", "grpo") if result.get(f"{m}_median") is not None},
               **result.get("es_median_by_arm", {})}
    if result.get("es_arm") and result.get("es_median") is not None:
        medians[result["es_arm"]] = result["es_median"]
    for method, seeds in result["curve"].items():
        for i, (seed, pts) in enumerate(sorted(seeds.items())):
            ax.plot([p[0] for p in pts], [100 * p[1] for p in pts], "o-", color=colors.get(method), alpha=0.7, ms=3,
                    label=f"{LABELS.get(method, method)} (median {100 * medians[method]:.1f}%)" if i == 0 else None)
    ax.axhline(100 * result["start"], color="gray", ls="--", lw=1, label=f"start {100 * result['start']:.1f}%")
    ax.set(xlabel="training wall clock (s)", ylabel=f"held-out accuracy (%), {result['held_out_problems']} problems",
           title=f"pre-registered: {result['name']} ({len(result['seeds'])} seeds; ES wins: {result['es_wins']})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    saved = Path(save_figure(fig, path)).resolve()
    return str(saved.relative_to(HERE.parent)) if saved.is_relative_to(HERE.parent) else str(saved)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python bench/prereg_result.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--name", required=True, help="the pre-registration: bench/prereg/llm_prereg_NAME.md")
    p.add_argument("--reported", required=True, type=Path, nargs="+",
                   help="llm_vs_grpo --json --out files of the reported seeds (several: merged)")
    p.add_argument("--tuning", type=Path, default=None, help="llm_vs_grpo --tune --tune-only --json --out file")
    p.add_argument("--start-check", type=Path, default=None, help="a JSON file: the start check's numbers")
    p.add_argument("--signal", type=Path, nargs="+", default=None,
                   help="bench/llm_signal.py --json --out files, one per subspace size (the signal step)")
    p.add_argument("--headline", default=None, metavar="ARM",
                   help="the ES arm the decision rule reads (es_median), where the registration chose it among "
                        "several on the tuning seed (default: the arm named es)")
    p.add_argument("--out", type=Path, default=None, help="default: bench/results/cpu/llm_prereg_NAME.json")
    p.add_argument("--plot", type=Path, default=None, help="default: the --out file with .png")
    a = p.parse_args(argv)
    try:
        result = build(a.name, merge([last_json(f) for f in a.reported]), last_json(a.tuning) if a.tuning else None,
                       json.loads(a.start_check.read_text()) if a.start_check else None,
                       signals=[last_json(f) for f in a.signal or ()], headline=a.headline)
    except (OSError, ValueError, KeyError) as e:
        print(f"prereg_result: {e}", file=sys.stderr)
        return 2
    out = a.out or HERE / "results" / "cpu" / f"llm_prereg_{a.name}.json"
    result["plot"] = plot(result, a.plot or out.with_suffix(".png"))
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"{out}: ES median {result['es_median']:.4f}, GRPO median {result['grpo_median']:.4f}, start "
          f"{result['start']:.4f} on {result['held_out_problems']} problems; ES wins: {result['es_wins']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
