"""The project's studies live in bench/ of the checkout, not in the package: their tests import them the
way `python bench/STUDY.py` does, with bench/ on sys.path."""
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))
