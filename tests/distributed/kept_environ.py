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


@contextlib.contextmanager
def ray_home(home: str):
    """This process's Ray run with ``home`` as HOME (where a local Ray keeps the token it makes), and everything
    as before afterwards. Ray reads its auth mode and token once per process and caches them: without reading
    them again, a second local Ray in a new HOME is told a token exists (the first one's), makes none, and its
    GCS, finding none, dies at start-up."""
    from ray._raylet import AuthenticationTokenLoader, Config
    with environ_kept("HOME", "RAY_AUTH_MODE", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"):
        os.environ["HOME"] = home
        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
        yield
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()
