"""bench int8 runs at quick sizes and reports the four throughputs and their ratios."""
import json

from hyperscalees.benchmarks import int8


def test_int8_quick_reports_both_models():
    rep = int8.run(quick=True, log=lambda m: None)
    d = json.loads(rep.to_json())
    assert [r["model"] for r in d["rows"]] == ["egg", "int8-transformer"]
    for r in d["rows"]:
        assert all(r[k] > 0 for k in ("int_pop_tok_s", "float_pop_tok_s", "int_infer_tok_s", "float_infer_tok_s"))
        assert abs(r["int_over_float_pop"] - r["int_pop_tok_s"] / r["float_pop_tok_s"]) < 1e-9
