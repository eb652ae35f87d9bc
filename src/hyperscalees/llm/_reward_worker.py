"""The worker process of ``SafeReward``, and the loader of ``"module:function"`` paths.

Standard library only: the worker runs this file as a script (``python _reward_worker.py``),
so it starts in tens of milliseconds without importing torch or hyperscalees. The parent sends
pickled messages on the worker's stdin: first ``{"sys_path", "cwd", "spec" or "pickled"}``,
then ``("batch", [(prompt, completion, fields), ...])`` (``fields``: a dict of keyword arguments, often empty); the worker answers on its original stdout
``("ready", None)`` or ``("load_error", message)``, then one ``("ok", float)`` or
``("error", message)`` per pair, as each finishes. The user's prints go to stderr (the
protocol owns stdout). The worker ignores Ctrl-C (the parent decides) and exits when its
parent does.
"""
from __future__ import annotations

import importlib
import importlib.util
import hashlib
import os
import pickle
import signal
import sys
import threading
import time
from pathlib import Path


class RewardLoadError(ValueError):
    """A reward path or function that cannot be loaded; the message names it."""


FORMS = "'package.module:function' or 'path/to/file.py:function'"


def split_spec(spec) -> tuple[str, str, bool]:
    """(module or file, attribute path, is_file) of ``spec``."""
    if not isinstance(spec, str):
        raise RewardLoadError(f"a reward path is a string {FORMS}, got {type(spec).__name__}")
    where, colon, name = spec.rpartition(":")
    if not colon or not where.strip() or not name.strip():
        raise RewardLoadError(f"reward path {spec!r} must be {FORMS}")
    is_file = where.endswith(".py") or "/" in where or os.sep in where
    return where, name, is_file


def load_function(spec: str):
    """The callable ``spec`` names: ``"package.module:function"`` (imported as usual) or
    ``"path/to/file.py:function"`` (the file run as a fresh module); dotted attributes
    (``"mod:Class.method"``) are followed."""
    where, name, is_file = split_spec(spec)
    if is_file:
        path = Path(where)
        if not path.is_file():
            raise RewardLoadError(f"reward file {where!r} (from {spec!r}) does not exist")
        module_name = f"_hyperscalees_reward_{path.stem}_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]}"
        module_spec = importlib.util.spec_from_file_location(module_name, path)
        if module_spec is None or module_spec.loader is None:
            raise RewardLoadError(f"reward file {where!r} (from {spec!r}) is not a Python file")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_name] = module
        try:
            module_spec.loader.exec_module(module)
        except Exception as e:
            del sys.modules[module_name]
            raise RewardLoadError(f"running reward file {where!r} (from {spec!r}) raised {type(e).__name__}: {e}") from e
    else:
        try:
            module = importlib.import_module(where)
        except Exception as e:
            raise RewardLoadError(f"cannot import module {where!r} (from {spec!r}): {type(e).__name__}: {e}") from e
    obj = module
    for part in name.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise RewardLoadError(f"{where!r} has no attribute {name!r} (from {spec!r})") from None
    if not callable(obj):
        raise RewardLoadError(f"{name!r} in {where!r} (from {spec!r}) is not callable")
    return obj


def score(fn, prompt: str, completion: str, fields: dict | None = None) -> tuple[str, object]:
    """One call of the reward as a protocol reply: ``("ok", float)``, or ``("error", message)`` when
    it raises or returns something ``float()`` refuses. NaN and inf pass as "ok": the parent
    counts them apart (``counts["nonfinite"]``). Shared by the worker process and the thread runner,
    so both isolations score a reward alike. ``fields`` (a JSONL row's other columns) are passed as
    keyword arguments, as TRL passes dataset columns to its reward functions."""
    try:
        value = fn(prompt, completion, **(fields or {}))
    except (Exception, SystemExit) as e:
        return "error", f"{type(e).__name__}: {str(e)[:500]}"
    try:
        return "ok", float(value)
    except (TypeError, ValueError):
        return "error", f"the reward returned {type(value).__name__} {str(value)[:60]!r}, not a number"


def _watch_parent(parent: int) -> None:
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(0)


def main() -> None:
    inbox = os.fdopen(os.dup(0), "rb")
    outbox = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)  # the user's prints go to stderr
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()

    def send(message) -> None:
        pickle.dump(message, outbox, protocol=pickle.HIGHEST_PROTOCOL)
        outbox.flush()

    init = pickle.load(inbox)
    sys.path[:] = init["sys_path"]
    os.chdir(init["cwd"])
    try:
        fn = load_function(init["spec"]) if init["spec"] is not None else pickle.loads(init["pickled"])
    except Exception as e:
        send(("load_error", str(e) if isinstance(e, RewardLoadError) else f"{type(e).__name__}: {e}"))
        return
    send(("ready", None))
    while True:
        try:
            _, pairs = pickle.load(inbox)
        except EOFError:
            return
        for prompt, completion, fields in pairs:
            send(score(fn, prompt, completion, fields))


if __name__ == "__main__":
    main()
