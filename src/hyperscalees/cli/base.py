"""Flags generated from frozen dataclass fields, so a config field is declared exactly once.

Field ``weight_decay`` of a part ``es`` becomes ``--weight-decay`` with ``dest="es.weight_decay"``;
the type comes from the annotation (``int | None`` parses an int, a ``bool`` is a switch)
and :func:`collect` turns the parsed namespace back into ``{"weight_decay": ...}``.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import types
import typing
from dataclasses import MISSING, fields

from ..engine.files import json_safe


def _parse_type(annotation):
    """(parser callable, is_bool) for a resolved field annotation."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = args[0]
    if annotation is bool:
        return None, True
    if annotation in (int, float, str):
        return annotation, False
    raise TypeError(f"no command-line parser for field type {annotation!r}")


# docstring markup a terminal shows as noise: ``x`` and :class:`x` become x; a pointer to a
# module docstring the user of a command cannot open is dropped
_ROLE = re.compile(r":(?:class|func|meth|attr|mod|data|obj):`~?([^`]+)`")
_POINTER = re.compile(r"\s*[(;,]?\s*see the module docstring[^)\n.]*\)?", re.I)


def plain(text: str) -> str:
    """Help text from a docstring or a field's help: no reST double backticks or roles."""
    return _POINTER.sub("", _ROLE.sub(r"\1", text or "")).replace("``", "")


def examples_epilog(pairs: list[tuple[str, str]]) -> dict:
    """``add_parser`` keywords that end a command's help with examples: (command, what it does)."""
    width = max(len(c) for c, _ in pairs)
    return {"epilog": "examples:\n" + "\n".join(f"  {c:<{width}}  # {w}" for c, w in pairs),
            "formatter_class": argparse.RawDescriptionHelpFormatter}


def flag_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


EXPLICIT = "_explicit_flags"  # namespace attribute: dests the user actually typed


class StoreExplicit(argparse._StoreAction):
    """``store`` that also records the dest as typed by the user."""

    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values, option_string)
        _mark(namespace, self.dest)


class _StoreTrue(argparse._StoreTrueAction):
    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values, option_string)
        _mark(namespace, self.dest)


class _StoreFalse(argparse._StoreFalseAction):
    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values, option_string)
        _mark(namespace, self.dest)


def _mark(namespace, dest: str) -> None:
    setattr(namespace, EXPLICIT, getattr(namespace, EXPLICIT, frozenset()) | {dest})


def explicit(args: argparse.Namespace) -> frozenset[str]:
    """Dests given on the command line (as opposed to left at their defaults)."""
    return getattr(args, EXPLICIT, frozenset())


def add_dataclass_flags(parser, cls, part: str, defaults: dict | None = None, choices: dict | None = None,
                        helps: dict | None = None, skip: tuple[str, ...] = (),
                        metavars: dict | None = None) -> list[str]:
    """Add one flag per field of dataclass ``cls`` to ``parser``; return the flag names.

    A field's ``metadata`` ("help", "choices", "metavar": see ``tasks.base.option``) takes
    precedence over the ``helps``/``choices``/``metavars`` tables, which serve dataclasses that
    the command line owns (ES and engine settings)."""
    hints = typing.get_type_hints(cls)
    defaults, choices, helps, metavars = defaults or {}, choices or {}, helps or {}, metavars or {}
    added = []
    for f in fields(cls):
        if f.name in skip:
            continue
        default = defaults.get(f.name, f.default if f.default is not MISSING else None)
        parse, is_bool = _parse_type(hints[f.name])
        text = plain(f.metadata.get("help", helps.get(f.name, "")))  # a field's own help wins
        flag, dest = flag_name(f.name), f"{part}.{f.name}"
        if is_bool and default:  # a switch that is on by default is turned off with --no-NAME
            flag = "--no-" + flag[2:]
            parser.add_argument(flag, dest=dest, action=_StoreFalse, default=True, help=text)
        elif is_bool:
            parser.add_argument(flag, dest=dest, action=_StoreTrue, default=False, help=text)
        else:
            opts = f.metadata.get("choices", choices.get(f.name))
            opts = tuple(opts()) if callable(opts) else opts
            if "default" not in text:
                text = f"{text} (default: {default})".strip()
            metavar = f.metadata.get("metavar", metavars.get(f.name, f.name.upper()))
            parser.add_argument(flag, dest=dest, action=StoreExplicit, type=parse, default=default, choices=opts,
                                metavar=None if opts else metavar, help=text)
        added.append(flag)
    return added


def collect(args: argparse.Namespace, part: str) -> dict:
    """The ``part`` fields parsed by :func:`add_dataclass_flags`, keyed by field name."""
    prefix = part + "."
    return {k[len(prefix):]: v for k, v in vars(args).items() if k.startswith(prefix)}


def name_flags(message: str, fields_to_flags: dict[str, str]) -> str:
    """A config error as the user typed it: a message opening with a dataclass field
    (``eval_episodes must be ...``) opens with its flag instead (``--eval-episodes must be ...``)."""
    head = message.split(" ", 1)[0]
    if head in fields_to_flags:
        return fields_to_flags[head] + message[len(head):]
    return message


def fail(prog: str, message: str) -> int:
    """Report a user error the argparse way (no traceback) and return exit code 2."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


def json_line(obj: dict) -> str:
    """``obj`` as one line of strict JSON: NaN and infinities become null, with a note saying where."""
    clean, where = json_safe(obj)
    if where:
        clean.setdefault("notes", [])
        clean["notes"] = list(clean["notes"]) + [f"non-finite values written as null: {', '.join(where)}"]
    return json.dumps(clean, allow_nan=False)


def os_error(e: OSError) -> str:
    """An OSError as 'what: path' (its str() repeats the errno in brackets)."""
    where = f": {e.filename!r}" if e.filename else ""
    return f"{e.strerror or e}{where}"
