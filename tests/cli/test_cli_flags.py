"""Every generated flag lands in the right config field; help works for every command."""
import argparse
import os
from dataclasses import fields

import pytest

from hyperscalees.cli.main import build_parser
from hyperscalees.cli.train import config_from_args
from hyperscalees.engine import EngineConfig
from hyperscalees.strategies import ESConfig
from hyperscalees.tasks import TASKS

# a valid, non-default value for every field; a new field without an entry here fails the test
ES_VALUES = {"population": ("514", 514), "sigma": ("0.25", 0.25), "rank": ("3", 3), "lr": ("0.125", 0.125),
             "optimizer": ("sgd", "sgd"), "seed": ("17", 17), "shaping": ("z_score", "z_score"),
             "weight_decay": ("0.5", 0.5), "momentum": ("0.75", 0.75), "lr_decay": ("0.5", 0.5),
             "sigma_decay": ("0.25", 0.25), "noise_reuse": ("4", 4), "distribution": ("rademacher", "rademacher"),
             "estimator": ("sign", "sign"), "baseline_every": ("2", 2), "update_chunk": ("8", 8),
             "noise_cache_mib": ("16.5", 16.5), "group_fitness": ("per_group", "per_group"),
             "update_rule": ("optimizer", "optimizer"),
             "deterministic": (None, False), "update_precision": ("bf16", "bf16"),
             "tie_sigma_growth": ("2.5", 2.5), "fp32_masters": (None, False),
             "antithetic": (None, False)}
ENGINE_VALUES = {"steps": ("7", 7), "time_budget": ("2.5", 2.5), "eval_every": ("3", 3),
                 "checkpoint_every": ("2", 2), "checkpoint_minutes": ("2.5", 2.5), "snapshot_minutes": ("1.5", 1.5), "out": ("runs/x", "runs/x"),
                 "resume": ("runs/y", "runs/y"), "device": ("cpu", "cpu"), "json": (None, True), "chunk": ("64", 64),
                 "overwrite": (None, True), "tensorboard": ("runs/tb", "runs/tb"),
                 "restart_patience": ("40", 40), "restart_min_delta": ("1.5", 1.5),
                 "eval_at_start": (None, True)}
OPTION_VALUES = {"task": ("arithmetic", "arithmetic"), "task_options": ('{"max_numbers": 3}', '{"max_numbers": 3}'),
                 "reward": ("r.py:score", "r.py:score"), "reward_timeout": ("2.5", 2.5), "prompts": ("3", 3),
                 "max_new_tokens": ("17", 17), "stop": ("END", "END"), "eval_prompts": ("7", 7),
                 "dtype": ("bfloat16", "bfloat16"), "evolve": ("*.q_proj.weight", "*.q_proj.weight"),
                 "hidden": ("5", 5), "activation": ("relu", "relu"), "batch": ("9", 9), "points": ("11", 11),
                 "holdout": ("0.3", 0.3), "env": ("Pendulum-v1", "Pendulum-v1"), "episodes": ("3", 3),
                 "layers": ("1", 1), "max_steps": ("50", 50), "eval_episodes": ("7", 7), "normalize": (None, False),
                 "eval_max_steps": ("60", 60), "starts": ("pair", "pair"), "eval_every_env_steps": ("5000", 5000),
                 "threads": ("2", 2), "model": ("float-gru", "float-gru"), "heads": ("2", 2), "window": ("33", 33),
                 "streams": ("3", 3), "data": ("corpus.txt", os.path.abspath("corpus.txt")), "val_fraction": ("0.25", 0.25),
                 "test_fraction": ("0.2", 0.2),
                 "max_bytes": ("1000", 1000), "eval_tokens": ("999", 999), "eval_streams": ("5", 5),
                 "sample_every": ("0", 0), "sample_tokens": ("12", 12), "temperature": ("0.9", 0.9),
                 "min_p": ("0.5", 0.5), "presence_penalty": ("1.5", 1.5), "ntt": ("wht", "wht"),
                 "init": ("bigram", "bigram"), "train_problems": ("5", 5), "preset": ("eggroll", "eggroll"),
                 "dataset": ("p.jsonl", "p.jsonl"), "export": (None, False), "subspace": ("16", 16),
                 "adapters": ("2", 2), "subspace_cache_mib": ("2048", 2048)}


def parse(*argv):
    return build_parser().parse_args(list(argv))


def flag(name):
    return "--" + name.replace("_", "-")


@pytest.mark.parametrize("name", [f.name for f in fields(ESConfig)])
def test_es_flags_round_trip(name):
    text, value = ES_VALUES[name]
    argv = ["train", "xor"] + ([flag(name), text] if text is not None else ["--no-" + flag(name)[2:]])  # a switch on by default
    cfg = config_from_args(parse(*argv))
    assert getattr(cfg.es, name) == value


@pytest.mark.parametrize("name", [f.name for f in fields(EngineConfig)])
def test_engine_flags_round_trip(name):
    text, value = ENGINE_VALUES[name]
    argv = ["train", "xor", flag(name)] + ([text] if text is not None else [])
    if name == "checkpoint_every":
        argv += ["--out", "runs/z"]
    cfg = config_from_args(parse(*argv))
    assert getattr(cfg.engine, name) == value


OPTION_NEEDS = {"dataset": ["--reward", "r.py:score"]}  # flags an option is refused without


@pytest.mark.parametrize("task,name", [(t, f.name) for t, cls in TASKS.items() for f in fields(cls.Options)])
def test_task_option_flags_round_trip(task, name, tmp_path, monkeypatch):
    if name == "dataset":  # a file it can read, with prompts to train on and to hold out
        monkeypatch.chdir(tmp_path)
        (tmp_path / "p.jsonl").write_text("".join(f'{{"prompt": "{i}+2="}}\n' for i in range(64)))
    text, value = OPTION_VALUES[name]
    argv = [flag(name), text] if text is not None else ["--no-" + flag(name)[2:]]  # a switch on by default
    argv += OPTION_NEEDS.get(name, [])
    cfg = config_from_args(parse("train", task, *argv))
    assert cfg.options[name] == value and cfg.task == task


def test_strategy_flag_and_task_defaults():
    cfg = config_from_args(parse("train", "digits", "--strategy", "open_es"))
    assert cfg.strategy == "open_es"
    d = TASKS["digits"].defaults
    assert (cfg.es.population, cfg.es.sigma, cfg.es.rank, cfg.es.lr, cfg.es.optimizer, cfg.engine.steps) == \
        (d["population"], d["sigma"], d["rank"], d["lr"], d["optimizer"], d["steps"])
    assert cfg.options == {f.name: f.default for f in fields(TASKS["digits"].Options)}


def help_argvs():
    out = [[], ["train"], ["eval"], ["env"]] + [["train", t] for t in TASKS]
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out += [[name] for name in sub.choices if [name] not in out]  # bench, once it exists
    return out


@pytest.mark.parametrize("argv", help_argvs(), ids=lambda a: " ".join(a) or "main")
def test_help_works_for_every_subcommand(argv, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(argv + ["--help"])
    assert e.value.code == 0
    assert "usage: hyperscalees" in capsys.readouterr().out
