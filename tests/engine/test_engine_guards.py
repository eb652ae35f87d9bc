"""What keeps a run directory safe: no silent overwrite, no NaN checkpoint, no stale files, one writer."""
import math

import pytest
import torch

from hyperscalees.distributed import LocalBackend
from hyperscalees.engine import BadFileError, DivergedError, load_checkpoint, make_config, read_rows, run
from hyperscalees.engine.files import exclusive
from hyperscalees.tasks import XorTask

pytestmark = pytest.mark.usefixtures("no_plot")
ES = {"population": 16, "seed": 2}


def config(**engine):
    return make_config("xor", es=ES, engine={"steps": 3, **engine})


def test_a_finished_run_is_not_overwritten_unless_asked(tmp_path):
    run(config(out=str(tmp_path)), LocalBackend)
    with pytest.raises(ValueError, match=r"already holds a run \(checkpoint at step 3\).*--resume.*--overwrite"):
        run(config(out=str(tmp_path), steps=5), LocalBackend)
    assert load_checkpoint(tmp_path).step == 3
    run(config(out=str(tmp_path), steps=2, overwrite=True), LocalBackend)
    assert load_checkpoint(tmp_path).step == 2 and [r["step"] for r in read_rows(tmp_path / "metrics.jsonl")] == [1, 2]
    run(config(out=str(tmp_path), resume=str(tmp_path), steps=4), LocalBackend)  # --resume into itself is fine
    assert load_checkpoint(tmp_path).step == 4


def test_out_must_be_a_directory(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(BadFileError, match="is a file, not a run directory"):
        run(config(out=str(tmp_path / "file")), LocalBackend)


def test_resuming_past_the_target_step_is_refused_clearly(tmp_path):
    run(config(out=str(tmp_path), steps=4), LocalBackend)
    with pytest.raises(ValueError, match=r"already at step 4, past --steps 2; give --steps 4 or more"):
        run(config(resume=str(tmp_path), steps=2), LocalBackend)
    assert load_checkpoint(tmp_path).step == 4


def poison_at(monkeypatch, step):
    """The weights turn NaN during ``step`` (as a diverging update would make them)."""
    real = XorTask.fitness

    def fitness(self, model, lo, hi, step_=0):
        scores = real(self, model, lo, hi, step_)
        if step_ + 1 == step:  # after scoring, so the update itself makes the weights NaN
            with torch.no_grad():
                model[0].weight.data[0, 0] = math.nan
        return scores

    monkeypatch.setattr(XorTask, "fitness", lambda self, m, lo, hi, step=0: fitness(self, m, lo, hi, step))


def test_non_finite_weights_stop_the_run_and_keep_the_last_good_checkpoint(tmp_path, monkeypatch):
    poison_at(monkeypatch, 5)
    with pytest.raises(DivergedError, match=r"non-finite at step 5 \(0\.weight\).*checkpoint of step 4 .* is kept"):
        run(config(out=str(tmp_path), steps=8, checkpoint_every=2), LocalBackend)
    ck = load_checkpoint(tmp_path)
    assert ck.step == 4 and all(torch.isfinite(v).all() for v in ck.model.values())


def test_a_torn_last_metrics_line_is_dropped_and_a_bad_middle_line_is_named(tmp_path):
    run(config(out=str(tmp_path), steps=2), LocalBackend)
    path = tmp_path / "metrics.jsonl"
    with open(path, "a") as f:
        f.write('{"step": 3, "fitness_me')  # a crash in the middle of an append
    run(config(resume=str(tmp_path), steps=3), LocalBackend)
    assert [r["step"] for r in read_rows(path)] == [1, 2, 3]
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "{oops", *lines[1:]]) + "\n")
    with pytest.raises(BadFileError, match=r"metrics\.jsonl' line 2 is not valid JSON"):
        run(config(resume=str(tmp_path), steps=4), LocalBackend)


def test_files_of_interrupted_saves_are_removed_at_the_next_start(tmp_path):
    run(config(out=str(tmp_path), steps=2), LocalBackend)
    stale = ["model-000007.safetensors", "strategy-000007.safetensors", ".model-000007.safetensors.99.abcd.tmp",
             ".checkpoint.json.99.abcd.tmp", "task-000005.pt"]  # the last: an earlier version's pickle
    for name in stale:
        (tmp_path / name).write_bytes(b"half")
    run(config(resume=str(tmp_path), steps=3), LocalBackend)
    names = {p.name for p in tmp_path.iterdir()}
    assert not names & set(stale)
    assert {"model-000003.safetensors", "strategy-000003.safetensors", "task-000003.safetensors"} <= names


def test_two_processes_never_write_one_run(tmp_path):
    with exclusive(tmp_path):
        with pytest.raises(BadFileError, match="another process is writing"):
            run(config(out=str(tmp_path)), LocalBackend)
    run(config(out=str(tmp_path)), LocalBackend)  # released: fine again


def test_long_runs_checkpoint_by_time_by_default(tmp_path, monkeypatch):
    """Issue 19, item 5: without --checkpoint-every a kill lost everything since the start."""
    assert make_config("lm").engine.checkpoint_minutes > 0 and make_config("lm").engine.checkpoint_every == 0
    clock = iter(range(0, 10_000, 100))            # every perf_counter() call: 100 s later
    monkeypatch.setattr("hyperscalees.engine.loop.time.perf_counter", lambda: float(next(clock)))
    poison_at(monkeypatch, 5)
    with pytest.raises(DivergedError, match=r"checkpoint of step 4 .* is kept"):
        run(config(out=str(tmp_path), steps=8), LocalBackend)
    assert load_checkpoint(tmp_path).step == 4


def test_a_step_whose_whole_population_is_non_finite_fails_and_keeps_the_last_checkpoint(tmp_path, monkeypatch):
    """Issue 19, item 6: `--lr 1e38 --optimizer sgd` kept finite weights scoring inf and exited 0."""
    real = XorTask.fitness

    def fitness(self, model, lo, hi, step=0):
        scores = real(self, model, lo, hi, step)
        return torch.full_like(scores, math.inf) if step >= 3 else scores

    monkeypatch.setattr(XorTask, "fitness", fitness)
    monkeypatch.setattr("hyperscalees.strategies.metrics._warned_nonfinite", True)
    with pytest.raises(DivergedError, match=r"every fitness of step 4 is non-finite.*checkpoint of step 2 .* is kept"):
        run(config(out=str(tmp_path), steps=8, checkpoint_every=2), LocalBackend)
    assert load_checkpoint(tmp_path).step == 2


def test_the_lm_curve_draws_the_baselines_that_decide_solved():
    """Issue 19: curve.png of an lm run lacked the bigram/unigram lines `solved` is judged by."""
    from hyperscalees.engine.metrics import reference_metrics
    rows = [{"step": 1, "val_bpb": 5.0, "bigram_bpb": 3.7, "unigram_bpb": 4.9, "val_bpt": 9.0, "eval_return_std": 1}]
    assert reference_metrics(rows, "val_bpb") == ["bigram_bpb", "unigram_bpb"]
    assert reference_metrics([{"step": 1, "eval_return": 1.0, "eval_return_std": 0.5}], "eval_return") == []
    assert reference_metrics(rows, "mse") == []
