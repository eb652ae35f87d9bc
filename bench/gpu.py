"""Question: how close does one EGGROLL step come to the cost of inference on a GPU (App. E)?

Run:  .venv/bin/python bench/gpu.py [--quick] [--json] [--device cpu|cuda] [--dtype bf16|fp16|fp32]
                            [--repeats R] [--out FILE]
Same as: hyperscalees bench gpu ...   (details: src/hyperscalees/benchmarks/gpu.py)
"""
import sys

from hyperscalees.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main(["bench", "gpu", *sys.argv[1:]]))
