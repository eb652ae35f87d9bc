"""``python bench/mup_transfer.py --quick``: every sweep reports a best value per width and the drift between widths."""
import json

import pytest
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
    assert all(base[(s, "mup")] == base[(s, "standard")] for s in mup_transfer.DEFAULT_SWEEPS)
    assert png.stat().st_size > 1000


def test_best_picks_the_lowest_finite_loss():
    assert mup_transfer.best([1, 2, 4], [0.5, 0.2, float("inf")]) == (2, 0.2)


def test_a_point_is_the_mean_over_seeds_and_seeds_differ():
    one = [mup_transfer.final_loss("adam lr", 2.0 ** -7, 64, 64, "standard", 2, seed=s) for s in (0, 1)]
    assert one[0] != one[1]                              # the seed reaches the init (and ES noise); the batch is fixed
    both = mup_transfer.mean_loss("adam lr", 2.0 ** -7, 64, 64, "standard", 2, [0, 1])
    assert both == (one[0] + one[1]) / 2


def test_beta_and_decay_sweeps_on_the_transformer_report_a_spread_across_every_width(capsys):
    argv = ["--quick", "--json", "--model", "transformer", "--widths", "64", "128", "--steps", "2",
            "--sweeps", "adam_beta2", "adam_decay", "--lr", "0.01"]
    assert mup_transfer.main(argv) == 0
    d = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert d["model"] == "transformer" and d["widths"] == [64, 128] and d["steps"] == {"adam": 2, "es": 2}
    assert sorted(d["best_spread_all_widths"]) == sorted(f"adam_{s}_{p}" for s in ("beta2", "decay")
                                                         for p in ("standard", "mup"))
    assert d["adam_lr_for_beta_decay_init_sweeps"] == 0.01
    grid = mup_transfer.grids(True)
    assert all(r["best"] in grid[r["sweep"]] for r in d["rows"]) and len(d["rows"]) == 2 * 2 * 2


def test_adam_with_default_betas_and_no_decay_is_the_plain_adam_run():
    # the beta / decay sweeps train with their own Adam: at beta1 0.9 and final fraction 1 it is the lr sweep's run
    plain = mup_transfer.final_loss("adam lr", 2.0 ** -6, 128, 64, "mup", 3, seed=1)
    assert mup_transfer.final_loss("adam beta1", 0.9, 128, 64, "mup", 3, seed=1, lr=2.0 ** -6) == plain
    assert mup_transfer.final_loss("adam decay", 1.0, 128, 64, "mup", 3, seed=1, lr=2.0 ** -6) == plain
    assert mup_transfer.final_loss("adam decay", 0.125, 128, 64, "mup", 3, seed=1, lr=2.0 ** -6) != plain


def test_spread_measures_beta_by_one_minus_beta():
    assert mup_transfer.spread("adam lr", [2.0 ** -6, 2.0 ** -5, 2.0 ** -7]) == 4.0
    assert mup_transfer.spread("adam beta2", [0.75, 0.9375]) == pytest.approx(4.0)


def test_bad_options_are_refused_by_name():
    with pytest.raises(ValueError, match="at least two distinct widths"):
        mup_transfer.run(quick=True, widths=[64, 64], log=lambda *a: None)
    with pytest.raises(ValueError, match="unknown sweep 'adam_gamma'"):
        mup_transfer.run(quick=True, sweeps=["adam_gamma"], log=lambda *a: None)


def test_the_init_sweep_scales_every_random_weight_and_keeps_the_zero_readout(monkeypatch):
    seen, drawn = {}, {}
    real = mup_transfer.init_per_layer

    def spy(model, widths, stds, generator=None):
        seen.update(stds)
        drawn.update(real(model, widths, stds, generator))
        return drawn

    monkeypatch.setattr(mup_transfer, "init_per_layer", spy)
    a = mup_transfer.final_loss("adam init", 1.0, 128, 64, "mup", 2, seed=0, lr=2.0 ** -6)
    one = dict(seen)
    b = mup_transfer.final_loss("adam init", 4.0, 128, 64, "mup", 2, seed=0, lr=2.0 ** -6)
    assert sorted(one) == ["0.weight", "2.weight", "4.weight", "6.weight"]      # the zero readout 8.weight is kept
    assert seen["2.weight"] == pytest.approx(4 * one["2.weight"]) and a != b
    assert one["2.weight"] == pytest.approx((2 / 64) ** 0.5, rel=0.05)          # He at the base width 64
    assert drawn["2.weight"] == pytest.approx(seen["2.weight"] / 2 ** 0.5)      # then 1/√m at 128
