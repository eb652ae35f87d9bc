"""The CLI run in this process, a run directory's saved weights, and the bit-for-bit comparison the distributed
tests end with."""
from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

from hyperscalees.cli.main import main


def invoke(argv, capsys):
    """(exit code, stdout, stderr) of ``hyperscalees *argv`` run in this process."""
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def params(directory) -> dict:
    """The weights a run saved in ``directory`` (its one ``model-*.safetensors``)."""
    (path,) = Path(directory).glob("model-*.safetensors")
    return load_file(str(path))


def assert_same_params(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), f"{k} differs"
