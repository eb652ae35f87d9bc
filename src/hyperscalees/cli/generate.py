"""``hyperscalees generate DIR --prompt TEXT``: sample text from a trained ``lm`` run's checkpoint.

Sampling is d-eggs' (temperature 0.6, min-p 0.08, presence penalty 0.2 by default; see
``tasks/lm/sampling.py``) and seeded: the same checkpoint, prompt and ``--seed`` print the
same text. Only the run directory is read: checkpoints keep the model's vocabulary, so no
training data is needed (runs saved before that read their data; ``--data`` says where it is
now if it moved). On a terminal, non-printable characters are shown escaped (``\x1b``): a model
can emit terminal escape sequences, which a terminal would otherwise obey; ``--raw``, a pipe
or a file gets the text as generated.
"""
from __future__ import annotations

import argparse
import sys

from ..engine import load_run
from ..tasks.lm.sampling import generate
from .base import examples_epilog, fail, json_line, os_error

PROG = "hyperscalees generate"


def register(subparsers) -> None:
    p = subparsers.add_parser("generate", help="sample text from a trained lm checkpoint",
                              description="Continue --prompt with the model saved in DIR (a `train lm --out DIR` run).",
                              **examples_epilog([("hyperscalees train lm --steps 50 --out runs/lm", "a run to sample from"),
                                                 ("hyperscalees generate runs/lm --prompt 'def ' --tokens 100",
                                                  "continue 'def ' by 100 tokens")]))
    p.add_argument("directory", metavar="DIR", help="run directory written by `hyperscalees train lm --out DIR`")
    p.add_argument("--prompt", default="\n", help="text to continue (default: a newline)")
    p.add_argument("--tokens", type=int, default=200, help="tokens to generate (default: 200)")
    p.add_argument("--temperature", type=float, default=0.6, help="softmax temperature, > 0 (default: 0.6)")
    p.add_argument("--min-p", type=float, default=0.08,
                   help="drop tokens whose probability is below min-p x the top one's (default: 0.08)")
    p.add_argument("--presence-penalty", type=float, default=0.2,
                   help="nats subtracted from every token already present (default: 0.2)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default: 0)")
    p.add_argument("--device", default=None, help="torch device (default: cpu)")
    p.add_argument("--data", default=None, metavar="PATH",
                   help="where the run's data is now, if it moved (only runs saved before checkpoints kept the "
                        "vocabulary read their data)")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    p.add_argument("--raw", action="store_true",
                   help="write control characters as generated even to a terminal (default: escaped there)")
    p.set_defaults(func=run)


def terminal_safe(text: str) -> str:
    """``text`` with every non-printable character but newline and tab escaped as Python writes it."""
    return "".join(c if c.isprintable() or c in "\n\t" else repr(c)[1:-1] for c in text)


def run(args: argparse.Namespace) -> int:
    try:
        cfg, task, model, step = load_run(args.directory, args.device, data={"data": args.data} if args.data else None,
                                          data_free=True)  # the vocabulary in the run: no data read
        if cfg.task != "lm":
            raise ValueError(f"{args.directory!r} holds a {cfg.task!r} run, not a language model (train lm)")
        model.eval()
        prompt = task.vocabulary.encode(args.prompt)
        out = generate(model, prompt, args.tokens, args.temperature, args.min_p, args.presence_penalty,
                       seed=args.seed, context=task.options.window)
    except (FileNotFoundError, ValueError, RuntimeError) as e:
        return fail(PROG, str(e))
    except OSError as e:
        return fail(PROG, os_error(e))
    text = task.vocabulary.decode(out)
    if args.json:
        print(json_line({"directory": args.directory, "step": step, "model": cfg.options["model"],
                         "prompt": args.prompt, "seed": args.seed, "tokens": out, "text": text}))
    else:
        shown = args.prompt + text
        print(shown if args.raw or not sys.stdout.isatty() else terminal_safe(shown))
    return 0
