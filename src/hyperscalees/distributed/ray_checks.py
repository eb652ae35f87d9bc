"""Checks of a Ray backend's settings that need no Ray: done before Ray starts, each one line.

Ray's own start-up turns these mistakes into hangs or pages of traceback: an address with
nothing listening is retried for minutes while Ctrl-C is ignored; ``--gpus-per-worker`` on a
machine without a GPU waits 300 s for resources that never come (printing to stdout);
``--dashboard`` without the dashboard's packages fails with a 30-line traceback. Ray is not
imported here, so importing this costs nothing and the checks cannot change how Ray starts.
"""
from __future__ import annotations

import importlib.util
import socket

# the modules ray/dashboard/optional_deps.py imports (Ray 2.60): without them the dashboard cannot start
DASHBOARD_MODULES = ("aiohttp", "aiohttp_cors", "grpc", "opencensus", "opentelemetry", "prometheus_client", "pydantic")
CONNECT_TIMEOUT = 5.0  # seconds: a reachable Ray head answers a TCP connect at once


def parse_address(address: str) -> tuple[str, int] | None:
    """(host, port) of ``HOST:PORT`` or ``ray://HOST:PORT``; None for ``auto``. ValueError names a bad one."""
    if address == "auto":
        return None
    rest = address[len("ray://"):] if address.startswith("ray://") else address
    host, sep, port = rest.rpartition(":")
    host = host.strip("[]")  # [::1]:6379
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"invalid --address {address!r}: expected auto, HOST:PORT or ray://HOST:PORT with a port "
                         "in 1..65535")
    return host, int(port)


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT) -> None:
    """Refuse at once an address where nothing accepts a connection (Ray would retry for minutes)."""
    where = parse_address(address)
    if where is None:
        return
    try:
        with socket.create_connection(where, timeout=timeout):
            pass
    except OSError as e:
        why = "timed out" if isinstance(e, socket.timeout) else (e.strerror or type(e).__name__)
        raise ValueError(f"no Ray cluster at --address {address}: {why}; start one there with "
                         f"`ray start --head --port {where[1]}` or leave --address out for a local one") from None


def auth_refused(address: str, token_mode: bool) -> str:
    """The one line for a cluster that refused this driver: what to set, and where the token comes from."""
    if not token_mode:
        return (f"the Ray cluster at --address {address} requires token authentication: run with RAY_AUTH_MODE=token "
                "and its token in RAY_AUTH_TOKEN (print it with `ray get-auth-token` on the head node) or in "
                "~/.ray/auth_token")
    return (f"the Ray cluster at --address {address} refused this machine's token (RAY_AUTH_MODE=token): set "
            "RAY_AUTH_TOKEN to the output of `ray get-auth-token` on its head node, or leave RAY_AUTH_MODE unset if "
            "the cluster has authentication off")


def missing_dashboard_modules() -> list[str]:
    return [m for m in DASHBOARD_MODULES if importlib.util.find_spec(m) is None]


def check_ray_settings(address: str | None, gpus_per_worker: float, dashboard: bool, gpu_available: bool) -> None:
    """All the checks above for one backend configuration (``gpu_available``: this machine has a GPU)."""
    if address is not None:
        check_reachable(address)
    if address is None and gpus_per_worker > 0 and not gpu_available:
        raise ValueError(f"--gpus-per-worker {gpus_per_worker:g}: this machine has no GPU, and a local Ray has only "
                         "this machine's (use --address for a cluster with GPUs, or leave the flag out)")
    if dashboard:
        missing = missing_dashboard_modules()
        if missing:
            raise ValueError(f"--dashboard needs Ray's dashboard packages, missing here: {', '.join(missing)} "
                             "(pip install 'ray[default]')")
