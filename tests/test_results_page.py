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
    gen.render(ROOT / "bench" / "results", tmp_path)
    fresh = sorted(p.relative_to(tmp_path) for p in [tmp_path / "results.md", *(tmp_path / gen.PAGES).glob("*.md")])
    saved = sorted(p.relative_to(ROOT / "docs") for p in [ROOT / "docs" / "results.md",
                                                           *(ROOT / "docs" / gen.PAGES).glob("*.md")])
    assert fresh == saved, "the results pages differ: run `python bench/results_page.py` (or `make docs`)"
    for rel in fresh:
        assert (tmp_path / rel).read_text() == (ROOT / "docs" / rel).read_text(), f"docs/{rel} is stale"
    copies = sorted(p.relative_to(tmp_path) for p in (tmp_path / gen.ASSETS).rglob("*.png"))
    saved_copies = sorted(p.relative_to(ROOT / "docs") for p in (ROOT / "docs" / gen.ASSETS).rglob("*.png"))
    assert copies == saved_copies and copies, "figures in docs/assets/results differ from bench/results"
    for rel in copies:
        assert (tmp_path / rel).read_bytes() == (ROOT / "docs" / rel).read_bytes(), f"{rel} is stale"
        assert (tmp_path / rel).stat().st_size < 300_000


def test_every_result_file_has_a_section_and_its_records(tmp_path):
    gen = load_generator()
    gen.render(ROOT / "bench" / "results", tmp_path)
    text = gen.all_pages(tmp_path)
    for f in [*(ROOT / "bench" / "results" / "cpu").iterdir(), *(ROOT / "bench" / "results" / "gpu").iterdir()]:
        if f.is_file() and f.name != "README.md":  # folders of runs (rl_reduced_runs/) belong to their result
            assert f"### {f.stem}" in text and f"`bench/results/{f.parent.name}/{f.name}`" in text
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
    gen.render(tmp_path / "results", tmp_path / "out")
    text = gen.all_pages(tmp_path / "out")
    bare, full = text.split("### bare")[1].split("### full")
    assert bare.count("*not recorded*") == 5 and "| 1 | 2 |" in bare
    assert "*not recorded*" not in full
    assert "`hyperscalees bench gpu --json`" in full and "2026-11-30 12:00 UTC" in full and "abc1234" in full
    assert "torch 2.13.0" in full and "load_avg_1m 0.5" in full and "| speedup | 3.5 |" in full


def test_the_page_opens_with_one_table_of_current_figures_and_superseded_attempts_are_archived(tmp_path):
    # issue 39: one generated page of 3,721 lines, mostly the history of attempts
    gen = load_generator()
    results = tmp_path / "results" / "cpu"
    results.mkdir(parents=True)
    (results / "README.md").write_text("| file | command |\n| --- | --- |\n"
                                       "| `rl_2026-11-28.txt` | `hyperscalees bench rl` (CartPole in 12 s) |\n")
    for name in ("rl_2026-11-27.txt", "rl_2026-11-27b.txt", "rl_2026-11-28.txt", "throughput.txt"):
        (results / name).write_text(f"# {name}\n| a | b |\n| - | - |\n| 1 | 2 |\n")
    head = gen.render(tmp_path / "results", tmp_path / "out").read_text()
    rows = [line for line in head.splitlines() if line.startswith("| [")]
    assert len(rows) == 2 and "CartPole in 12 s" in rows[1 if "rl_2026" in rows[1] else 0]
    assert "(results/rl.md#rl_2026-11-28)" in head and "rl_2026-11-27" not in head
    archive = (tmp_path / "out" / gen.PAGES / "archive.md").read_text()
    assert "### rl_2026-11-27\n" in archive and "### rl_2026-11-27b" in archive and "### rl_2026-11-28" not in archive
    assert "### throughput" in (tmp_path / "out" / gen.PAGES / "core.md").read_text()
    assert len((ROOT / "docs" / "results.md").read_text().splitlines()) < 150
