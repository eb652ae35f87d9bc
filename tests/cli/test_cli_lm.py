"""CLI of the lm task: train with --budget-minutes, generate (seeded), arch (parameter table)."""
import json

import pytest

from hyperscalees.cli.main import build_parser, main
from hyperscalees.cli.train import config_from_args

SMALL = ["--model", "float-gru", "--hidden", "16", "--layers", "1", "--window", "16", "--streams", "2",
         "--max-bytes", "60000", "--eval-tokens", "512", "--population", "8", "--sample-every", "0"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("lm") / "run"
    assert main(["train", "lm", *SMALL, "--steps", "3", "--out", str(out), "--json"]) == 0
    return out


def test_train_json_reports_the_test_split(capsys):
    assert main(["train", "lm", *SMALL, "--steps", "1", "--json"]) == 0
    m = json.loads(capsys.readouterr().out)["metrics"]
    assert {"test_bpb", "bigram_test_bpb", "unigram_test_bpb", "val_bpb"} <= set(m)
    assert 0 < m["bigram_test_bpb"] < m["unigram_test_bpb"] < 8


def test_train_json_reports_bits_per_byte_and_baselines(run_dir, capsys):
    assert main(["eval", str(run_dir), "--json"]) == 0
    m = json.loads(capsys.readouterr().out)["metrics"]
    assert {"val_bpb", "bigram_bpb", "unigram_bpb"} <= set(m)
    assert 0 < m["bigram_bpb"] < m["unigram_bpb"] < 8


def test_generate_is_deterministic_with_a_seed(run_dir, capsys):
    argv = ["generate", str(run_dir), "--prompt", "def ", "--tokens", "20", "--json"]
    outs = []
    for seed in ("1", "1", "2"):
        assert main([*argv, "--seed", seed]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[0]["tokens"] == outs[1]["tokens"] and len(outs[0]["tokens"]) == 20
    assert outs[0]["tokens"] != outs[2]["tokens"]
    assert main([*argv, "--temperature", "0"]) == 2
    assert "temperature" in capsys.readouterr().err


def test_arch_prints_the_parameter_table(capsys):
    assert main(["arch", "float-gru", "--hidden", "8", "--layers", "1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["total"] == sum(p["count"] for p in d["parameters"])
    # embed 256·8, ln 2·2·8, gru 2·24·8 + 2·24, mlp 24·8 + 24 + 8·24 + 8, ln_out 2·8, head 8·256 + 256
    assert d["total"] == 2048 + 32 + 432 + 416 + 16 + 2304
    assert main(["arch", "float-gru"]) == 0
    assert "total" in capsys.readouterr().out
    assert main(["arch", "egg", "--hidden", "8", "--layers", "1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["total"] == 513 * 8 + 1 * (4 * 8 + 12 * 8 * 8)      # nano-egg's count: 513·D + l·(4D + 12D²)
    assert {p["dtype"] for p in d["parameters"]} == {"int8"}


def test_budget_minutes_sets_the_time_budget():
    cfg = config_from_args(build_parser().parse_args(["train", "lm", "--budget-minutes", "1.5"]))
    assert cfg.engine.time_budget == 90.0
    with pytest.raises(ValueError, match="not both"):
        config_from_args(build_parser().parse_args(["train", "lm", "--budget-minutes", "1", "--time-budget", "5"]))


def _config(*flags):
    return config_from_args(build_parser().parse_args(["train", "lm", *flags]))


def test_the_egg_starts_from_the_bigram_at_width_64_unless_told_otherwise():
    cfg = _config()
    assert (cfg.options["model"], cfg.options["init"], cfg.options["hidden"]) == ("egg", "bigram", 64)
    assert (cfg.es.population, cfg.es.sigma, cfg.es.lr) == (256, 2.0 ** -9, 0.25)
    cfg = _config("--init", "random")  # the random start's width and settings come back with it
    assert (cfg.options["hidden"], cfg.es.population, cfg.es.sigma, cfg.es.lr) == (32, 128, 2.0 ** -8, 1.0)
    cfg = _config("--hidden", "48", "--lr", "0.5")  # a typed flag wins; the rest of the recipe stays
    assert (cfg.options["init"], cfg.options["hidden"], cfg.es.population, cfg.es.lr) == ("bigram", 48, 256, 0.5)
    cfg = _config("--model", "float-gru")  # other models: their own defaults, no bigram start
    assert (cfg.options["init"], cfg.options["hidden"]) == ("random", 32)


def test_the_api_and_the_cli_choose_the_same_defaults():
    from hyperscalees.engine import make_config
    for flags, options in (((), {}), (("--init", "random"), {"init": "random"}),
                           (("--model", "int8-transformer"), {"model": "int8-transformer"})):
        cli, api = _config(*flags), make_config("lm", options=options)
        assert cli.options == api.options and cli.es == api.es, flags


def test_a_resumed_run_keeps_the_width_and_start_it_was_saved_with(tmp_path, monkeypatch):
    from hyperscalees.cli import train as train_cli
    from hyperscalees.engine import make_config
    saved = make_config("lm", options={"init": "random"})  # a run saved before (or without) the bigram start
    monkeypatch.setattr(train_cli, "has_checkpoint", lambda path: True)
    monkeypatch.setattr(train_cli, "saved_config", lambda path: saved)
    cfg = _config("--resume", str(tmp_path))
    assert (cfg.options["init"], cfg.options["hidden"], cfg.es.population, cfg.es.lr) == ("random", 32, 128, 1.0)
