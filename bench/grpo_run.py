"""One GRPO fine-tuning run (TRL's ``GRPOTrainer``) under a wall-clock budget: the baseline of ``bench/llm_vs_grpo.py``.

    python bench/grpo_run.py --model DIR --task arithmetic --task-options JSON \\
        --seed S --prompts P --generations G --max-new-tokens T --eval-prompts E --budget SECONDS [--device cuda]

Needs the ``grpo`` extra (``pip install 'hyperscalees[grpo]'``: trl, which brings datasets);
never a core dependency. Everything matches ``hyperscalees train llm`` where the methods allow:

- the model folder (loaded by ``llm.load_causal_lm``, float32), the task and its options, and the
  seed that picks the training problems;
- the prompts, in the order ES reads them: step ``s`` answers train problems ``s·P ... s·P+P-1``
  (the dataset holds the first ``P · max_steps`` train prompts, unshuffled; each is answered ``G``
  times, so a step is ``P·G`` completions);
- the reward: the task's own (``task.reward``: 1.0 correct, 0.1 well formed, 0), read on the
  completion cut just after the first ``</answer>`` as ES's generation stops there;
- at most ``T`` new tokens per answer;
- the held-out evaluator (``tasks/problems/evaluate.held_out``: greedy, the first E test problems),
  before and after training.

GRPO's own settings are TRL's defaults except what the comparison fixes: sampling temperature
1 (GRPO needs variance within a group), ``beta=0`` (no reference model), fp32 on ``--device``
(the CPU unless ``cuda``; ES's ``train llm --device`` likewise), no checkpoints, no reports. The
training clock starts at ``on_train_begin`` (the model is built, the data set made) and a callback
stops training before the next step would pass the budget (ES's rule); evaluation is outside the
clock. The last stdout line is one JSON record: method, seed, settings, accuracy before and after,
steps, train seconds, generations, and the curve of (seconds, mean train reward) per step.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings

STOP = "</answer>"


class BudgetStop:
    """A TRL/transformers trainer callback (by shape: the trainer calls ``on_<event>`` methods) that
    stops training before the next step would pass ``budget`` seconds and records the curve."""

    def __init__(self, budget: float, snapshot=None):
        self.budget, self.t0, self.last_step_s, self.t_step = budget, None, 0.0, None
        self.curve, self.stopped = [], "max_steps"
        self.snapshot = snapshot  # (model, step, elapsed) -> None, called after every step (it decides when)

    def __getattr__(self, name):  # every other event: nothing to do
        if name.startswith("on_"):
            return lambda *a, **k: None
        raise AttributeError(name)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def on_train_begin(self, args, state, control, **kwargs):
        self.t0 = self.t_step = time.perf_counter()

    def on_step_begin(self, args, state, control, **kwargs):
        self.t_step = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.last_step_s = time.perf_counter() - self.t_step
        if self.snapshot is not None:  # like ES's --snapshot-minutes: the write counts against the clock
            self.snapshot(kwargs["model"], int(state.global_step), self.elapsed())
        if self.elapsed() + self.last_step_s > self.budget:
            control.should_training_stop = True
            self.stopped = "budget"
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "reward" in logs:
            self.curve.append([round(self.elapsed(), 3), float(logs["reward"])])


def snapshotter(a, tok):
    """``--snapshot-every``: a callback writing ``a.snapshot_dir/snapshots/step_N/export`` (a
    ``save_pretrained`` folder) and its index line, as ``train llm --snapshot-minutes`` does (the same
    ``engine/snapshots.py``), so both sides' curves are read and scored alike."""
    if a.snapshot_every is None:
        return None
    from pathlib import Path

    from hyperscalees import llm
    from hyperscalees.engine.snapshots import Snapshots

    class Export:  # the one method Snapshots.write calls on a task
        def export(self, model, directory):
            return {"export": str(llm.save_pretrained(model, tok, Path(directory) / "export", overwrite=True))}

    snaps, out = Snapshots(a.snapshot_every), Path(a.snapshot_dir)

    def snapshot(model, step, elapsed):
        if snaps.due(elapsed):
            snaps.write(Export(), model, out, step, elapsed)
    return snapshot


def cut(text: str, stop: str = STOP) -> str:
    """``text`` up to and including the first ``stop`` (where ES's generation would have ended)."""
    i = text.find(stop)
    return text if i < 0 else text[:i + len(stop)]


def parse(argv=None):
    p = argparse.ArgumentParser(prog="python bench/grpo_run.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a local model folder (save_pretrained form) or .gguf file")
    p.add_argument("--task", default="arithmetic")
    p.add_argument("--task-options", default="{}", metavar="JSON")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prompts", type=int, default=4, help="distinct prompts per step (P), as train llm --prompts")
    p.add_argument("--generations", type=int, default=8, help="completions per prompt (GRPO's group size G)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--eval-prompts", type=int, default=32)
    p.add_argument("--budget", type=float, default=60.0, help="training wall clock in seconds")
    p.add_argument("--max-steps", type=int, default=1000, help="steps at most (the data set holds P x this)")
    p.add_argument("--learning-rate", type=float, default=None, help="default: TRL's (1e-6)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where the model trains and is scored")
    p.add_argument("--snapshot-every", type=float, default=None, metavar="SECONDS",
                   help="save the model to --snapshot-dir every SECONDS of training (ES's --snapshot-minutes)")
    p.add_argument("--snapshot-dir", default=None, metavar="DIR", help="where --snapshot-every writes")
    p.add_argument("--save", default=None, metavar="DIR", help="save the trained model here (save_pretrained form)")
    return p.parse_args(argv)


def run(a) -> dict:
    import torch
    torch.set_num_threads(a.threads)
    from datasets import Dataset
    import trl
    from trl import GRPOConfig, GRPOTrainer

    from hyperscalees import llm
    from hyperscalees.tasks.problems import PROBLEM_SETS
    from hyperscalees.tasks.problems.evaluate import held_out

    task = PROBLEM_SETS[a.task](seed=a.seed, options=json.loads(a.task_options))
    model, tok = llm.load_causal_lm(a.model, device=a.device)
    greedy = llm.Sampling(max_new_tokens=a.max_new_tokens, stop=(STOP,))
    before = held_out(task, model, tok, greedy, a.eval_prompts)

    prompts = task.prompts("train", 0, a.prompts * a.max_steps)
    data = Dataset.from_dict({"prompt": prompts})

    def reward(prompts, completions, **kw):
        return [task.reward(p, cut(c)) for p, c in zip(prompts, completions)]

    stopper = BudgetStop(a.budget, snapshotter(a, tok))
    settings = dict(use_cpu=a.device == "cpu", bf16=False, beta=0.0, temperature=1.0, seed=a.seed, data_seed=a.seed,
                    num_generations=a.generations, per_device_train_batch_size=a.prompts * a.generations,
                    gradient_accumulation_steps=1, max_completion_length=a.max_new_tokens, max_steps=a.max_steps,
                    shuffle_dataset=False, logging_steps=1, save_strategy="no", report_to="none",
                    disable_tqdm=True, dataloader_num_workers=0)
    if a.learning_rate is not None:
        settings["learning_rate"] = a.learning_rate
    with tempfile.TemporaryDirectory(prefix="hs_grpo_") as tmp, warnings.catch_warnings():
        # GRPOConfig warns about its own deprecated gradient_checkpointing field on construction
        warnings.filterwarnings("ignore", message=".*gradient_checkpointing is deprecated", category=FutureWarning)
        config = GRPOConfig(output_dir=tmp, **settings)
        trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=config, train_dataset=data,
                              processing_class=tok, callbacks=[stopper])
        trainer.train()
    train_s = stopper.elapsed()
    steps = int(trainer.state.global_step)
    model.eval()
    after = held_out(task, model, tok, greedy, a.eval_prompts)
    if a.save:
        llm.save_pretrained(model, tok, a.save, overwrite=True)
    generations = steps * a.prompts * a.generations
    transformers = sys.modules["transformers"]  # loaded by trl (only llm/*.py import it by name)
    return {"method": "grpo", "seed": a.seed, "model": a.model, "task": a.task, "task_options": a.task_options,
            "settings": {"prompts": a.prompts, "generations": a.generations, "max_new_tokens": a.max_new_tokens,
                         "eval_prompts": a.eval_prompts, "budget_s": a.budget, "threads": a.threads,
                         "device": a.device,
                         "learning_rate": config.learning_rate, "beta": config.beta,
                         "temperature": config.temperature, "loss_type": config.loss_type,
                         "optimizer": str(config.optim)},
            "before": before, "after": after, "steps": steps, "stopped": stopper.stopped,
            "train_s": round(train_s, 3), "generations": generations,
            "generations_per_s": generations / train_s if train_s > 0 else None, "curve": stopper.curve,
            "versions": {"trl": trl.__version__, "transformers": transformers.__version__,
                         "torch": torch.__version__}}


def main(argv=None) -> int:
    a = parse(argv)
    for name in ("prompts", "generations", "max_new_tokens", "eval_prompts", "max_steps", "threads"):
        if getattr(a, name) < 1:
            print(f"grpo_run: --{name.replace('_', '-')} must be >= 1", file=sys.stderr)
            return 2
    if a.generations < 2:
        print("grpo_run: --generations must be >= 2 (GRPO compares completions within a group)", file=sys.stderr)
        return 2
    if not a.budget > 0:
        print("grpo_run: --budget must be > 0 seconds", file=sys.stderr)
        return 2
    if (a.snapshot_every is None) != (a.snapshot_dir is None) or (a.snapshot_every is not None
                                                                  and not a.snapshot_every > 0):
        print("grpo_run: --snapshot-every SECONDS (> 0) and --snapshot-dir DIR go together", file=sys.stderr)
        return 2
    if a.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            print("grpo_run: --device cuda but CUDA is not available", file=sys.stderr)
            return 2
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    rec = run(a)
    print(json.dumps(rec))
    return 0


if __name__ == "__main__":
    sys.exit(main())
