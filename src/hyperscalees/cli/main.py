"""``hyperscalees`` entry point: one subcommand per module, each with ``register(subparsers)``.

A subcommand module adds its parser in ``register`` and sets ``func=run`` where
``run(args) -> int`` is the exit code. Commands are looked up here and nowhere else.
"""
from __future__ import annotations

import argparse
import difflib
import importlib
import os
import signal
import sys
import warnings

from ..engine.checkpoint import package_version
from .allocator import keep_freed_memory

COMMANDS = ("train", "eval", "env", "bench", "generate", "arch", "coord-check")
MODULES = {"coord-check": "coord_check"}
START_HERE = """start here:
  hyperscalees train xor                        # seconds: ES solves XOR (train TASK runs a task's tuned defaults)
  hyperscalees train digits --out runs/digits   # a real dataset; checkpoints, metrics and curve.png in runs/digits
  hyperscalees eval runs/digits                 # score the saved run again
  hyperscalees train digits --help              # a task's options, the ES and engine flags, examples
  hyperscalees env                              # versions, devices and threads
  hyperscalees train --help                     # the tasks: MLPs, RL, byte language models, pretrained LLMs

The guides are in docs/ (`make docs` builds them into site/)."""  # commands whose module name differs (a module name has no hyphen)


def _command_modules():
    mods = []
    for name in COMMANDS:
        full = f"{__package__}.{MODULES.get(name, name)}"
        try:
            mods.append(importlib.import_module(full))
        except ModuleNotFoundError as e:
            if e.name == full:  # a command not written yet: simply absent
                continue
            mods.append(_Broken(name, e))
        except ImportError as e:
            mods.append(_Broken(name, e))
    return mods


class _Broken:
    """Stands in for a command whose module fails to import, so the other commands keep working."""

    def __init__(self, name: str, error: Exception):
        self.name, self.error = name, error

    def register(self, subparsers) -> None:
        p = subparsers.add_parser(self.name, help=f"(unavailable: {self.error})")
        p.set_defaults(func=self.run)

    def run(self, args) -> int:
        print(f"hyperscalees {self.name}: unavailable: {self.error}", file=sys.stderr)
        return 1


class Parser(argparse.ArgumentParser):
    """argparse with errors on one line: the message and where to look, not a page of usage first
    (every sub-command's parser is one of these: add_subparsers makes its parsers of its own class)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` lists the flags)\n")


def did_you_mean(parser: argparse.ArgumentParser, flag: str) -> str:
    """'; did you mean --steps?' for a mistyped flag, or '' when nothing is close."""
    name = flag.split("=", 1)[0]
    close = difflib.get_close_matches(name, [o for o in parser._option_string_actions if o.startswith("--")], n=1)
    return f"; did you mean {close[0]}?" if close else ""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="hyperscalees", description="Evolution strategies at the hyperscale (EGGROLL) in PyTorch.",
                    epilog=START_HERE, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"hyperscalees {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                help=f"one of {', '.join(COMMANDS)}; COMMAND --help for its flags")
    for mod in _command_modules():
        mod.register(sub)
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parser.parse_args``, but an unknown flag is reported by the sub-command it was typed after
    (``train xor --stpes 3`` shows ``train xor``'s usage, not the top-level one)."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        owner = parser
        while True:
            sub = next((a for a in owner._actions if isinstance(a, argparse._SubParsersAction)), None)
            if sub is None or getattr(args, sub.dest, None) not in sub.choices:
                break
            owner = sub.choices[getattr(args, sub.dest)]
        owner.error(f"unrecognized argument{'s' if len(extra) > 1 else ''} {' '.join(extra)}"
                    f"{did_you_mean(owner, extra[0]) if extra[0].startswith('--') else ''}")
    return args


def _as_note(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning as the CLI's other remarks: one ``note:`` line, without a source path."""
    print(f"note: {message}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = parse(build_parser(), argv)
    keep_freed_memory()  # population forwards churn activation-sized temporaries
    try:
        with warnings.catch_warnings():  # restores the caller's warning display afterwards
            warnings.showwarning = _as_note
            return int(args.func(args) or 0)
    except BrokenPipeError:  # output piped into head & co.: not an error
        sys.stdout = open(os.devnull, "w")
        return 0
    except KeyboardInterrupt as e:  # before a run installs its handlers, or a second Ctrl-C/SIGTERM
        signum, during = getattr(e, "signum", signal.SIGINT), getattr(e, "during", None)
        print(f"interrupted by {signal.Signals(signum).name}{' ' + during if during else ''}: stopped at once; "
              "the last committed checkpoint, if any, is intact", file=sys.stderr)
        return 128 + signum


if __name__ == "__main__":
    raise SystemExit(main())
