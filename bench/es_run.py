"""``hyperscalees ...`` with the heavy imports done first: the ES side of the LLM studies.

    python bench/es_run.py train llm --model DIR ... [--device cuda]

The same as ``hyperscalees train llm ...``, except that transformers, the model's class (from
the folder's ``config.json``) and, on a GPU, CUDA are started before the command runs. The
engine's clock starts at the run's start, so without this ES's clock would count imports and
CUDA's start that GRPO's (from ``on_train_begin``) does not (``llm_runs.es_invocation``).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def flag(argv: list[str], name: str, default: str | None = None) -> str | None:
    """The value after ``name`` in ``argv``, or ``default``."""
    return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else default


def preload(argv: list[str]) -> None:
    """Import transformers and the model's architecture class, and start CUDA when the run uses it."""
    import torch
    import transformers
    model = flag(argv, "--model")
    cfg = Path(model) / "config.json" if model else None
    for arch in (json.loads(cfg.read_text()).get("architectures") or []) if cfg and cfg.exists() else []:
        getattr(transformers, arch, None)  # a lazy module: the attribute imports the class
    device = flag(argv, "--device", "cpu")
    if device.startswith("cuda"):
        torch.zeros(1, device=device)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    preload(argv)
    from hyperscalees.cli.main import main as hyperscalees
    return hyperscalees(argv)


if __name__ == "__main__":
    raise SystemExit(main())
