"""The one way the package draws a PNG: matplotlib on its file-only backend, written atomically.

matplotlib is an optional extra (``hyperscalees[plot]``), so every figure starts with
:func:`pyplot`, which either returns pyplot or raises an ImportError that says how to install
it; callers for whom a plot is a by-product (a finished training run, a benchmark's figure)
turn that error into a note instead of failing. :func:`save_figure` writes through a temporary
file, so an interrupted write never leaves a truncated PNG under the final name, and closes
the figure (pyplot keeps every open figure alive otherwise).
"""
from __future__ import annotations

from pathlib import Path

from .files import atomic_write

INSTALL_HINT = "pip install 'hyperscalees[plot]'"


def pyplot():
    """matplotlib's pyplot on the Agg (file-only) backend, or an ImportError naming the extra."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError(f"matplotlib is not installed, and plots are drawn with it: {INSTALL_HINT}") from e
    return plt


def save_figure(fig, path, dpi: int = 100) -> Path:
    """Write ``fig`` to ``path`` as a PNG (parent folders made, atomic), close it, return the path."""
    plt = pyplot()
    try:
        return atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=dpi))
    finally:
        plt.close(fig)
