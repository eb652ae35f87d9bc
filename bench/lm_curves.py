"""Plot validation bits/byte against wall-clock for several `train lm` runs on one figure.

Usage:
    python bench/lm_curves.py OUT.png LABEL=RUN_DIR [LABEL=RUN_DIR ...] [--json OUT.json] [--keep OLD.json [LABEL ...]]

Each RUN_DIR is a `hyperscalees train lm --out RUN_DIR` directory (ES or `--trainer backprop`);
its metrics.jsonl rows carrying `val_bpb` give the curve (x: the row's `time`, seconds since the
run started, evaluations included). The unigram and bigram baselines of the first run are
drawn as horizontal lines (every run must use the same data for them to apply to all).
``--keep OLD.json`` draws curves an earlier call saved with ``--json`` (all of them, or the labels
listed after it) before the new ones, so a figure can gain a run without re-running the others.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def read_curve(run_dir: Path) -> dict:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    ev = [r for r in rows if r.get("val_bpb") is not None]
    if not ev:
        raise SystemExit(f"{run_dir}: no evaluated rows (val_bpb) in metrics.jsonl")
    return {"time": [r["time"] for r in ev], "val_bpb": [r["val_bpb"] for r in ev], "step": [r.get("step") for r in ev],
            "bigram_bpb": ev[-1]["bigram_bpb"], "unigram_bpb": ev[-1]["unigram_bpb"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("png", help="output PNG path")
    ap.add_argument("runs", nargs="+", metavar="LABEL=RUN_DIR", help="curve label and its run directory")
    ap.add_argument("--json", default=None, help="also write the curves as JSON here")
    ap.add_argument("--keep", nargs="+", default=None, metavar=("OLD.json", "LABEL"),
                    help="first draw these curves saved by an earlier --json (all, or only the labels given)")
    args = ap.parse_args()
    curves = {}
    if args.keep:
        old = json.loads(Path(args.keep[0]).read_text())
        wanted = args.keep[1:] or list(old)
        missing = [label for label in wanted if label not in old]
        if missing:
            raise SystemExit(f"{args.keep[0]}: no curve labelled {missing}; it has {sorted(old)}")
        curves.update({label: old[label] for label in wanted})
    for spec in args.runs:
        label, _, d = spec.partition("=")
        curves[label] = read_curve(Path(d))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, c in curves.items():
        ax.plot([t / 60 for t in c["time"]], c["val_bpb"], label=f"{label} (final {c['val_bpb'][-1]:.3f})")
    first = next(iter(curves.values()))
    ax.axhline(first["bigram_bpb"], color="gray", ls="--", lw=1, label=f"bigram (add-one) {first['bigram_bpb']:.3f}")
    ax.axhline(first["unigram_bpb"], color="gray", ls=":", lw=1, label=f"unigram (add-one) {first['unigram_bpb']:.3f}")
    ax.set_xlabel("wall-clock (minutes, evaluations included)")
    ax.set_ylabel("validation bits / byte")
    ax.set_ylim(top=min(8.5, max(max(c["val_bpb"]) for c in curves.values()) + 0.2))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.png, dpi=120)
    if args.json:
        Path(args.json).write_text(json.dumps(curves, indent=1) + "\n")
    for label, c in curves.items():
        print(f"{label:<28} final val_bpb {c['val_bpb'][-1]:.4f} after {c['time'][-1] / 60:.1f} min, "
              f"{c['step'][-1] if c['step'][-1] is not None else len(c['step'])} {'steps' if c['step'][-1] is not None else 'evaluations'}")


if __name__ == "__main__":
    main()
