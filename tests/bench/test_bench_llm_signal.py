"""bench/llm_signal.py: the gradient noise scale from independent estimates, and the two methods' directions."""
import json
import math
from pathlib import Path

import pytest
import torch

import llm_signal as sig

MODEL = Path(__file__).resolve().parents[2] / "bench" / "models" / "countdown_char_llama"
COUNTDOWN3 = {"min_numbers": 3, "max_numbers": 3, "max_value": 9, "min_target": 10, "max_target": 50}


def unit(d: int = 40_000, seed: int = 0) -> torch.Tensor:
    g = torch.randn(d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return g / g.norm()


def synthetic(b_simple: float, n: int, m: int, g: torch.Tensor | None = None, seed: int = 0) -> torch.Tensor:
    """M estimates of the unit gradient g, each the mean of n completions whose covariance has trace b_simple."""
    g = unit() if g is None else g
    noise = torch.randn(m, g.numel(), generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    return g + noise * math.sqrt(b_simple / (g.numel() * n))


@pytest.mark.parametrize("b_simple,n", [(500.0, 128), (50_000.0, 2048), (2_000.0, 16)])
def test_noise_scale_recovers_a_known_b_simple(b_simple, n):
    s = sig.noise_scale(sig.gram(synthetic(b_simple, n, m=24)), n)
    assert s["signal"] == pytest.approx(n / (n + b_simple), rel=0.1)
    assert s["b_simple"] == pytest.approx(b_simple, rel=0.15)
    assert 0 < s["signal_se"] < s["signal"]
    assert s["b_simple_lo"] <= s["b_simple"] <= s["b_simple_hi"]
    assert s["grad_sq"] == pytest.approx(1.0, rel=0.1)


def test_pure_noise_reads_as_no_signal_within_its_error():
    e = torch.randn(16, 30_000, generator=torch.Generator().manual_seed(1))
    s = sig.noise_scale(sig.gram(e), 64)
    assert abs(s["signal"]) < 3 * s["signal_se"] + 1e-3
    assert s["b_simple_hi"] == math.inf


def test_zero_estimates_measure_nothing():
    s = sig.noise_scale(sig.gram(torch.zeros(4, 10)), 8)
    assert math.isnan(s["signal"]) and math.isnan(s["b_simple"]) and s["grad_sq"] == 0.0


@pytest.mark.parametrize("shape,n,match", [((2, 2), 8, "M >= 3"), ((3, 4), 8, r"\(M, M\)"),
                                           ((3, 3), 0, "completions"), ((3, 3), True, "completions")])
def test_noise_scale_refuses_bad_input(shape, n, match):
    with pytest.raises(ValueError, match=match):
        sig.noise_scale(torch.eye(*shape), n)


def test_pooled_b_simple_weights_the_rows_that_measure_best():
    b = 10_000.0
    rows = [(n, n / (n + b), se) for n, se in ((128, 0.01), (2048, 0.01), (8192, 0.01))]
    pooled = sig.pooled_b_simple(rows)
    assert pooled["b_simple"] == pytest.approx(b, rel=1e-9)
    assert pooled["b_simple_at_least"] < pooled["b_simple_lo"] < b < pooled["b_simple_hi"]
    # a row that saw no signal only bounds it: the pooled estimate leans on the precise row
    noisy = sig.pooled_b_simple([(128, -0.002, 0.003), (8192, 8192 / (8192 + b), 0.0005)])
    assert noisy["b_simple"] == pytest.approx(b, rel=0.05)
    assert sig.pooled_b_simple([(128, -0.001, 0.003)])["b_simple"] == math.inf
    assert math.isnan(sig.pooled_b_simple([(128, math.nan, math.nan)])["b_simple"])


def test_agreement_reads_the_angle_between_expected_directions():
    """Independent estimates (other noise) of the same, the opposite, a half-aligned and an unrelated gradient."""
    g, h = unit(seed=2), unit(seed=3)
    a = synthetic(2_000.0, 64, m=12, g=g, seed=10)
    for other, cos in ((g, 1.0), (-g, -1.0), ((g + h) / (g + h).norm(), (1 + g @ h) / (g + h).norm()), (h, 0.0)):
        b = synthetic(2_000.0, 64, m=10, g=other, seed=20)
        value, se = sig.agreement(a @ b.T, sig.gram(a), sig.gram(b))
        assert value == pytest.approx(float(cos), abs=max(0.05, 3 * se)) and 0 < se < 0.1
    for seed in range(5):  # a side with no signal: its |g|² is noise, so no cosine is claimed
        noise = torch.randn(12, g.numel(), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        assert all(math.isnan(x) for x in sig.agreement(noise @ a.T, sig.gram(noise), sig.gram(a)))


def test_completion_mask_keeps_the_end_token_as_trl_does():
    pad, eos = 0, 2
    tokens = torch.tensor([[5, 6, pad, pad], [7, 8, 9, 10]])
    lengths = torch.tensor([2, 4])  # row 0 ended at its end token (overwritten by padding), row 1 ran out
    out, mask = sig.completion_mask(tokens, lengths, eos)
    assert out.tolist() == [[5, 6, eos, pad], [7, 8, 9, 10]]
    assert mask.tolist() == [[True, True, True, False], [True, True, True, True]]
    assert sig.completion_mask(tokens, lengths, None)[1][0].tolist() == [True, True, False, False]


transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def model():
    from hyperscalees import llm
    return llm.load_causal_lm(str(MODEL))


def test_grpo_direction_matches_a_row_by_row_reference(model):
    """The batched, left-padded, chunked direction against each completion scored alone, unpadded."""
    from hyperscalees import llm
    lm, tok = model
    prompts = ["Using the numbers 6, 2, 4, write", "Using the numbers 8, 7, 3, write an expression"]
    sampling = llm.Sampling(max_new_tokens=6, do_sample=True, temperature=1.0)
    _, new, lengths = llm.complete(lm, tok, prompts, sampling, repeats=3, seed=5)
    rewards = torch.tensor([[1.0, 0.1], [0.0, 0.1], [1.0, 1.0]], dtype=torch.float64)  # (G, P)
    params = {n: p for n, p in lm.named_parameters() if n.endswith("down_proj.weight")}
    got = sig.grpo_direction(lm, tok, prompts, new, lengths, rewards, params, rows_per_pass=4)

    adv = ((rewards - rewards.mean(0)) / (rewards.std(0) + sig.EPS)).reshape(-1)
    tokens, mask = sig.completion_mask(new, lengths, tok.eos_token_id)
    total = mask.sum()
    objective = 0
    for r in range(tokens.shape[0]):
        prompt = tok(prompts[r % 2], return_tensors="pt", add_special_tokens=False)["input_ids"]
        answer = tokens[r][mask[r]][None]
        logits = lm(input_ids=torch.cat([prompt, answer], 1)).logits[0, prompt.shape[1] - 1:-1]
        objective = objective + adv[r] * torch.log_softmax(logits, -1).gather(-1, answer[0][:, None]).sum() / total
    ref = sig.flat(dict(zip(params, torch.autograd.grad(objective, list(params.values())))), list(params))
    assert got.norm() > 0
    torch.testing.assert_close(got, ref.float(), rtol=1e-4, atol=1e-7)


def test_es_estimate_is_a_pure_function_of_its_step(model):
    from hyperscalees import llm
    from hyperscalees.nn.module_es import EGGROLL
    from hyperscalees.tasks.problems import PROBLEM_SETS
    lm, tok = model
    task = PROBLEM_SETS["countdown"](seed=0, options=COUNTDOWN3)
    es = EGGROLL(lm, population=8, sigma=sig.SIGMA, rank=1, lr=1.0, optimizer="sgd", es_map=llm.evolving(lm),
                 group_fitness="per_group")
    names = [n for n in llm.evolving(lm) if n != "*"]
    greedy = llm.Sampling(max_new_tokens=32, stop=("</answer>",))
    prompts = task.prompts("train", 0, 2)
    a, n = sig.es_estimate(es, tok, task, prompts, greedy, step=3, names=names)
    b, _ = sig.es_estimate(es, tok, task, prompts, greedy, step=1, names=names)
    c, _ = sig.es_estimate(es, tok, task, prompts, greedy, step=3, names=names)
    assert n == 16 and a.numel() == sum(p.numel() for k, p in lm.named_parameters() if k in names)
    assert torch.equal(a, c) and not torch.equal(a, b)
    assert all(torch.equal(p, q) for p, q in zip(lm.parameters(), llm.load_causal_lm(str(MODEL))[0].parameters()))


def test_cli_quick_run_reports_both_methods(tmp_path, capsys):
    out = tmp_path / "signal.txt"
    assert sig.main(["--quick", "--json", "--model", str(MODEL), "--task", "countdown",
                 "--task-options", json.dumps(COUNTDOWN3), "--out", str(out)]) == 0
    rec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [r["method"] for r in rec["rows"]] == ["es", "grpo"]
    assert all(r["completions"] == 16 and r["estimates"] == 3 for r in rec["rows"])
    assert rec["task_options"] == COUNTDOWN3 and out.read_text().splitlines()[-1] == json.dumps(rec)


def test_cli_refuses_what_llm_signal_does_not_take(capsys):
    with pytest.raises(SystemExit) as e:
        sig.main(["--budget", "10"])
    assert e.value.code == 2 and "unrecognized arguments: --budget" in capsys.readouterr().err
    assert sig.main([]) == 1
    assert "needs --model" in capsys.readouterr().err


def test_draw_plots_a_saved_record(tmp_path):
    pytest.importorskip("matplotlib")
    rows = [{"method": "es", "completions": n, "signal": s, "signal_se": 4e-4} for n, s in ((128, -3e-4), (16384, 1.5e-3))]
    rows += [{"method": "grpo", "completions": n, "signal": n / (n + 850), "signal_se": 0.03} for n in (128, 2048)]
    record = {"rows": rows, "task": "countdown", "es_b_simple": 1.6e7, "es_b_simple_lo": 1.1e7, "es_b_simple_hi": None,
              "grpo_b_simple": 850.0, "grpo_b_simple_lo": 780.0, "grpo_b_simple_hi": 950.0}
    sig.draw(record, tmp_path / "signal.png")
    assert (tmp_path / "signal.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_settings_choose_what_is_measured():
    c = sig.with_settings(sig.configs(False), {"es": {"sigma": 0.03, "temperature": 0.5, "members": [2048, 4096]},
                                               "estimates": 8, "evolve": "*.mlp.*"})
    assert c["es"] == [(2048, 4), (4096, 4)] and c["grpo"] == []  # only the methods named run
    assert (c["sigma"], c["temperature"], c["estimates"], c["evolve"]) == (0.03, 0.5, 8, ["*.mlp.*"])
    default = sig.with_settings(sig.configs(False), {})
    assert default["es"] == sig.configs(False)["es"] and default["grpo"] and default["sigma"] == sig.SIGMA
    assert sig.with_settings(sig.configs(False), '{"grpo": {"prompts": [4]}}')["grpo"] == [(4, sig.GROUP)]


@pytest.mark.parametrize("settings,match", [
    ({"ES": {}}, "unknown key 'ES'"), ({"es": {"lr": 1}}, "es takes a JSON object"),
    ({"es": {"members": [3]}}, "even"), ({"es": {"sigma": 0}}, "sigma must be a number > 0"),
    ({"es": {"temperature": -1}}, "temperature"), ({"grpo": {"generations": 1}}, "generations"),
    ({"estimates": 2}, "estimates"), ({"evolve": ""}, "evolve"), ("[1]", "JSON object"),
    ({"es": {"subspace": 1}}, "subspace must be a whole number >= 2"),
    ({"es": {"subspace": 64}, "grpo": {}}, "name only es"),
    ({"es": {"subspace": 64}, "evolve": "*.mlp.*"}, "give one of them")])
def test_settings_refuse_bad_values(settings, match):
    from hyperscalees.benchmarks.base import BenchSetupError
    with pytest.raises(BenchSetupError, match=match):
        sig.with_settings(sig.configs(False), settings)


def test_gram_of_a_list_matches_the_stacked_products():
    g = torch.Generator().manual_seed(3)
    est = [torch.randn(10_000, generator=g) for _ in range(4)]
    e = torch.stack(est).double()
    assert torch.allclose(sig.gram(est), e @ e.T, rtol=1e-12, atol=1e-9)
    assert torch.allclose(sig.gram(torch.stack(est)), e @ e.T, rtol=1e-12, atol=1e-9)  # an (M, d) tensor too
    assert torch.allclose(sig.cross(est[:2], est[2:]), (e @ e.T)[:2, 2:], rtol=1e-12, atol=1e-9)


def test_max_new_tokens_setting():
    assert sig.with_settings(sig.configs(False), {"max_new_tokens": 24})["max_new_tokens"] == 24
    from hyperscalees.benchmarks.base import BenchSetupError
    with pytest.raises(BenchSetupError, match="max_new_tokens must be a whole number >= 1, got 0"):
        sig.with_settings(sig.configs(False), {"max_new_tokens": 0})


def test_pass_rows_bounds_grpo_memory_by_model_size():
    from types import SimpleNamespace
    smol = SimpleNamespace(hidden_size=576, num_hidden_layers=30, intermediate_size=1536, num_attention_heads=9,
                           vocab_size=49152)
    rows = sig.pass_rows(smol, 88)
    assert 1 <= rows <= 16  # SmolLM2-135M at 88 tokens: 128 rows in one pass ran out of 23 GB
    per_token = 4 * (30 * (8 * 576 + 4 * 1536 + 9 * 88) + 3 * 49152)
    assert rows * 88 * per_token <= sig.PASS_BYTES < (rows + 1) * 88 * per_token
    tiny = SimpleNamespace(hidden_size=64, num_hidden_layers=2, intermediate_size=256, num_attention_heads=4,
                           vocab_size=32)
    assert sig.pass_rows(tiny, 96) == 256  # a small model keeps the old one-pass batches
    assert sig.pass_rows(smol, 10**6) == 1  # never zero


# -- what B_simple is, and what predicts training ---------------------------------------------------
def test_the_b_simple_floor_is_two_p_times_d_minus_one():
    assert sig.b_simple_floor(4, 131_072) == 1_048_568  # the char Llama's ~1.05 million at 4 prompts
    assert sig.b_simple_floor(4, 106_200_000) == pytest.approx(8.5e8, rel=0.001)  # SmolLM2's ~8.5×10⁸
    for bad in ((0, 10), (4, 1), (True, 10), (4, 2.5)):
        with pytest.raises(ValueError, match="must be a whole number"):
            sig.b_simple_floor(*bad)


def test_isotropic_es_noise_never_measures_below_its_floor():
    """The floor on synthetic ES: pairs w·ε with ε ~ N(0, I) in d dimensions, w correlated with ε's first
    coordinate as strongly as it can be: even then B_simple in pairs is about d − 1."""
    d, pairs, m = 400, 64, 40
    g = torch.Generator().manual_seed(0)
    eps = torch.randn(m, pairs, d, generator=g, dtype=torch.float64)
    w = eps[:, :, 0]  # the best a fitness can do: the whole signal on one direction
    estimates = (w[..., None] * eps).mean(dim=1)  # (M, d): one estimate per row, from `pairs` pairs
    s = sig.noise_scale(sig.gram(estimates), pairs)
    assert s["b_simple"] == pytest.approx(d - 1, rel=0.25) and s["b_simple"] > 0.75 * (d - 1)


def test_the_like_for_like_ratio_uses_two_errors_on_both_sides():
    es = sig.pooled_b_simple([(16384, 0.00146, 0.0005)])   # 2.9 errors: bounded from below at two
    grpo = sig.pooled_b_simple([(2048, 0.041, 0.031)])     # 1.3 errors: no upper bound at two
    assert math.isfinite(grpo["b_simple_hi"]) and grpo["b_simple_at_most"] == math.inf
    assert math.isnan(sig.ratio_at_least(es, grpo))        # the old ratio used GRPO's one-error bound
    sharp = sig.pooled_b_simple([(2048, 0.7, 0.01)])
    assert sig.ratio_at_least(es, sharp) == pytest.approx(es["b_simple_at_least"] / sharp["b_simple_at_most"])
    assert sharp["b_simple_at_most"] > sharp["b_simple_hi"] > sharp["b_simple"]
    assert sig.ratio_at_least(es, sharp) < es["b_simple_at_least"] / sharp["b_simple_hi"]


def test_steps_to_gain_reads_the_first_evaluation_that_clears_it():
    import critical_batch as cb
    curve = [(0, 0.30), (10, 0.29), (20, 0.33), (30, 0.31), (40, 0.36)]
    assert cb.steps_to_gain(curve, 0.02) == 20 and cb.steps_to_gain(curve, 0.05) == 40
    assert cb.steps_to_gain(curve, 0.2) == math.inf
    with pytest.raises(ValueError, match="step 0"):
        cb.steps_to_gain(curve[1:], 0.02)


def test_critical_batch_recovers_a_known_trade_off():
    import critical_batch as cb
    s_min, e_min = 50.0, 40_000.0  # B_crit = 800
    points = [(b, s_min + e_min / b) for b in (64, 256, 1024, 4096)]
    fit = cb.critical_batch(points + [(16, math.inf)])  # a batch that never got there is left out
    assert fit["b_crit"] == pytest.approx(800) and fit["s_min"] == pytest.approx(50) and fit["points"] == 4
    assert math.isnan(cb.critical_batch([(64, 100.0), (128, math.inf)])["b_crit"])
    assert math.isnan(cb.critical_batch([(64, 100.0), (256, 300.0)])["b_crit"])  # more steps at a larger batch


def test_critical_settings_refuse_bad_values():
    import critical_batch as cb
    from hyperscalees.benchmarks.base import BenchSetupError
    assert cb.settings({}, quick=True)["populations"] == cb.QUICK["populations"]
    for bad, match in (({"populations": [8]}, "two or more"), ({"populations": [3, 8]}, "even"),
                       ({"gain": -1}, "gain"), ({"steps": 3}, "unknown key 'steps'")):
        with pytest.raises(BenchSetupError, match=match):
            cb.settings(bad, quick=False)
    assert cb.settings({"subspace": 256}, quick=False)["subspace"] == 256
    for bad in (1, -2, 2.5, True):
        with pytest.raises(BenchSetupError, match="subspace"):
            cb.settings({"subspace": bad}, quick=False)


def test_cli_quick_run_reports_the_floor_and_the_critical_batch(capsys, no_plot):
    assert sig.main(["--quick", "--json", "--model", str(MODEL), "--task", "countdown", "--task-options",
                     json.dumps(COUNTDOWN3), "--settings", '{"es": {}}', "--critical", "{}"]) == 0
    rec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    (row,) = rec["rows"]
    from hyperscalees import llm
    lm = llm.load_causal_lm(str(MODEL))[0]
    d = sum(p.numel() for n, p in lm.named_parameters() if n in llm.evolving(lm))
    assert row["b_simple_floor"] == 2 * 2 * (d - 1) == rec["es_b_simple_floor"]  # --quick: 2 prompts a member
    crit = rec["critical"]
    assert [r["population"] for r in crit["rows"]] == [2, 4] and all(r["curve"][0][0] == 0 for r in crit["rows"])
    assert {"es_b_crit", "es_s_min", "es_e_min"} <= set(rec)


def test_evolved_names_resolve_patterns_as_the_strategies_do():
    from hyperscalees import llm
    lm = llm.load_causal_lm(str(MODEL))[0]
    default = llm.evolving(lm)
    assert sig.evolved_names(lm, default) == [n for n in default if n != "*"]
    lm2 = llm.load_causal_lm(str(MODEL))[0]
    assert sig.evolved_names(lm2, llm.what_evolves(lm2, subspace=32)) == ["hs_subspace_z"]


def test_cli_quick_run_reads_the_signal_in_a_subspace(capsys, no_plot):
    assert sig.main(["--quick", "--json", "--model", str(MODEL), "--task", "countdown", "--task-options",
                     json.dumps(COUNTDOWN3), "--settings", '{"es": {"subspace": 64}}', "--critical", "{}"]) == 0
    rec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    (row,) = rec["rows"]
    assert row["method"] == "es" and row["b_simple_floor"] == 2 * 2 * (64 - 1) == rec["es_b_simple_floor"]
    assert rec["subspace"] == 64 and rec["critical"]["settings"]["subspace"] == 64  # the trainings evolve z too
    assert any("subspace" in n and "64 numbers" in n for n in rec["notes"])
