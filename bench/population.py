"""Question: does a step's time grow linearly with the population, and its memory not at all?

Run:  .venv/bin/python bench/population.py [--quick] [--json] [--device cpu|cuda] [--out FILE]
Same as: hyperscalees bench population ...   (details: src/hyperscalees/benchmarks/population.py)
"""
import sys

from hyperscalees.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main(["bench", "population", *sys.argv[1:]]))
