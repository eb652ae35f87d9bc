"""Per-step metrics as JSONL and CSV in the run directory, and a PNG training curve.

One row per ES step. The CSV has fixed columns (strategy statistics, then the task's
metric names), left empty on steps without a held-out evaluation; JSONL rows only hold
what was measured. Both files are appended and flushed every step, so a crashed run keeps
its history. On resume, rows past the checkpoint's step (written after it, then lost in
the crash) are dropped so the files match an uninterrupted run, and so is an unterminated
last line (an append cut short by the crash). ``time`` is seconds since the current
invocation started (it restarts at a resume).

``samples.jsonl`` holds what a task shows of its evaluations (``AbstractTask.samples``: an LLM's
held-out answers), one line per example with its ``step``; each evaluation's lines go in one
append, and a resume drops lines past the checkpoint the same way.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

from .files import BadFileError, atomic_write, json_safe
from .plotting import pyplot, save_figure

JSONL_FILE = "metrics.jsonl"
CSV_FILE = "metrics.csv"
SAMPLES_FILE = "samples.jsonl"
PLOT_FILE = "curve.png"
STEP_COLUMNS = ("step", "fitness_mean", "fitness_max", "grad_norm", "sigma", "lr", "nonfinite", "time")


def read_rows(path: str | Path) -> list[dict]:
    """The rows of a ``metrics.jsonl`` (none if it does not exist), each checked.

    An unterminated last line is what a crash in the middle of an append leaves: it is
    dropped. Any other line that is not a JSON object with an integer ``step`` raises
    :class:`BadFileError` naming the file and the line.
    """
    path = Path(path)
    if not path.exists():
        return []
    try:
        text = path.read_text()
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as e:
        raise BadFileError(f"cannot read {str(path)!r}: {getattr(e, 'strerror', None) or e}") from None
    lines = text.split("\n")
    torn = lines.pop()  # "" when the file ends with a newline, else a cut-short append
    rows = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise BadFileError(f"{str(path)!r} line {i} is not valid JSON ({e}); delete that line to go on") from None
        if not isinstance(row, dict) or not isinstance(row.get("step"), int):
            raise BadFileError(f"{str(path)!r} line {i} is not a metrics row (a JSON object with an integer 'step')")
        rows.append(row)
    if torn.strip():
        try:
            row = json.loads(torn)
        except json.JSONDecodeError:
            row = None
        if isinstance(row, dict) and isinstance(row.get("step"), int):
            rows.append(row)
    return rows


class MetricsLogger:
    """Appends one row per step to ``metrics.jsonl`` and ``metrics.csv`` in ``directory``."""

    def __init__(self, directory: str | Path, metric_names: tuple[str, ...], start_step: int = 0):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.columns = list(STEP_COLUMNS) + [m for m in metric_names if m not in STEP_COLUMNS]
        self.jsonl_path = self.directory / JSONL_FILE
        self.csv_path = self.directory / CSV_FILE
        kept = [r for r in read_rows(self.jsonl_path) if r["step"] <= start_step] if start_step else []
        # rewritten atomically: a kill during a resume's rewrite must not lose the history
        atomic_write(self.jsonl_path, lambda tmp: self._write_jsonl(tmp, kept))
        atomic_write(self.csv_path, lambda tmp: self._write_csv(tmp, kept))
        self.samples_path, self.start_step = self.directory / SAMPLES_FILE, start_step
        if self.samples_path.exists():
            kept = [r for r in read_rows(self.samples_path) if r["step"] <= start_step] if start_step else []
            atomic_write(self.samples_path, lambda tmp: self._write_jsonl(tmp, kept))

    def moved_to(self, directory: str | Path) -> None:
        """Go on appending in ``directory``: the run directory was renamed (an ``--overwrite`` swap)."""
        self.directory = Path(directory)
        self.jsonl_path = self.directory / JSONL_FILE
        self.csv_path = self.directory / CSV_FILE
        self.samples_path = self.directory / SAMPLES_FILE

    def _write_jsonl(self, path: str, rows: list[dict]) -> None:
        with open(path, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")

    def _write_csv(self, path: str, rows: list[dict]) -> None:
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=self.columns, extrasaction="ignore")
            w.writeheader()
            for r in rows:
                w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in self.columns})

    def log(self, row: dict) -> None:
        row = json_safe(row)[0]  # JSON has no NaN/inf: null
        with open(self.jsonl_path, "a") as f:
            f.write(json.dumps(row) + "\n")
        with open(self.csv_path, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=self.columns, extrasaction="ignore")
            w.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in self.columns})

    def log_samples(self, step: int, samples: list[dict]) -> None:
        """Append ``samples`` (an evaluation's examples) to ``samples.jsonl``, each with ``step``, in one write;
        none for a step the file already covers (a resumed run re-evaluating its checkpoint's step)."""
        if self.start_step and step <= self.start_step:
            return
        text = "".join(json.dumps({"step": step, **json_safe(s)[0]}) + "\n" for s in samples)
        with open(self.samples_path, "a") as f:
            f.write(text)


def reference_metrics(rows: list[dict], metric: str) -> list[str]:
    """Other logged metrics in ``metric``'s unit (its suffix after the first ``_``), e.g. ``bigram_bpb``
    and ``unigram_bpb`` beside ``val_bpb``: the baselines a run is judged against."""
    prefix, sep, unit = metric.partition("_")
    if not sep:
        return []
    names = {k for r in rows for k in r if k != metric and k.endswith("_" + unit) and k.count("_") == 1}
    return sorted(names)


def plot_curve(directory: str | Path, metric: str) -> tuple[Path | None, str | None]:
    """Draw mean fitness and the task ``metric`` against step into ``curve.png``.

    Returns (path, None), or (None, reason) when matplotlib is missing or nothing was logged:
    a missing plot must never fail a finished training run. Logged baselines in the metric's
    unit (:func:`reference_metrics`: lm's bigram and unigram bits per byte, which decide
    ``solved``) are drawn dashed beside it.
    """
    directory = Path(directory)
    try:
        rows = read_rows(directory / JSONL_FILE)
    except BadFileError as e:
        return None, f"skipped {PLOT_FILE}: {e}"
    if not rows:
        return None, "no metrics rows to plot"
    try:
        plt = pyplot()
    except ImportError as e:
        return None, f"skipped {PLOT_FILE}: {e}"
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    fit = [(r["step"], r["fitness_mean"]) for r in rows if r.get("fitness_mean") is not None]
    ax1.plot([s for s, _ in fit], [v for _, v in fit])
    ax1.set(xlabel="step", ylabel="mean fitness", title="population fitness")
    pts = [(r["step"], r[metric]) for r in rows if r.get(metric) is not None]
    ax2.plot([s for s, _ in pts], [v for _, v in pts], marker=".", label=metric)
    for ref in reference_metrics(rows, metric):
        ref_pts = [(r["step"], r[ref]) for r in rows if r.get(ref) is not None]
        ax2.plot([s for s, _ in ref_pts], [v for _, v in ref_pts], linestyle="--", label=ref)
    if len(ax2.get_lines()) > 1:
        ax2.legend()
    ax2.set(xlabel="step", ylabel=metric, title=f"{metric} of the unperturbed model")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, directory / PLOT_FILE), None
