"""Question: on the baselines workload, how much faster is a step of ours than each peer's?

Run:  .venv/bin/python bench/peers.py [--quick] [--json] [--device cpu|cuda] [--out FILE]
Same as: hyperscalees bench peers ...   (details: src/hyperscalees/benchmarks/peers.py)
"""
import sys

from hyperscalees.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main(["bench", "peers", *sys.argv[1:]]))
