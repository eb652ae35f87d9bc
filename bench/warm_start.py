"""A small Llama built from a config with a character tokenizer, and a supervised warm start.

``char_llama(hidden=128, layers=4, heads=4)`` gives ``(model, tokenizer)``: one token per
printable ASCII character (and newline), plus ``<pad> <s> </s> <unk>``, and a Llama with random
weights (Hugging Face's init). ``supervise(model, tokenizer, pairs, seconds)`` trains it by
backprop (AdamW, teacher forcing) on ``prompt + completion + </s>`` with the loss on the
completion tokens only, until ``seconds`` have passed, and returns what it did. Nothing
downloads; save the result with :func:`hyperscalees.llm.save_pretrained`.
:func:`warm_start` does both for a task's reference solutions and saves the model.

This is how ``python bench/llm_vs_grpo.py --warm-start-minutes`` makes a model that starts above
0% on a task, so that ES and GRPO have a reward signal to climb (demonstration 1 of the LLM guide).
A fixture of the project's studies, not part of the installed package.
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Callable, Iterator

import torch

from hyperscalees.llm.shapes import PRINTABLE, char_tokenizer


def char_llama(hidden: int = 128, layers: int = 4, heads: int = 4, intermediate: int | None = None,
               max_positions: int = 1024, seed: int = 0, chars=PRINTABLE):
    """``(model, tokenizer)``: a randomly initialised Llama over a character vocabulary."""
    from transformers import LlamaConfig, LlamaForCausalLM
    tok = char_tokenizer(chars)
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=intermediate or 4 * hidden,
                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                      max_position_embeddings=max_positions, tie_word_embeddings=True,
                      pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    return LlamaForCausalLM(cfg).eval(), tok


def _batch(tokenizer, pairs: list[tuple[str, str]], device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, attention mask, labels) right-padded; labels are -100 outside the completion and its </s>."""
    rows, labels = [], []
    for prompt, completion in pairs:
        p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        c = tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        rows.append(p + c)
        labels.append([-100] * len(p) + c)
    width = max(map(len, rows))
    pad = tokenizer.pad_token_id
    ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows], device=device)
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], device=device)
    lab = torch.tensor([r + [-100] * (width - len(r)) for r in labels], device=device)
    return ids, mask, lab


def supervised_step(model, tokenizer, pairs: list[tuple[str, str]], opt, sched, device) -> float:
    """One teacher-forced step on ``pairs`` (gradient clipped at 1); the batch's mean loss."""
    ids, mask, lab = _batch(tokenizer, pairs, device)
    loss = model(input_ids=ids, attention_mask=mask, labels=lab).loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    return loss.item()


def supervise(model, tokenizer, pairs: Callable[[int], list[tuple[str, str]]] | Iterator, seconds: float,
              lr: float = 1e-3, weight_decay: float = 0.01, warmup: int = 20, log: Callable | None = None,
              log_every: int = 50) -> dict:
    """Teacher-forced AdamW on ``pairs(step) -> [(prompt, completion), ...]`` for ``seconds`` of wall clock.

    The learning rate warms up linearly over ``warmup`` steps, then stays. Returns
    ``{"steps", "seconds", "loss"}`` (the last logged mean loss). The model ends in eval mode.
    """
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"seconds must be a finite number > 0, got {seconds!r}")
    device = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
    model.train()
    t0, step, losses, last = time.perf_counter(), 0, [], math.nan
    while time.perf_counter() - t0 < seconds:
        losses.append(supervised_step(model, tokenizer, pairs(step), opt, sched, device))
        step += 1
        if step % log_every == 0:
            last, losses = sum(losses) / len(losses), []
            if log:
                log(f"  warm start: step {step}, {time.perf_counter() - t0:.0f} s, loss {last:.3f}")
    model.eval()
    if losses:
        last = sum(losses) / len(losses)
    return {"steps": step, "seconds": round(time.perf_counter() - t0, 2), "loss": last}


WARM_SIZE = {"hidden": 64, "layers": 2, "heads": 4}  # learned the one-step setting fastest per CPU minute here (sweep)


def warm_start(folder: Path, minutes: float, c: dict, log=print, size: dict | None = None, batch: int = 16,
               lr: float = 3e-3, seed: int = 0, options: dict | None = None) -> dict:
    """Build a small Llama (:func:`char_llama`), train it by backprop on the task's reference
    solutions (train split) for ``minutes``, save it to ``folder``; returns what it did and its
    held-out metrics before and after. ``c``: the study's settings (task, task_options,
    max_new_tokens, eval_prompts).

    ``options`` override the task's options for the warm start only: ``{"train_size": 64}`` trains
    on 64 distinct problems, so the problems ES and GRPO then train on are not all memorised (on
    the whole training split the warm start answers ~97% of them and leaves RL no signal)."""
    from hyperscalees import llm
    from hyperscalees.tasks.problems import PROBLEM_SETS
    from hyperscalees.tasks.problems.evaluate import held_out
    size = size or WARM_SIZE
    task_options = {**c["task_options"], **(options or {})}
    task = PROBLEM_SETS[c["task"]](seed=seed, options=task_options)
    model, tok = char_llama(seed=seed, **size)
    sampling = llm.Sampling(max_new_tokens=c["max_new_tokens"], stop=("</answer>",))
    before = held_out(task, model, tok, sampling, c["eval_prompts"])
    pairs = lambda s: [(p.prompt, p.solution) for p in task.problems("train", s * batch, batch)]
    torch.manual_seed(seed)
    trained = supervise(model, tok, pairs, 60.0 * minutes, lr=lr, log=log)
    after = held_out(task, model, tok, sampling, c["eval_prompts"])
    llm.save_pretrained(model, tok, folder, overwrite=True)
    return {"folder": str(folder), "size": size, "params": sum(p.numel() for p in model.parameters()),
            "batch": batch, "lr": lr, "minutes": minutes, "task_options": task_options, **trained,
            "before": before, "after": after}
