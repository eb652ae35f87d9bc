"""Every strategy x update rule: its state dict survives the checkpoint file format exactly, and resumes bit for bit."""
import pytest
import torch

from hyperscalees.engine.tree_io import read_tree, same_tree, write_tree
from hyperscalees.strategies import STRATEGIES, ESConfig, ESMode, ParamSpec

from es_helpers import sphere

MODES = {"w": ESMode.MM_PARAM, "b": ESMode.PARAM, "frozen": ESMode.EXCLUDED}
FLOAT_RULES = [("optimizer", o) for o in ("sgd", "adam", "adamw", "muon")]
INT_RULES = [(r, "adam") for r in ("int_ztest", "int_sgd", "int_adamw", "int_muon")]
SUITE = [(n, rule, opt) for n in sorted(STRATEGIES) for rule, opt in FLOAT_RULES + INT_RULES]


def params(rule, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    p = {"w": torch.randn(8, 6, generator=g), "b": torch.randn(8, generator=g), "frozen": torch.randn(4, generator=g)}
    if rule.startswith("int_"):                       # integer rules step int8 weights
        return {n: (t * 20).round().to(torch.int8) for n, t in p.items()}
    return {n: t.to(dtype) for n, t in p.items()}


def build(name, rule, opt, p):
    integer = rule.startswith("int_")
    cfg = ESConfig(population=32, sigma=0.1, rank=2, lr=1.0 if integer else 0.05, optimizer=opt, seed=1,
                   momentum=0.0 if integer or opt != "sgd" else 0.9, update_rule=rule,
                   shaping="pair_sign" if integer else "centered_rank",
                   distribution="int_uniform" if integer else "gaussian")
    specs = {n: ParamSpec(n, tuple(t.shape), MODES[n]) for n, t in p.items()}
    return STRATEGIES[name](p, specs, cfg)


def run(s, steps):
    g = torch.Generator().manual_seed(99)
    tgt = {"w": torch.randn(8, 6, generator=g) * 20, "b": torch.randn(8, generator=g) * 20}
    for _ in range(steps):
        s.tell(sphere(s, tgt))


@pytest.mark.parametrize("name,rule,opt", SUITE)
def test_state_round_trips_the_file_exactly_and_resumes_bit_for_bit(tmp_path, name, rule, opt):
    dtype = torch.bfloat16 if opt == "adamw" else torch.float32   # bf16: fp32 masters are part of the state
    p_full = params(rule, dtype)
    run(build(name, rule, opt, p_full), 6)

    p_a = params(rule, dtype)
    first = build(name, rule, opt, p_a)
    run(first, 3)
    write_tree(tmp_path / "strategy.safetensors", first.state_dict())
    saved, _ = read_tree(tmp_path / "strategy.safetensors")
    assert same_tree(saved, first.state_dict())       # int keys, tuples, floats, dtypes: as written
    p_b = {n: t.clone() for n, t in p_a.items()}
    run(first, 1)                                     # training on must not reach what was read back
    resumed = build(name, rule, opt, p_b)
    resumed.load_state_dict(saved)
    assert resumed.step == 3
    run(resumed, 3)
    for n in p_full:
        assert torch.equal(p_b[n], p_full[n]), n
    assert any(not torch.equal(p_b[n], params(rule, dtype)[n]) for n in ("w", "b"))  # it trained
