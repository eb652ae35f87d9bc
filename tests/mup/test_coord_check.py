"""``hyperscalees coord-check`` on small widths: the JSON keys, and that it separates the two
parametrisations (muP flat, standard growing at the same lr), for ES and for Adam."""
import json
import sys

import pytest
import torch

from hyperscalees.cli.main import main

torch.set_num_threads(1)
SMALL = ["--widths", "128,256,512", "--steps", "3", "--seeds", "3"]
# the full widths 64..1024 stay within 0.1 under muP (bench/results/cpu/coord_check_*.txt); at 128..512
# a slope spans a 4x range only and init noise moves it by up to ~0.08, so the bound here is looser
MUP_BOUND = 0.12


def check(capsys, *argv):
    assert main(["coord-check", *SMALL, "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.parametrize("optimizer,lr,standard_at_least", [("adam", None, 0.5), ("es", "0.05", 0.3)])
def test_mup_is_flat_and_standard_grows_at_the_same_lr(capsys, optimizer, lr, standard_at_least):
    d = check(capsys, "--optimizer", optimizer, *(["--lr", lr] if lr else []))
    assert d["parametrizations"] == ["standard", "mup"]
    assert set(d["slopes"]) == {"standard", "mup"}
    assert set(d["slopes"]["mup"]) == {"0", "2", "4", "6", "8"} and len(d["slopes"]["mup"]["2"]) == 4   # t = 0..3
    assert d["hidden_modules"] == ["0", "2", "4", "6"] and d["kinds"]["8"] == "output"
    assert d["max_abs_hidden_slope_t_ge_1"]["mup"] <= MUP_BOUND, d["slopes"]["mup"]
    assert d["max_hidden_slope_t_ge_1"]["standard"] >= standard_at_least, d["slopes"]["standard"]
    assert d["diverged_widths"] == {"standard": [], "mup": []}


def test_out_writes_the_png_and_the_table_and_a_missing_matplotlib_is_a_clear_error(capsys, tmp_path, monkeypatch):
    argv = ["coord-check", "--widths", "64,128", "--steps", "1", "--seeds", "1", "--parametrization", "mup",
            "--out", str(tmp_path)]
    assert main(argv) == 0
    assert (tmp_path / "coord_check.png").stat().st_size > 1000
    lines = (tmp_path / "coord_check.txt").read_text().splitlines()
    assert lines[0].startswith("# coord-check") and json.loads(lines[-1])["parametrizations"] == ["mup"]
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    capsys.readouterr()
    assert main(argv) == 2
    assert "pip install 'hyperscalees[plot]'" in capsys.readouterr().err


def test_bad_flags_are_refused(capsys):
    with pytest.raises(SystemExit):
        main(["coord-check", "--widths", "64"])
    assert "at least two distinct positive widths" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["coord-check", "--parametrization", "ntk"])
    assert "standard | mup" in capsys.readouterr().err
    assert main(["coord-check", "--model", "transformer", "--widths", "64,96", "--steps", "1"]) == 2
    assert "multiples of the head dimension 64" in capsys.readouterr().err


def test_the_table_says_zero_for_a_zero_readout_never_nan(capsys):
    # issue 39: the zero readout's output is 0 at t = 0 at every width, so no slope exists: it printed +nan
    assert main(["coord-check", "--widths", "32,64", "--steps", "1", "--seeds", "1", "--parametrization", "mup"]) == 0
    out = capsys.readouterr().out
    assert "nan" not in out.lower().replace("inf/nan", "")
    readout = next(line for line in out.splitlines() if " output " in line)
    assert readout.split()[-2] == "zero" and "modulekind" not in out
