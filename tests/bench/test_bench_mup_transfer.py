"""``python bench/mup_transfer.py --quick``: every sweep reports a best value per width and the drift between widths."""
import json

import torch

import mup_transfer

torch.set_num_threads(1)


def test_quick_reports_a_best_value_per_sweep_width_and_parametrization(capsys, tmp_path):
    png = tmp_path / "transfer.png"
    assert mup_transfer.main(["--quick", "--json", "--plot", str(png)]) == 0
    d = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    sweeps = [f"{s}_{p}" for s in ("adam_lr", "es_lr", "es_sigma") for p in ("standard", "mup")]
    assert sorted(d["best_ratio_largest_over_smallest"]) == sorted(sweeps)
    assert set(d["within_factor_2"]) == set(sweeps)
    grid = mup_transfer.configs(True)["grids"]
    rows = d["rows"]
    assert len(rows) == 3 * 2 * 2                        # sweeps x parametrisations x widths
    assert all(r["best"] in grid[r["sweep"]] and r["best_loss"] > 0 for r in rows)
    # at the base width muP is the standard model: the same losses, bit for bit
    base = {(r["sweep"], r["parametrization"]): r["losses"] for r in rows if r["width"] == 64}
    assert all(base[(s, "mup")] == base[(s, "standard")] for s in grid)
    assert png.stat().st_size > 1000


def test_best_picks_the_lowest_finite_loss():
    assert mup_transfer.best([1, 2, 4], [0.5, 0.2, float("inf")]) == (2, 0.2)


def test_a_point_is_the_mean_over_seeds_and_seeds_differ():
    one = [mup_transfer.final_loss("adam lr", 2.0 ** -7, 64, 64, "standard", 2, seed=s) for s in (0, 1)]
    assert one[0] != one[1]                              # the seed reaches the init (and ES noise); the batch is fixed
    both = mup_transfer.mean_loss("adam lr", 2.0 ** -7, 64, 64, "standard", 2, [0, 1])
    assert both == (one[0] + one[1]) / 2
