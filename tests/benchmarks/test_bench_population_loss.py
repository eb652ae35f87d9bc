"""``bench population-loss`` (issue 42): the quick run's shape from the CLI, where a series stops, the verdict."""
import json
import math

import pytest
import torch

from hyperscalees.benchmarks import population_loss as pl
from hyperscalees.benchmarks.base import BenchSetupError
from hyperscalees.cli.main import main

torch.set_num_threads(1)
quiet = lambda *_: None


def test_quick_from_the_cli_reports_every_point_with_three_seeds(capsys, tmp_path):
    png, out = tmp_path / "pl.png", tmp_path / "res" / "pl.txt"
    assert main(["bench", "population-loss", "--quick", "--json", "--plot", str(png), "--out", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    d = json.loads(lines[-1])
    c = pl.configs(True)
    keys = {(t, m, n) for t in c["tasks"] for m in c["modes"] for n in ("antithetic", "independent")}
    ran = {k: [r["population"] for r in d["rows"] if (r["task"], r["mode"], r["noise"]) == k] for k in keys}
    every = [2 ** e for e in c["exponents"]]
    for k, pops in ran.items():   # each series climbs until its next point would not fit its time (a slow machine
        key = "|".join(k)         # stops a 0.4 s wall-clock series early), and says so
        assert pops == every[:len(pops)] and pops, (k, pops)
        stop = d["stopped"][key]
        if len(pops) < len(every):
            assert stop["before"] == every[len(pops)] and "would" in stop["why"], (k, stop)
        else:
            assert stop is None, (k, stop)
        assert d["verdict"][key]["largest_population"] == pops[-1]
    assert all(ran[("digits", "steps", n)] == every for n in ("antithetic", "independent"))  # steps: no clock
    assert all(r["seeds"] == 3 and r["heldout_loss"] > 0 and r["steps"] >= 1 for r in d["rows"])
    steps = [r for r in d["rows"] if r["mode"] == "steps"]
    assert all(r["steps"] == c["steps"][r["task"]] for r in steps)
    assert set(d["verdict"]) == set(d["stopped"]) == {"|".join(k) for k in keys}
    assert d["loss"] == {"egg": "test_bpb", "digits": "loss"} and d["claim"] == pl.CLAIM
    assert all(len(v) == 3 for losses in d["losses"].values() for v in losses.values())
    assert png.stat().st_size > 1000 and out.read_text().strip().splitlines()[-1] == lines[-1]


def test_a_series_stops_where_the_next_point_would_not_fit_its_time():
    rep = pl.run(quick=True, log=quiet, seeds=[0], settings={"tasks": ["digits"], "modes": ["steps"],
                                                             "antithetic": [False], "point_budget": 1e-6,
                                                             "exponents": [3, 4, 5]})
    d = rep.to_dict()
    assert [r["population"] for r in d["rows"]] == [8]
    stop = d["stopped"]["digits|steps|independent"]
    assert stop["before"] == 16 and "would take over" in stop["why"]


def test_too_long_in_wall_mode_counts_the_steps_that_fit():
    c = pl.configs(True)
    assert pl.too_long("wall", None, c, "digits", [0]) is None                       # nothing measured yet
    assert pl.too_long("wall", {"s_per_step": 0.001}, c, "digits", [0, 1, 2]) is None
    assert "fewer than" in pl.too_long("wall", {"s_per_step": 1.0}, c, "digits", [0])


def test_verdict_reads_a_falling_and_a_rising_loss():
    fall = pl.verdict({n: {"loss": 2.0 - 0.1 * i} for i, n in enumerate((64, 128, 256, 512))})
    assert fall["falls_fraction"] == 1.0 and fall["slope_per_doubling"] == pytest.approx(-0.1)
    assert fall["best_population"] == 512 and fall["largest_population"] == 512
    rise = pl.verdict({64: {"loss": 1.0}, 128: {"loss": 0.9}, 256: {"loss": 1.2}})
    assert rise["falls_fraction"] == 0.5 and rise["slope_per_doubling"] > 0 and rise["best_population"] == 128
    assert math.isnan(pl.verdict({64: {"loss": 1.0}})["slope_per_doubling"])


@pytest.mark.parametrize("settings,match", [({"modes": ["sprint"]}, "'sprint'"), ({"exponents": [0]}, "exponents"),
                                            ({"tasks": ["cartpole"]}, "'cartpole'"), ({"popz": 1}, "'popz'")])
def test_bad_settings_are_refused_by_name(settings, match):
    with pytest.raises(BenchSetupError, match=match):
        pl.run(quick=True, log=quiet, settings=settings)


def test_budget_must_be_positive_and_reaches_the_wall_mode(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "population-loss", "--quick", "--budget", "0"])
    assert "must be a number of seconds > 0" in capsys.readouterr().err
    with pytest.raises(BenchSetupError, match="budget must be"):
        pl.run(quick=True, log=quiet, settings={"budget": -1.0})
    rep = pl.run(quick=True, log=quiet, seeds=[0], budget=0.2, settings={"tasks": ["digits"], "modes": ["wall"],
                                                                         "antithetic": [True], "exponents": [3]})
    assert rep.summary["budget_s"] == 0.2 and rep.rows[0][-1] < 1.5                 # seconds of the one run


def test_runs_dir_reads_finished_runs_back_so_seeds_can_run_apart(tmp_path):
    digits = {"tasks": ["digits"], "modes": ["steps"], "antithetic": [True], "exponents": [3, 4]}
    one = pl.run(quick=True, log=quiet, seeds=[0], settings=digits, runs_dir=tmp_path).to_dict()
    assert one["read_back"] == 0 and sorted(p.name for p in tmp_path.glob("*.json")) == [
        "digits_steps_antithetic_N16_seed0.json", "digits_steps_antithetic_N8_seed0.json"]
    record = json.loads((tmp_path / "digits_steps_antithetic_N8_seed0.json").read_text())
    assert record["started"].endswith("+00:00") and len(record["load"]) == 3 and record["steps"] == 3
    both = pl.run(quick=True, log=quiet, seeds=[0, 1], settings=digits, runs_dir=tmp_path).to_dict()
    assert both["read_back"] == 2                                                      # seed 0's two runs
    assert [v[0] for v in both["losses"]["digits|steps|antithetic"].values()] == \
        [v[0] for v in one["losses"]["digits|steps|antithetic"].values()]
    again = pl.run(quick=True, log=quiet, seeds=[0, 1], settings=digits, runs_dir=tmp_path).to_dict()
    assert again["read_back"] == 4 and again["rows"] == both["rows"]
    with pytest.raises(BenchSetupError, match="holds a different run"):                  # other steps, same names
        pl.run(quick=True, log=quiet, seeds=[0], settings={**digits, "steps": {"digits": 2, "egg": 2}},
               runs_dir=tmp_path)


def test_a_run_cut_by_a_signal_is_not_recorded_and_ends_the_series(tmp_path, monkeypatch):
    real = pl.train
    cut = lambda *a, **k: {**real(*a, **k), "stopped": "SIGTERM"}   # as the engine reports a SIGTERM
    monkeypatch.setattr(pl, "train", cut)
    digits = {"tasks": ["digits"], "modes": ["steps"], "antithetic": [True], "exponents": [3, 4]}
    with pytest.raises(BenchSetupError, match=r"N8_seed0: stopped by SIGTERM .*not recorded.*same command again"):
        pl.run(quick=True, log=quiet, seeds=[0], settings=digits, runs_dir=tmp_path)
    assert not list(tmp_path.glob("*.json"))
