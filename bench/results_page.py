"""Render the saved benchmark outputs in bench/results/ as the docs' Results page.

    python bench/results_page.py              # writes docs/results.md and copies the figures
    python bench/results_page.py --out DIR    # the same into DIR/results.md (the test regenerates into a tmp dir)

One section per result (files that share a name, e.g. rl_vs_ppo.json and rl_vs_ppo.png, form one).
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


def render(results: Path, out_dir: Path) -> Path:
    """Write ``out_dir/results.md`` and its figures; return the page's path."""
    page = ["# Results", "",
            "<!-- generated by `python bench/results_page.py` from bench/results/; do not edit by hand -->", "",
            "Every saved benchmark output in `bench/results/`, one section per result. The command, date,",
            "commit, machine and load of each are what the file itself records; where it records nothing,",
            f"the page says *{NOT_RECORDED}*. Regenerate with `python bench/results_page.py` (or `make docs`).", ""]
    assets = out_dir / ASSETS
    if assets.exists():
        shutil.rmtree(assets)
    for device in sorted(p for p in results.iterdir() if p.is_dir() and p.name not in SKIP_DIRS):
        readme = device / "README.md"
        commands = readme_commands(readme)
        page += [f"## {device.name}", ""]
        if readme.exists():
            page += [f"From `bench/results/{device.name}/README.md`:", "", *context(readme), ""]
        groups: dict[str, list[Path]] = {}
        for f in sorted(device.iterdir()):
            if f.is_file() and f.name != "README.md":
                groups.setdefault(f.stem, []).append(f)
        for stem, files in groups.items():
            rec = record(files, commands)
            page += [f"### {stem}", "", "Files: " + ", ".join(f"`bench/results/{device.name}/{f.name}`" for f in files), ""]
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
                    page += [f"![{stem}]({ASSETS}/{device.name}/{f.name})", ""]
                elif f.suffix in (".txt", ".log", ".json", ".md"):
                    page += figures(f) + [""]
    path = out_dir / "results.md"
    out_dir.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(page).rstrip() + "\n")
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=RESULTS, help="the saved outputs (default: bench/results)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs", help="where results.md goes (default: docs)")
    args = ap.parse_args(argv)
    print(render(args.results, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
