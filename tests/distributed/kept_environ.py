"""Environment variables a Ray fixture changes (its own, or ``start_ray``'s), put back afterwards."""
from __future__ import annotations

import contextlib
import os


@contextlib.contextmanager
def environ_kept(*keys: str):
    """Restore ``keys`` of ``os.environ`` on exit, set or unset as they were, whatever the body did to them
    (``pytest.MonkeyPatch`` restores only what it set itself; ``start_ray`` sets variables directly)."""
    saved = {k: os.environ.get(k) for k in keys}
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
