"""engine.plotting: the one place figures are written (atomic, closed, a clear error without matplotlib)."""
import sys

import pytest

from hyperscalees.engine import plotting

plt = pytest.importorskip("matplotlib.pyplot")


def test_save_figure_writes_a_png_makes_folders_and_closes_the_figure(tmp_path):
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    path = plotting.save_figure(fig, tmp_path / "a" / "b" / "f.png", dpi=50)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert fig.number not in plt.get_fignums()  # closed: pyplot holds no reference to it
    assert sorted(p.name for p in path.parent.iterdir()) == ["f.png"]  # no temporary file left beside it


def test_a_failed_write_leaves_no_file_and_still_closes_the_figure(tmp_path, monkeypatch):
    fig, _ = plt.subplots()
    monkeypatch.setattr(fig, "savefig", lambda *a, **k: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError, match="disk full"):
        plotting.save_figure(fig, tmp_path / "f.png")
    assert list(tmp_path.iterdir()) == [] and fig.number not in plt.get_fignums()


def test_missing_matplotlib_is_an_import_error_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"matplotlib is not installed.*hyperscalees\[plot\]"):
        plotting.pyplot()
