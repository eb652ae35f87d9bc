"""A stop cuts a validation pass short instead of waiting for it (issue 19: lm's took ~24 s).

The lm task's validation windows are slowed down (a real sleep for Ctrl-C, a fake clock for the
time budget), so "stopped within a window" and "waited for the whole pass" are far apart. The
checkpoint a cut pass leaves is the step's state, untouched: resuming it gives what a run never
interrupted gives.
"""
import signal
import time

import pytest
import torch
from run_helpers import assert_same

from hyperscalees.cli.main import main
from hyperscalees.distributed import LocalBackend
from hyperscalees.engine import load_checkpoint, make_config, read_rows, run
from hyperscalees.tasks import LMTask

pytestmark = pytest.mark.usefixtures("no_plot")

OPTIONS = {"model": "float-gru", "hidden": 8, "layers": 1, "window": 8, "streams": 2, "eval_tokens": 256,
           "eval_streams": 1, "sample_every": 0, "test_fraction": 0.01}
ES = {"population": 8, "seed": 3}


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny forwards: on a loaded machine, handing each op to a second thread costs more than the op."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def data(tmp_path):
    p = tmp_path / "text.txt"
    p.write_bytes(bytes(range(32, 127)) * 100)  # 9,500 bytes: 475 validate, 95 test
    return p


def options(data, **more) -> dict:
    return {**OPTIONS, "data": str(data), **more}


def windows_of(opts: dict) -> int:
    return opts["eval_tokens"] // opts["window"]


def slowed_validation(monkeypatch, each_window) -> list[float]:
    """Call ``each_window(n)`` before the n-th validation window the model reads; returns when each
    began (``time.perf_counter``). The test split (final_evaluate) is not slowed."""
    started, real = [], LMTask.evaluate

    def evaluate(self, model):
        def slow(x, state=None):
            started.append(time.perf_counter())
            each_window(len(started))
            return model(x, state)
        return real(self, slow)

    monkeypatch.setattr(LMTask, "evaluate", evaluate)
    return started


class FakeClock:
    """``time.perf_counter`` for a time-budget test: time passes only where the test says so
    (``per_step`` a training step, ``per_window`` a validation window), so the budget's decisions
    do not depend on how loaded the machine is."""

    def __init__(self, monkeypatch, per_step: float, per_window: float):
        self.now = 1000.0
        monkeypatch.setattr(time, "perf_counter", lambda: self.now)
        real = LMTask.fitness

        def fitness(task, model, lo, hi, step=0):
            self.now += per_step
            return real(task, model, lo, hi, step)

        monkeypatch.setattr(LMTask, "fitness", fitness)
        self.windows = slowed_validation(monkeypatch, lambda n: setattr(self, "now", self.now + per_window))


def assert_resumes_like_a_straight_run(out, tmp_path, opts: dict, steps: int, eval_every: int) -> None:
    """Resume ``out`` to ``steps`` and compare with a run to ``steps`` that was never stopped: weights,
    strategy, recurrent stream state and every metric both logged. The task's ``evals`` (completed
    validations; it paces the printed samples) differs by the pass that was cut: that is not compared."""
    engine = {"steps": steps, "eval_every": eval_every}
    run(make_config("lm", es=ES, engine={**engine, "resume": str(out)}, options=opts), LocalBackend)
    straight = tmp_path / "straight"
    run(make_config("lm", es=ES, engine={**engine, "out": str(straight)}, options=opts), LocalBackend)
    a, b = load_checkpoint(out), load_checkpoint(straight)
    assert a.step == b.step == steps
    assert_same(a.model, b.model, "model")
    assert_same(a.strategy, b.strategy, "strategy")
    assert_same({k: v for k, v in a.task.items() if k != "evals"}, {k: v for k, v in b.task.items() if k != "evals"})
    rows_a, rows_b = read_rows(out / "metrics.jsonl"), read_rows(straight / "metrics.jsonl")
    assert [r["step"] for r in rows_a] == [r["step"] for r in rows_b] == list(range(1, steps + 1))
    for ra, rb in zip(rows_a, rows_b):
        shared = ra.keys() & rb.keys() - {"time"}
        assert {k: ra[k] for k in shared} == {k: rb[k] for k in shared}, ra["step"]
    assert "val_bpb" in rows_a[-1] and rows_a[-1]["val_bpb"] == rows_b[-1]["val_bpb"]


def test_ctrl_c_during_a_validation_pass_stops_within_a_window_and_resumes_exactly(tmp_path, data, monkeypatch,
                                                                                     capsys):
    out, opts, slow, signalled = tmp_path / "run", options(data), 0.5, []
    full_pass = windows_of(opts) * slow                      # 16 s

    def window(n):
        if n == 3:  # three windows into the first pass (step 2)
            signalled.append(time.perf_counter())
            signal.raise_signal(signal.SIGINT)
        time.sleep(slow)

    started = slowed_validation(monkeypatch, window)
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in opts.items()]
    code = main(["train", "lm", *flags, "--population", "8", "--seed", "3", "--steps", "100", "--eval-every", "2",
                 "--out", str(out)])
    stopped_after = time.perf_counter() - signalled[0]
    err = capsys.readouterr().err
    assert code == 130, err
    assert len(started) == 3                                 # the window under way ends the pass: 3 of 32
    assert stopped_after < full_pass / 3, stopped_after      # the pass had ~15 s to go
    assert load_checkpoint(out).step == 2
    assert "interrupted by SIGINT at step 2/100: checkpoint at step 2 saved in" in err
    assert "SIGINT cut short the evaluation of step 2: no evaluation completed" in err
    assert "the end-of-run evaluation (the test split) was skipped" in err
    assert "Traceback" not in err
    rows = read_rows(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2] and "val_bpb" not in rows[-1]
    monkeypatch.undo()                                       # full-speed validations from here
    assert_resumes_like_a_straight_run(out, tmp_path, opts, steps=4, eval_every=2)


def test_a_time_budget_ending_mid_validation_ends_the_run_there(tmp_path, data, monkeypatch):
    """The first pass (step 2; no earlier one to keep room for) would take 6.4 s of a 3 s budget."""
    out, budget, opts = tmp_path / "run", 3.0, options(data)
    clock = FakeClock(monkeypatch, per_step=0.01, per_window=0.2)
    t0, finals, real_final = clock.now, [], LMTask.final_evaluate
    monkeypatch.setattr(LMTask, "final_evaluate",
                        lambda task, model: finals.append(clock.now) or real_final(task, model))
    cfg = make_config("lm", es=ES, engine={"steps": 100, "eval_every": 2, "time_budget": budget, "out": str(out)},
                      options=opts)
    summary = run(cfg, LocalBackend)
    assert summary["stopped"] == "time_budget" and summary["steps"] == 2
    assert len(clock.windows) == 15 < windows_of(opts)       # cut at the first window past 3 s: 15 of 32
    assert finals[0] - t0 < budget + 0.1                     # the run went on at once, not a pass (6.4 s) later
    assert load_checkpoint(out).step == 2
    assert "val_bpb" not in summary["metrics"] and summary["metrics_step"] is None
    assert "test_bpb" in summary["metrics"]                  # the test split is scored once, after the budget
    assert summary["notes"][0] == ("the time budget cut short the evaluation of step 2: no evaluation completed, "
                                   "so there are no metrics (`hyperscalees eval DIR` scores a saved run)")
    monkeypatch.undo()
    assert_resumes_like_a_straight_run(out, tmp_path, opts, steps=4, eval_every=2)


def test_a_time_budget_keeps_room_for_the_validation_that_closes_the_run(monkeypatch, data):
    """Passes of 0.5 s every 3 steps in a 3 s budget: the run stops early enough for its last one."""
    clock = FakeClock(monkeypatch, per_step=0.01, per_window=0.1)
    opts = options(data, eval_tokens=40)                     # 5 windows: 0.5 s a pass
    cfg = make_config("lm", es=ES, engine={"steps": 10_000, "eval_every": 3, "time_budget": 3.0}, options=opts)
    summary = run(cfg, LocalBackend)
    assert summary["stopped"] == "time_budget"
    assert summary["metrics_step"] == summary["steps"] == 15 and "val_bpb" in summary["metrics"]
    assert len(clock.windows) == 5 * 5                       # five passes, none cut
    assert summary["notes"] == [] and summary["wall_time"] <= 3.0


def test_a_signal_during_a_step_skips_the_closing_validation(tmp_path, data, monkeypatch):
    """SIGTERM during a step: the step completes and is saved; the validation that would close the run
    stops before its first window."""
    started = slowed_validation(monkeypatch, lambda n: None)
    real = LMTask.fitness

    def fitness(task, model, lo, hi, step=0):
        if step == 2 and lo == 0:  # the third step (es.step counts from 0 while it runs)
            signal.raise_signal(signal.SIGTERM)
        return real(task, model, lo, hi, step)

    monkeypatch.setattr(LMTask, "fitness", fitness)
    out, opts = tmp_path / "run", options(data, eval_tokens=128)
    summary = run(make_config("lm", es=ES, engine={"steps": 100, "eval_every": 2, "out": str(out)}, options=opts),
                  LocalBackend)
    assert summary["signal"] == "SIGTERM" and summary["steps"] == 3 and load_checkpoint(out).step == 3
    assert len(started) == windows_of(opts)                  # the pass of step 2, whole; no window after step 3
    assert summary["metrics_step"] == 2 and "val_bpb" in summary["metrics"] and "test_bpb" not in summary["metrics"]
    assert summary["notes"] == ["SIGTERM cut short the evaluation of step 3: the metrics are those of step 2, the "
                                "last complete evaluation",
                                "SIGTERM: the end-of-run evaluation (the test split) was skipped"]
