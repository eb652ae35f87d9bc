"""Render the saved benchmark outputs in bench/results/ as the docs' Results page.

    python bench/results_page.py              # writes docs/results.md, docs/results/*.md and copies the figures
    python bench/results_page.py --out DIR    # the same into DIR (the test regenerates into a tmp dir)

docs/results.md is one table of the current headline figures; docs/results/AREA.md holds one section per
current result (files that share a name, e.g. rl_vs_ppo.json and rl_vs_ppo.png, form one), and
docs/results/archive.md the attempts a later one of the same result (same name, later date) superseded.
Each shows what the file itself records (command, date, commit, machine, load), or "not recorded";
nothing is inferred from git or from the machine this runs on, so the page is a pure function of
bench/results/. A device folder's README.md is the context of its section and the source of the
commands its table lists. PNGs are copied next to the page (mkdocs serves only docs/).
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
ASSETS = "assets/results"          # figures, relative to the page
NOT_RECORDED = "not recorded"
SKIP_DIRS = {"tmp"}                 # bench/results/tmp/ is scratch (git-ignored)

DATE = re.compile(r"\b20\d\d-\d\d-\d\d(?:[ T]\d\d:\d\d(?::\d\d)?)?(?: UTC)?|"
                  r"\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) \w{3} +\d+ \d\d:\d\d:\d\d \w+ 20\d\d\b")
COMMIT = re.compile(r"\b(?:commit|at)\s+([0-9a-f]{7,40})\b")
LOAD = re.compile(r"load[ _-]av\w*[^;()\n]*", re.I)
CORES = re.compile(r"\b\d+[- ](?:CPU )?cores?\b[^;()\n]*", re.I)


def json_lines(text: str) -> list[dict]:
    """Every line of ``text`` that is a JSON object, or the whole text if it is one."""
    try:
        whole = json.loads(text)
        return [whole] if isinstance(whole, dict) else []
    except json.JSONDecodeError:
        pass
    found = []
    for line in text.splitlines():
        if line.startswith("{") and line.rstrip().endswith("}"):
            try:
                found.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return found


def walk(obj, prefix=""):
    """(dotted key, value) for every leaf of nested dicts (lists are leaves)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from walk(v, f"{prefix}.{k}" if prefix else str(k))
    else:
        yield prefix, obj


def unique(items):
    return list(dict.fromkeys(i for i in items if i))


def readme_commands(readme: Path) -> dict[str, list[str]]:
    """``{file name: [command]}`` from the folder README's `| file | command |` table."""
    commands: dict[str, list[str]] = {}
    if not readme.exists():
        return commands
    for line in readme.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) != 2 or not cells[0].startswith("`"):
            continue
        for name in re.findall(r"`([^`]+)`", cells[0]):
            commands.setdefault(name, []).extend(re.findall(r"`([^`]+)`", cells[1])[:1])
    return commands


def environment(objs: list[dict]) -> tuple[list[str], list[str]]:
    """(machine descriptions, load readings) from the JSON records."""
    machines, loads = [], []
    for obj in objs:
        for key, value in walk(obj):
            leaf = key.rsplit(".", 1)[-1]
            if leaf.startswith("load_av"):
                loads.append(f"{leaf} {fmt(value)}")
            elif key == "machine" or leaf == "device" and isinstance(value, str):
                machines.append(f"{value}")
        env = obj.get("environment") or {}
        if env:
            machines.append(", ".join(f"{k} {v}" for k, v in env.items() if not k.startswith("load")))
        if "torch" in obj and "cpu_count" in obj:
            machines.append(f"torch {obj['torch']}, cpu_count {obj['cpu_count']}")
    return machines, loads


def record(files: list[Path], commands: dict[str, list[str]]) -> dict:
    """What the files of one result record about themselves, and their figures."""
    texts = [f.read_text(errors="replace") for f in files if f.suffix != ".png"]
    objs = [o for t in texts for o in json_lines(t)]
    comments = [ln[1:].strip() for t in texts for ln in t.splitlines() if ln.startswith("#")]
    cmd = [c for f in files for c in commands.get(f.name, [])]
    cmd += [ln[2:].strip() for t in texts for ln in t.splitlines() if ln.startswith("$ ")]
    cmd += [v for o in objs for k, v in walk(o) if k.rsplit(".", 1)[-1] == "command" and isinstance(v, str)]
    cmd += [c for c in comments if re.match(r"\S*(python\S* )?\S*bench/\S+\.py|hyperscalees ", c) and ";" not in c]
    machines, loads = environment(objs)
    machines += [m.group(0).strip() for c in comments for m in CORES.finditer(c)]
    loads += [m.group(0).strip() for c in comments for m in LOAD.finditer(c)]
    loads += [f"{k} {fmt(ast.literal_eval(v)) if v.startswith('[') else v}" for t in texts for k, v in re.findall(r"^(load_average\w*): (.+)$", t, re.M)]
    header = "\n".join(comments)
    return {
        "question": unique([comments[0] if comments else None] + [o.get("question") for o in objs])[:1],
        "command": unique(cmd), "date": unique(DATE.findall(header)), "commit": unique(COMMIT.findall(header)),
        "machine": unique(machines), "load": unique(loads),
    }


def figures(path: Path) -> list[str]:
    """Markdown for the figures a text file holds: its tables, summary lines, notes and JSON figures."""
    text = path.read_text(errors="replace")
    out, table, summary, notes = [], [], [], []
    whole = json_lines(text) if text.lstrip().startswith("{") and not text.startswith("{\"bench\"") else []
    for i, line in enumerate(text.splitlines() + [""]):
        if line.startswith("|"):
            table.append(line)
            continue
        if table:
            out += ["", *table, ""]
            table = []
        if line.startswith("note:"):
            notes.append(line[5:].strip())
        elif re.match(r"^[a-z_0-9]+: ", line) and not line.startswith("environment:"):
            key, value = line.split(": ", 1)
            summary.append((key, value))
        elif line.startswith("$ "):
            out += ["", "```text", line, "```"]
        elif line.startswith("{") and '"metrics"' in line and isinstance(json.loads(line).get("metrics"), dict):
            obj = json.loads(line)  # a run's --json summary (a bench report nests them: not this table)
            cells = {"steps": obj.get("steps"), "stopped": obj.get("stopped"), **obj.get("metrics", {}),
                     "wall_time": obj.get("wall_time")}
            out += ["", table_md([(k, fmt(v)) for k, v in cells.items()])]
        elif line.startswith("#") and i > 0:  # line 0 is the title, shown as the section's question
            out += ["", "> " + md_escape(line[1:].strip())]
    if summary:
        out += ["", table_md([(k, md_escape(v)) for k, v in summary])]
    if whole:
        out += ["", table_md([(k, md_escape(fmt(v))) for k, v in walk(whole[0]) if k != "question"])]
    if notes:
        out += [""] + [f"- {md_escape(n)}" for n in notes]
    return out


def fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        if all(v is None for v in value):
            return f"{len(value)} values, none recorded" if value else "[]"
        if len(value) > 4:
            return f"{len(value)} values: {fmt(value[0])} … {fmt(value[-1])}"
        return "[" + ", ".join(fmt(v) for v in value) + "]"
    return str(value)


def md_escape(s: str) -> str:
    return str(s).replace("|", "\\|").replace("<", "&lt;")


def table_md(rows: list[tuple[str, str]]) -> str:
    return "\n".join(["| figure | value |", "| --- | --- |"] + [f"| {k} | {v} |" for k, v in rows])


def cell(values: list[str], code: bool = False) -> str:
    if not values:
        return f"*{NOT_RECORDED}*"
    # Python-Markdown keeps a pipe inside a code span in a table cell; outside one it must be escaped
    return "<br>".join(f"`{v}`" if code else md_escape(v) for v in values)


def context(readme: Path) -> list[str]:
    """The folder README, its headings moved two levels down (it sits under the device heading)."""
    lines = readme.read_text().splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    return [("##" + ln) if ln.startswith("#") else ln for ln in lines]


# areas, each a page: (slug, title, does a result belong here: (device, stem) -> bool), first match wins
AREAS = [("gpu", "GPU (H200)", lambda dev, stem: dev == "gpu"),
         ("llm", "LLM fine-tuning", lambda dev, stem: stem.startswith(("llm_", "warm_start"))),
         ("lm", "Language models", lambda dev, stem: stem.startswith(("lm_", "memory_es_vs_backprop"))),
         ("rl", "Reinforcement learning", lambda dev, stem: stem.startswith(("rl", "halfcheetah", "ppo_"))),
         ("mup", "Width transfer (muP)", lambda dev, stem: stem.startswith(("coord_check", "mup_"))),
         ("core", "Throughput, engine and integer models", lambda dev, stem: True)]
PAGES = "results"                   # the area pages and the archive, in docs/results/
SERIES = re.compile(r"_20\d\d-\d\d-\d\d[a-z]?$")


def series(stem: str) -> str:
    """A result's series: its name without the date (and letter) of the attempt."""
    return SERIES.sub("", stem)


def headline(readme_row: str, rec: dict) -> str:
    """The figure a result is known by: the folder README's words for it (its last parenthesis), or its question."""
    text = re.sub(r"`[^`]*`", "", readme_row, count=1)  # the command; later code spans are part of the words
    found = re.findall(r"\(([^()]*(?:\([^()]*\)[^()]*)*)\)", text)
    return md_escape(found[-1].strip() if found else (rec["question"][0] if rec["question"] else NOT_RECORDED))


def readme_rows(readme: Path) -> dict[str, str]:
    """{file name: its README row's command cell}."""
    rows = {}
    if readme.exists():
        for line in readme.read_text().splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            if len(cells) == 2 and cells[0].startswith("`"):
                for name in re.findall(r"`([^`]+)`", cells[0]):
                    rows.setdefault(name, cells[1])
    return rows


def section(device: Path, stem: str, files: list[Path], rec: dict, assets: Path) -> list[str]:
    """One result: its files, what they record about themselves, its figures."""
    page = [f"### {stem}", "", "Files: " + ", ".join(f"`bench/results/{device.name}/{f.name}`" for f in files), ""]
    if rec["question"]:
        page += [f"*{md_escape(rec['question'][0])}*", ""]
    page += ["| recorded | |", "| --- | --- |", f"| command | {cell(rec['command'], code=True)} |",
             f"| date | {cell(rec['date'])} |", f"| commit | {cell(rec['commit'])} |",
             f"| machine | {cell(rec['machine'])} |", f"| load | {cell(rec['load'])} |", ""]
    for f in files:
        if f.suffix == ".png":
            target = assets / device.name / f.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, target)
            page += [f"![{stem}](../{ASSETS}/{device.name}/{f.name})", ""]
        elif f.suffix in (".txt", ".log", ".json", ".md"):
            page += figures(f) + [""]
    return page


def collect(results: Path) -> list[dict]:
    """Every result: device, stem, files, record, area, headline, and whether a later attempt superseded it."""
    out = []
    for device in sorted(p for p in results.iterdir() if p.is_dir() and p.name not in SKIP_DIRS):
        readme = device / "README.md"
        commands, rows = readme_commands(readme), readme_rows(readme)
        groups: dict[str, list[Path]] = {}
        for f in sorted(device.iterdir()):
            if f.is_file() and f.name != "README.md":
                groups.setdefault(f.stem, []).append(f)
        latest = {}
        for stem in sorted(groups):  # dates sort as text: 2026-11-27 < 2026-11-27b < 2026-11-28
            latest[series(stem)] = stem
        for stem, files in groups.items():
            rec = record(files, commands)
            area = next(slug for slug, _, belongs in AREAS if belongs(device.name, stem))
            row = next((rows[f.name] for f in files if f.name in rows), "")
            out.append({"device": device, "stem": stem, "files": files, "record": rec, "area": area,
                        "headline": headline(row, rec), "current": latest[series(stem)] == stem})
    return out


def render(results: Path, out_dir: Path) -> Path:
    """Write ``out_dir/results.md`` (the headline table), one page per area and the archive in
    ``out_dir/results/``, and the figures; return the headline page's path."""
    assets = out_dir / ASSETS
    if assets.exists():
        shutil.rmtree(assets)
    pages_dir = out_dir / PAGES
    if pages_dir.exists():
        shutil.rmtree(pages_dir)
    pages_dir.mkdir(parents=True)
    items = collect(results)
    note = "<!-- generated by `python bench/results_page.py` from bench/results/; do not edit by hand -->"
    head = ["# Results", "", note, "",
            "The current headline figures, one row per result (a later attempt of the same result replaces it),",
            "each linking to its section: the saved file's figures and the command, date, commit, machine and",
            f"load it records (*{NOT_RECORDED}* where it records nothing). One page per area follows; attempts",
            "a later one superseded are in the [archive](results/archive.md). Regenerate with",
            "`python bench/results_page.py` (or `make docs`).", "",
            "| area | result | headline figure | saved file |", "| --- | --- | --- | --- |"]
    for slug, title, _ in AREAS:
        for it in (i for i in items if i["area"] == slug and i["current"]):
            files = ", ".join(f"`{f.name}`" for f in it["files"])
            head.append(f"| [{title}](results/{slug}.md) | [{it['stem']}](results/{slug}.md#{anchor(it['stem'])}) "
                        f"| {it['headline']} | {files} |")
    for slug, title, _ in AREAS:
        page = [f"# Results: {title}", "", note, "", "[All areas and the headline table](../results.md).", ""]
        readme = results / slug / "README.md"
        if readme.exists():
            page += [f"From `bench/results/{slug}/README.md`:", "", *context(readme), ""]
        for it in (i for i in items if i["area"] == slug and i["current"]):
            page += section(it["device"], it["stem"], it["files"], it["record"], assets)
        (pages_dir / f"{slug}.md").write_text("\n".join(page).rstrip() + "\n")
    archive = ["# Results: superseded attempts", "", note, "",
               "Earlier attempts of a result, each replaced by a later one on its area's page; kept because the",
               "guides cite them (the ES-against-GRPO history among them). [Back to the results](../results.md).", ""]
    for readme in sorted(results.glob("*/README.md")):
        if readme.parent.name not in {slug for slug, _, _ in AREAS}:
            archive += [f"## The {readme.parent.name} folder", "", f"From `bench/results/{readme.parent.name}/README.md`:",
                        "", *context(readme), ""]
    for it in (i for i in items if not i["current"]):
        archive += section(it["device"], it["stem"], it["files"], it["record"], assets)
    (pages_dir / "archive.md").write_text("\n".join(archive).rstrip() + "\n")
    path = out_dir / "results.md"
    path.write_text("\n".join(head).rstrip() + "\n")
    return path


def anchor(title: str) -> str:
    """mkdocs' toc anchor of a heading (lowercase, runs of other characters become one hyphen)."""
    return re.sub(r"[^\w\- ]", "", title.lower()).strip().replace(" ", "-")


def all_pages(out_dir: Path) -> str:
    """The headline page and every area page, as one text (what the tests search)."""
    return "\n".join(p.read_text() for p in [out_dir / "results.md", *sorted((out_dir / PAGES).glob("*.md"))])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=RESULTS, help="the saved outputs (default: bench/results)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs", help="where results.md goes (default: docs)")
    args = ap.parse_args(argv)
    print(render(args.results, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
