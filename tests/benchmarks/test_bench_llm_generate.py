"""bench llm-generate runs at quick sizes and reports generation and update figures (never timings)."""
import json

import pytest

pytest.importorskip("transformers")

from hyperscalees.benchmarks import llm_generate  # noqa: E402
from hyperscalees.cli import bench  # noqa: E402


def test_quick_reports_population_vs_plain_and_the_update(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(llm_generate, "cache_dir", lambda: tmp_path)  # never writes the user's cache
    out = tmp_path / "llm_generate.txt"
    assert bench.MODULES["llm-generate"] == "llm_generate"
    from hyperscalees.cli.main import main
    assert main(["bench", "llm-generate", "--quick", "--json", "--out", str(out)]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    d = json.loads(line)
    assert out.read_text().strip().splitlines()[-1] == line
    assert d["bench"] == "llm-generate" and d["device"] == "cpu"
    assert [r["model"] for r in d["rows"]] == ["llama", "gpt2"]
    for r in d["rows"]:
        assert set(r) == set(llm_generate.COLUMNS)
        assert all(r[k] > 0 for k in ("plain_tok_s", "pop_tok_s", "tell_ms", "adam_ms", "first_tell_ms"))
        assert r["pop_over_plain"] == pytest.approx(r["pop_tok_s"] / r["plain_tok_s"])
        assert r["tell_over_adam"] == pytest.approx(r["tell_ms"] / r["adam_ms"])
        assert 0 < r["tell_share"] < 1 and r["evolved"] > 0
        assert r["sampled_cost"] > 0  # sampled answers timed against greedy ones, side by side
    for key in ("pop_over_plain_min", "tell_over_adam_max", "tell_share_max", "sampled_cost_max", "targets", "meets_targets",
                "environment", "configurations"):
        assert key in d
    assert any("smollm2" in n for n in d["notes"])  # quick mode says it left SmolLM2 out


def test_prompts_follow_the_chat_template_only_when_asked():
    from hyperscalees.llm.shapes import tokenizer_for
    tok = tokenizer_for(128)
    assert llm_generate.prompts_for(tok, 3, chat=True) == list(llm_generate.PROMPTS[:3])  # no template: plain
    tok.chat_template = "{% for m in messages %}<{{ m['content'] }}>{% endfor %}"
    assert llm_generate.prompts_for(tok, 2, chat=True) == [f"<{p}>" for p in llm_generate.PROMPTS[:2]]
    assert llm_generate.prompts_for(tok, 2, chat=False) == list(llm_generate.PROMPTS[:2])


def test_a_gpu_adds_the_large_populations_and_the_cpu_rows_stay():
    from hyperscalees.benchmarks import llm_generate
    cpu, gpu = llm_generate.configs(False), llm_generate.configs(False, "cuda")
    assert [c["model"] for c in gpu] == [c["model"] for c in cpu]
    for c, g in zip(cpu, gpu):
        assert g["rows"][:len(c["rows"])] == c["rows"]              # the CPU's rows, comparable across devices
        assert max(m * p for m, p in g["rows"]) >= 2048 > max(m * p for m, p in c["rows"])
    assert llm_generate.configs(True, "cuda") == llm_generate.configs(True)  # --quick stays tiny


def test_models_picks_what_is_measured(capsys):
    from hyperscalees.benchmarks import llm_generate
    from hyperscalees.benchmarks.base import BenchSetupError
    from hyperscalees.cli import bench
    from hyperscalees.cli.main import main
    assert bench.LLM_GENERATE_MODELS == llm_generate.MODELS
    rep = llm_generate.run(quick=True, log=lambda *_: None, models=("gpt2",))
    assert [r[0] for r in rep.rows] == ["gpt2"] and not any(n.startswith(llm_generate.SMOLLM2) for n in rep.notes)
    with pytest.raises(BenchSetupError, match="'bert' is not one of"):
        llm_generate.run(quick=True, models=("bert",))
    assert main(["bench", "throughput", "--models", "gpt2"]) == 2
    assert "--models applies to llm-generate only" in capsys.readouterr().err
