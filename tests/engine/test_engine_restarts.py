"""Restarts after a stalled evaluation (engine/restarts.py): when, what they reset, exact resume."""
import math

import pytest
import torch

from hyperscalees.distributed import LocalBackend
from hyperscalees.engine import load_checkpoint, load_run, make_config, read_rows, run
from hyperscalees.engine.config import EngineConfig
from hyperscalees.engine.restarts import StallRestarts
from hyperscalees.tasks import get_task


def test_the_stall_rule_counts_steps_since_the_last_real_improvement():
    r = StallRestarts(patience=3, min_delta=0.5, goal="max")
    assert not r.observe(1, -10.0)            # the first evaluation sets the best
    assert not r.observe(2, -9.6)             # better, but not by more than min_delta
    assert not r.observe(3, -9.0)             # better by 1.0: the clock starts again at step 3
    assert not r.observe(5, -9.2)
    assert r.observe(6, -9.4) and r.due       # 3 steps since step 3
    r.restarted(6)
    assert r.count == 1 and r.best is None and not r.due
    assert not r.observe(7, -50.0)            # a fresh start's first evaluation is its best
    assert not r.observe(9, float("nan"))     # not a plateau (the NaN guard's business)
    assert r.observe(10, -50.0)


def test_the_stall_rule_for_a_metric_to_minimise():
    r = StallRestarts(patience=2, min_delta=0.0, goal="min")
    assert not r.observe(0, 1.0) and not r.observe(1, 0.9) and not r.observe(2, 0.9)
    assert r.observe(3, 0.95)
    state = r.state_dict()
    again = StallRestarts(patience=2, min_delta=0.0, goal="min")
    again.load_state_dict(state)
    assert again.state_dict() == state and again.observe(3, 0.95)


@pytest.mark.parametrize("field,value", [("restart_patience", -1), ("restart_min_delta", -0.1),
                                         ("restart_min_delta", math.inf)])
def test_bad_restart_settings_are_refused_by_name(field, value):
    with pytest.raises(ValueError, match=field):
        EngineConfig(**{field: value})


def test_a_strategy_restart_forgets_its_moments_and_restarts_its_decay():
    task = get_task("predict2")(seed=0)
    cfg = make_config("predict2", es={"population": 16, "seed": 1, "lr_decay": 0.5, "sigma_decay": 0.9})
    from hyperscalees.engine.recipe import build
    _, model, es = build(cfg)
    for step in range(3):
        es.tell(torch.randn(16, generator=torch.Generator().manual_seed(step)))
    strategy = es.strategy
    assert strategy.lr_factor(strategy.step) == pytest.approx(0.5 ** 3)
    moments = strategy.rule.state_dict()
    strategy.restart()
    assert strategy.schedule_origin == 3
    assert strategy.lr_factor(3) == 1.0 and strategy.sigma_at(3) == pytest.approx(es.config.sigma)
    assert strategy.ask().sigma == pytest.approx(es.config.sigma)
    assert strategy.rule.state_dict() != moments                       # a fresh Adam: no state yet
    fresh = build(cfg)[2].strategy.rule.state_dict()
    assert strategy.rule.state_dict() == fresh
    # the origin survives a state round trip; a state saved before restarts existed loads as origin 0
    sd = strategy.state_dict()
    other = build(cfg)[2].strategy
    other.load_state_dict(sd)
    assert other.schedule_origin == 3
    other.load_state_dict({k: v for k, v in sd.items() if k != "schedule_origin"})
    assert other.schedule_origin == 0
    del task, model


def test_redrawn_parameters_are_a_new_draw_of_the_tasks_init_and_draw_zero_is_the_first():
    task = get_task("predict2")(seed=4)
    model = task.build_model()
    first = {k: v.clone() for k, v in model.state_dict().items()}
    task.redraw_parameters(model, 1)
    one = {k: v.clone() for k, v in model.state_dict().items()}
    assert all(not torch.equal(first[k], one[k]) for k in first)
    task.redraw_parameters(model, 0)
    assert all(torch.equal(first[k], v) for k, v in model.state_dict().items())
    task.redraw_parameters(model, 1)
    assert all(torch.equal(one[k], v) for k, v in model.state_dict().items())


ES = {"population": 32, "seed": 2}
# min_delta so large that nothing after a (re)start's first evaluation counts as better: with patience 2
# and an evaluation every step, the evaluations of steps 3, 6 and 9 stall, and steps 4, 7, 10 begin anew
STALL = {"eval_every": 1, "restart_patience": 2, "restart_min_delta": 1e9}


def test_a_stalled_run_restarts_from_a_new_draw(tmp_path):
    summary = run(make_config("predict2", es=ES, engine={"steps": 10, "out": str(tmp_path / "r"), **STALL}),
                  LocalBackend)
    assert summary["restarts"] == 3
    rows = read_rows(tmp_path / "r" / "metrics.jsonl")
    assert [r["step"] for r in rows if "restarts" in r] == [4, 7, 10]   # a row's step counts updates done
    assert [r["restarts"] for r in rows if "restarts" in r] == [1, 2, 3]
    # without the option nothing restarts, and the summary says nothing about restarts
    none = run(make_config("predict2", es=ES, engine={"steps": 4, "eval_every": 1}), LocalBackend)
    assert "restarts" not in none


def test_the_last_steps_weights_are_kept_and_the_next_step_begins_from_the_redrawn_init(tmp_path):
    """Stop at a stalled step: the saved weights are the trained ones; the resumed run's first step
    starts from draw 1 of the task's init."""
    run(make_config("predict2", es=ES, engine={"steps": 3, "out": str(tmp_path / "r"), **STALL}), LocalBackend)
    ckpt = load_checkpoint(tmp_path / "r")
    assert ckpt.meta["restarts"]["due"] and ckpt.meta["restarts"]["count"] == 0
    task = get_task("predict2")(seed=ES["seed"])
    redrawn = task.build_model()
    task.redraw_parameters(redrawn, 1)
    assert all(not torch.equal(ckpt.model[k], v) for k, v in redrawn.state_dict().items())
    seen = {}
    real = LocalBackend.step

    def spy(self):
        seen.setdefault("start", {k: v.clone() for k, v in self.es.model.state_dict().items()})
        return real(self)

    LocalBackend.step = spy
    try:
        summary = run(make_config("predict2", es=ES, engine={"steps": 4, "resume": str(tmp_path / "r"), **STALL}),
                      LocalBackend)
    finally:
        LocalBackend.step = real
    assert summary["restarts"] == 1
    assert all(torch.equal(seen["start"][k], v) for k, v in redrawn.state_dict().items())


def test_a_resumed_run_restarts_where_the_uninterrupted_one_does(tmp_path):
    engine = {**STALL, "restart_patience": 3}
    run(make_config("predict2", es=ES, engine={"steps": 11, "out": str(tmp_path / "full"), **engine}), LocalBackend)
    run(make_config("predict2", es=ES, engine={"steps": 5, "out": str(tmp_path / "part"), **engine}), LocalBackend)
    summary = run(make_config("predict2", es=ES, engine={"steps": 11, "resume": str(tmp_path / "part"), **engine}),
                  LocalBackend)
    full, part = load_checkpoint(tmp_path / "full"), load_checkpoint(tmp_path / "part")
    assert full.meta["restarts"] == part.meta["restarts"] and summary["restarts"] == full.meta["restarts"]["count"] == 2
    assert all(torch.equal(full.model[k], part.model[k]) for k in full.model)
    rows = {n: [(r["step"], r.get("restarts")) for r in read_rows(tmp_path / n / "metrics.jsonl")]
            for n in ("full", "part")}
    assert rows["full"] == rows["part"] and any(r for _, r in rows["full"])
