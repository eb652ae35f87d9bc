"""Question: ES cost of a small policy called many times per step (RL)?

Run:  .venv/bin/python bench/calls.py [--quick] [--json] [--device cpu|cuda] [--out FILE]
Same as: hyperscalees bench calls ...   (details: src/hyperscalees/benchmarks/calls.py)
"""
import sys

from hyperscalees.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main(["bench", "calls", *sys.argv[1:]]))
