"""``hyperscalees env``: versions, devices and threads -- paste it into bug reports."""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform

import torch

from ..engine.checkpoint import package_version
from ..noise import native
from .base import examples_epilog, plain


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def collect_env() -> dict:
    cuda = torch.cuda.is_available()
    mps = getattr(torch.backends, "mps", None)
    return {
        "hyperscalees": package_version(), "python": platform.python_version(), "platform": platform.platform(),
        "torch": torch.__version__, "numpy": _version("numpy"), "safetensors": _version("safetensors"),
        "tqdm": _version("tqdm"), "scikit-learn": _version("scikit-learn"), "matplotlib": _version("matplotlib"),
        "cuda_available": cuda,
        "cuda_devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
        "mps_available": bool(mps and mps.is_available()),
        "default_device": "cuda" if cuda else "cpu", "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "native_noise_kernel": native.available(),  # the compiled CPU noise loop (noise/native.py)
    }


def register(subparsers) -> None:
    p = subparsers.add_parser("env", help="show versions, devices and threads", description=plain(__doc__),
                              **examples_epilog([("hyperscalees env", "versions, devices and threads"),
                                                 ("hyperscalees env --json", "the same as one JSON line")]))
    p.add_argument("--json", action="store_true", help="print one JSON line")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    info = collect_env()
    if args.json:
        print(json.dumps(info))
    else:
        width = max(map(len, info))
        for k, v in info.items():
            print(f"{k:<{width}}  {v}")
    return 0
