"""Question: which task setting, model size and recipe warm-starts a char Llama to 15-40% held-out accuracy?

Demonstration 1 (``bench/llm_vs_grpo.py --warm-start-minutes``) needs a starting model well above 0% and well
below 100%, so that ES and GRPO have room to move either way. This trains one setting the way
``warm_start.supervise`` does (AdamW, teacher forcing on the task's reference solutions, linear
warm-up over 20 steps, gradient clipping at 1) and scores held-out accuracy (``held_out``: greedy,
the first E test problems, the bench's evaluator) every ``--every`` seconds. The clock is this
process's **CPU time**, so a loaded machine slows the sweep down without changing its answer.
A dev tool: run from a source checkout, one setting per process, ``OMP_NUM_THREADS=1``.

    OMP_NUM_THREADS=1 .venv/bin/python bench/warm_start_sweep.py --task countdown \\
        --task-options '{"min_numbers": 2, "max_numbers": 2, "max_value": 20, "min_target": 1, "max_target": 400}' \\
        --hidden 64 --layers 2 --lr 1e-2 --batch 16 --minutes 6 --every 60

``--rl-seed`` also scores the train problems of that seed, the prompts ES and GRPO train on: a
start that already answers those (memorised keys) leaves them no signal to climb.

Prints one line per evaluation, then one JSON line with the setting and the curve.
"""
from __future__ import annotations

import argparse
import json
import time

import torch

from hyperscalees import llm
from hyperscalees.tasks.problems import PROBLEM_SETS
from hyperscalees.tasks.problems.evaluate import held_out
from warm_start import char_llama, supervised_step


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="arithmetic")
    p.add_argument("--task-options", default='{"min_steps": 1, "max_steps": 1, "max_number": 9}', metavar="JSON")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--minutes", type=float, default=4.0, help="CPU minutes of training")
    p.add_argument("--every", type=float, default=60.0, help="CPU seconds between evaluations")
    p.add_argument("--eval-prompts", type=int, default=64)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--rl-seed", type=int, default=100,
                   help="also score the train problems of this seed (what ES and GRPO train on): a start "
                        "near 100%% there leaves them no reward signal, whatever the held-out accuracy")
    p.add_argument("--rl-task-options", default="", metavar="JSON",
                   help="the task options RL trains with, when the warm start's differ (e.g. a warm start on "
                        "'train_size': 64 problems, RL on all of them); default: --task-options")
    a = p.parse_args()
    torch.set_num_threads(1)
    task = PROBLEM_SETS[a.task](seed=0, options=json.loads(a.task_options))
    rl_options = json.loads(a.rl_task_options or a.task_options)
    rl_task = PROBLEM_SETS[a.task](seed=a.rl_seed, options=rl_options)  # the prompts RL trains on
    model, tok = char_llama(hidden=a.hidden, layers=a.layers, heads=a.heads, seed=0)
    sampling = llm.Sampling(max_new_tokens=a.max_new_tokens, stop=("</answer>",))
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20))
    torch.manual_seed(0)
    cpu, step, due, losses, curve = 0.0, 0, a.every, [], []
    while cpu < 60 * a.minutes:
        t = time.process_time()
        model.train()
        batch = [(q.prompt, q.solution) for q in task.problems("train", step * a.batch, a.batch)]
        losses.append(supervised_step(model, tok, batch, opt, sched, "cpu"))
        step, cpu = step + 1, cpu + time.process_time() - t
        if cpu >= due or cpu >= 60 * a.minutes:
            due += a.every
            model.eval()
            m = held_out(task, model, tok, sampling, a.eval_prompts)
            rl = held_out(rl_task, model, tok, sampling, a.eval_prompts, split="train")["accuracy"]
            curve.append({"cpu_s": round(cpu, 1), "step": step, "loss": sum(losses) / len(losses), **m,
                          "rl_train_accuracy": rl})
            losses = []
            print(f"cpu {cpu:5.0f} s  step {step:5d}  loss {curve[-1]['loss']:.3f}  accuracy {m['accuracy']:.3f}  "
                  f"formatted {m['formatted']:.2f}  RL train accuracy {rl:.3f}", flush=True)
    params = sum(q.numel() for q in model.parameters())
    print(json.dumps({"setting": vars(a), "params": params, "curve": curve}))


if __name__ == "__main__":
    main()
