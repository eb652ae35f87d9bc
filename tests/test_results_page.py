"""docs/results.md is generated from bench/results/: a result changed without regenerating fails here."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_generator():
    spec = importlib.util.spec_from_file_location("results_page", ROOT / "bench" / "results_page.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_results_page_is_up_to_date(tmp_path):
    gen = load_generator()
    page = gen.render(ROOT / "bench" / "results", tmp_path)
    fresh, saved = page.read_text(), (ROOT / "docs" / "results.md").read_text()
    assert fresh == saved, "docs/results.md is stale: run `python bench/results_page.py` (or `make docs`)"
    copies = sorted(p.relative_to(tmp_path) for p in (tmp_path / gen.ASSETS).rglob("*.png"))
    saved_copies = sorted(p.relative_to(ROOT / "docs") for p in (ROOT / "docs" / gen.ASSETS).rglob("*.png"))
    assert copies == saved_copies and copies, "figures in docs/assets/results differ from bench/results"
    for rel in copies:
        assert (tmp_path / rel).read_bytes() == (ROOT / "docs" / rel).read_bytes(), f"{rel} is stale"
        assert (tmp_path / rel).stat().st_size < 300_000


def test_every_result_file_has_a_section_and_its_records(tmp_path):
    gen = load_generator()
    text = gen.render(ROOT / "bench" / "results", tmp_path).read_text()
    for f in (ROOT / "bench" / "results" / "cpu").iterdir():
        if f.is_file() and f.name != "README.md":  # folders of runs (rl_reduced_runs/) belong to their result
            assert f"### {f.stem}" in text and f"`bench/results/cpu/{f.name}`" in text
    sections = text.split("\n### ")[1:]
    for section in sections:
        for field in ("command", "date", "commit", "machine", "load"):
            assert f"| {field} | " in section


def test_what_a_file_does_not_record_is_not_invented(tmp_path):
    gen = load_generator()
    results = tmp_path / "results" / "gpu"
    results.mkdir(parents=True)
    (results / "bare.txt").write_text("# bare: a table and nothing else\n| a | b |\n| - | - |\n| 1 | 2 |\n")
    (results / "full.txt").write_text(
        "# full: everything recorded (commit abc1234; 8 cores, load average 0.5)\n"
        "# 2026-11-30 12:00 UTC\n$ hyperscalees bench gpu --json\nspeedup: 3.5\n"
        '{"bench": "gpu", "environment": {"torch": "2.13.0", "load_avg_1m": 0.5}}\n')
    text = gen.render(tmp_path / "results", tmp_path / "out").read_text()
    bare, full = text.split("### bare")[1].split("### full")
    assert bare.count("*not recorded*") == 5 and "| 1 | 2 |" in bare
    assert "*not recorded*" not in full
    assert "`hyperscalees bench gpu --json`" in full and "2026-11-30 12:00 UTC" in full and "abc1234" in full
    assert "torch 2.13.0" in full and "load_avg_1m 0.5" in full and "| speedup | 3.5 |" in full
