"""Ctrl-C and SIGTERM sent to a real training process: it checkpoints, says where, exits 130/143, resumes exactly."""
import json
import signal
import time

import pytest
from run_helpers import assert_same_run, start_cli, wait_for_rows

from hyperscalees.cli.main import main
from hyperscalees.distributed import LocalBackend
from hyperscalees.engine import load_checkpoint, make_config, run
from hyperscalees.engine.interrupt import Interrupted, StopRequest
from hyperscalees.tasks import XorTask

pytestmark = pytest.mark.usefixtures("no_plot")

ES = {"population": 16, "seed": 4}
FLAGS = ["train", "xor", "--population", "16", "--seed", "4", "--steps", "100000"]  # never ends by itself


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_checkpoints_the_run_and_resume_is_exact(tmp_path, sig, code):
    out = tmp_path / "run"
    proc = start_cli([*FLAGS, "--out", str(out), "--json"])  # --checkpoint-every 0: nothing until the end
    wait_for_rows(out, 3, proc)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr
    step = load_checkpoint(out).step
    assert step >= 3, step
    print("interrupted at", step)
    assert f"interrupted by {sig.name} at step {step}/100000" in stderr and str(out) in stderr
    assert "Traceback" not in stderr
    summary = json.loads(stdout.splitlines()[-1])
    assert summary["stopped"] == sig.name and summary["signal"] == sig.name and summary["steps"] == step
    # continue to step + 3 and compare with a run that was never interrupted
    run(make_config("xor", es=ES, engine={"steps": step + 3, "resume": str(out)}), LocalBackend)
    run(make_config("xor", es=ES, engine={"steps": step + 3, "out": str(tmp_path / "straight")}), LocalBackend)
    assert_same_run(tmp_path / "straight", out)


def test_a_second_ctrl_c_stops_at_once_without_damage(tmp_path):
    out = tmp_path / "run"
    proc = start_cli([*FLAGS, "--out", str(out), "--checkpoint-every", "1"])
    wait_for_rows(out, 3, proc)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "interrupted by SIGINT" in stderr
    step = load_checkpoint(out).step  # whichever save the second signal cut short, a commit is there
    summary = run(make_config("xor", es=ES, engine={"steps": step + 2, "resume": str(out), "checkpoint_every": 1}), LocalBackend)
    assert summary["steps"] == step + 2
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def signal_at_step(monkeypatch, step, *signals):
    """Deliver real signals to this process from inside the fitness call of ``step``."""
    real = XorTask.fitness

    def fitness(self, model, lo, hi, step_=0, **kw):
        if step_ == step and lo == 0:
            for s in signals:
                signal.raise_signal(s)
        return real(self, model, lo, hi, step_)

    monkeypatch.setattr(XorTask, "fitness", lambda self, m, lo, hi, step=0: fitness(self, m, lo, hi, step))


def test_without_out_an_interrupt_says_nothing_was_saved(monkeypatch, capsys):
    signal_at_step(monkeypatch, 2, signal.SIGTERM)
    code = main(["train", "xor", "--population", "16", "--steps", "50"])
    err = capsys.readouterr().err
    assert code == 143
    assert "no --out given: nothing will be saved" in err
    assert "interrupted by SIGTERM at step 3/50: nothing saved (no --out)" in err  # the step in flight completes


def test_a_second_signal_in_process_exits_at_once(tmp_path, monkeypatch, capsys):
    signal_at_step(monkeypatch, 2, signal.SIGINT, signal.SIGINT)
    code = main(["train", "xor", "--population", "16", "--steps", "50", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 130 and "stopped at once" in err
    assert not (tmp_path / "checkpoint.json").exists()  # nothing was committed before the abort


# -- a wait that cannot poll the request (Ray's start-up): the first signal stops it at once ----------
def test_within_at_once_the_first_signal_raises_naming_what_it_cut():
    with StopRequest() as stop:
        with pytest.raises(Interrupted) as caught:
            with stop.at_once("while starting the test backend"):
                signal.raise_signal(signal.SIGTERM)
                time.sleep(5)
    assert caught.value.signum == signal.SIGTERM and caught.value.during == "while starting the test backend"


class _Swallows:
    """Raises the signal in ``__del__``, whose exceptions Python ignores (as it does an at-fork hook's:
    the first Python code a signal that came during one of Ray's forks meets)."""

    def __del__(self):
        signal.raise_signal(signal.SIGINT)


def test_a_signal_whose_exception_a_callback_swallowed_is_raised_again():
    with StopRequest() as stop:
        t0 = time.perf_counter()
        with pytest.raises(Interrupted) as caught:
            with stop.at_once("while starting"):
                _Swallows()               # deleted at once: the handler's exception is lost in __del__
                time.sleep(5)             # the signal, sent again, interrupts this
    assert time.perf_counter() - t0 < 2 and caught.value.during == "while starting"


def test_a_signal_still_lost_is_raised_when_the_wait_ends():
    with StopRequest() as stop:
        with pytest.raises(Interrupted):
            with stop.at_once("while starting"):
                try:
                    signal.raise_signal(signal.SIGINT)
                except Interrupted:       # code under way that ate it
                    pass
