"""Question: what does one full EGGROLL step cost next to plain inference on the same tokens?

Run:  .venv/bin/python bench/throughput.py [--quick] [--json] [--device cpu|cuda] [--out FILE]
Same as: hyperscalees bench throughput ...   (details: src/hyperscalees/benchmarks/throughput.py)
"""
import sys

from hyperscalees.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main(["bench", "throughput", *sys.argv[1:]]))
