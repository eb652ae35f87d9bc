"""Ray itself, for the Ray backend: its settings (``RayConfig``), and a session started on loopback
only or joined at an address, and stopped again.

Ray is imported here (and in ``ray.py``) only, lazily: ``import hyperscalees`` never needs it.
A local Ray (no ``address``) is started on loopback only, dashboard off, token authentication as
Ray sets it up (on by default in 2.60). A start-up a signal interrupts leaves nothing running, and
the driver keeps its own SIGINT/SIGTERM handlers through ``ray.init``.
"""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from dataclasses import dataclass, field
from typing import Iterator

from .processes import ended_if_failed
from .ray_checks import auth_refused

LOCAL_ONLY = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": Ray's local-only mode, every address 127.0.0.1
_set_local_only = False                            # this process set it (for a local Ray)


@dataclass(frozen=True)
class RayConfig:
    workers: int = 2                        # worker actors, one model replica each
    address: str | None = None              # an existing cluster ("auto" or HOST:PORT); None: a local one
    gpus_per_worker: float = 0.0
    cpus_per_worker: float = 1.0
    straggler_timeout: float | None = None  # seconds; None: 3x the median chunk time
    hash_every: int = 10                    # steps between replica hash checks (0: never)
    max_restarts: int = 3                   # new actors per worker slot before running with fewer
    dashboard: bool = False                 # start Ray's dashboard (local Ray only, on 127.0.0.1)
    temp_dir: str | None = None             # Ray's session files (local Ray only; default: Ray's)
    startup_timeout: float = 300.0          # seconds to wait for the workers to come up
    driver_threads: int | None = 1          # torch threads for the driver's own replay (None: the process's)
    worker_threads: int = 1                 # torch threads of each worker: its evaluation and its replay of the update
    in_flight: int = 1                      # chunks a worker holds at once (2: the next waits behind the running one)
    group_size: int = 1                     # workers per group coordinator on one node (1: the driver, every worker)
    shared_replay: bool = False             # a group's workers share one copy of the weights, each replaying a part
    max_workers: int | None = field(default=None, metadata={"help": (
        "elastic: up to this many workers, the ones beyond --workers started by Ray when a node joins or capacity "
        "frees up, and used as soon as they are ready (default: --workers)")})

    def __post_init__(self):
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers!r}")
        if self.gpus_per_worker < 0 or self.cpus_per_worker <= 0:
            raise ValueError(f"gpus_per_worker must be >= 0 and cpus_per_worker > 0, got "
                             f"{self.gpus_per_worker!r} and {self.cpus_per_worker!r}")
        if self.straggler_timeout is not None and not self.straggler_timeout > 0:
            raise ValueError(f"straggler_timeout must be > 0 seconds, got {self.straggler_timeout!r}")
        if self.max_workers is not None and self.max_workers < self.workers:
            raise ValueError(f"max_workers must be >= workers ({self.workers}), got {self.max_workers!r}")
        if self.driver_threads is not None and (isinstance(self.driver_threads, bool) or
                                                not isinstance(self.driver_threads, int) or self.driver_threads < 1):
            raise ValueError(f"driver_threads must be an integer >= 1 or None, got {self.driver_threads!r}")
        if isinstance(self.worker_threads, bool) or not isinstance(self.worker_threads, int) or self.worker_threads < 1:
            raise ValueError(f"worker_threads must be an integer >= 1, got {self.worker_threads!r}")
        if not self.gpus_per_worker and self.worker_threads > max(1.0, self.cpus_per_worker):  # a fraction: 1 thread
            raise ValueError(f"worker_threads ({self.worker_threads}) exceeds cpus_per_worker ({self.cpus_per_worker:g}): "
                             f"each worker would run {self.worker_threads} threads on the CPUs Ray reserved for fewer; "
                             f"set cpus_per_worker to {self.worker_threads}")
        if isinstance(self.in_flight, bool) or not isinstance(self.in_flight, int) or self.in_flight < 1:
            raise ValueError(f"in_flight must be an integer >= 1, got {self.in_flight!r}")
        if isinstance(self.group_size, bool) or not isinstance(self.group_size, int) or self.group_size < 1:
            raise ValueError(f"group_size must be an integer >= 1, got {self.group_size!r}")
        for name in ("workers", "max_workers"):
            if (getattr(self, name) or 0) % self.group_size:
                raise ValueError(f"{name} ({getattr(self, name)}) must be a multiple of group_size ({self.group_size})")
        if self.group_size > 1 and self.gpus_per_worker:
            raise ValueError(f"group_size > 1 needs CPU workers (gpus_per_worker {self.gpus_per_worker!r}): a group's "
                             "workers hold none of the CPUs or GPUs their group reserves, and Ray hides GPUs from them")
        if self.shared_replay and self.group_size < 2:
            raise ValueError(f"shared_replay needs group_size >= 2 (the workers that share a node's weights are a "
                             f"group's), got group_size {self.group_size}")
        if self.hash_every < 0 or self.max_restarts < 0:
            raise ValueError(f"hash_every and max_restarts must be >= 0, got {self.hash_every!r} and "
                             f"{self.max_restarts!r}")


    @property
    def slots(self) -> int:
        """Actors the driver asks of Ray: ``max_workers``, else ``workers`` (in groups: one per group)."""
        return (self.max_workers or self.workers) // self.group_size

    @property
    def leads(self) -> int:
        """Actors the driver waits for at the start: the workers, or their groups' coordinators."""
        return self.workers // self.group_size


def ready_on_node(replica) -> str:
    """Run in a worker actor (``__ray_call__``): its replica is built; the Ray node it runs on."""
    import ray
    replica.ready()
    return ray.get_runtime_context().get_node_id()


def import_ray(local: bool):
    """``ray``, with local-only addressing switched on first when we start the cluster ourselves.

    A plain local ``ray.init()`` listens on every interface and talks over the machine's
    external address (``_node_ip_address="127.0.0.1"`` is rewritten). Ray's local-only mode,
    the one it uses on macOS and Windows, is chosen by ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``
    before ``ray`` is imported: then the node address is 127.0.0.1 and every listener binds
    there. Workers inherit the variable from the raylet.
    """
    global _set_local_only
    if local:
        os.environ[LOCAL_ONLY] = "0"
        _set_local_only = True
    elif _set_local_only and os.environ.get(LOCAL_ONLY) == "0":
        os.environ.pop(LOCAL_ONLY)  # a local Ray of this process came first: a cluster's nodes are not on loopback
    try:
        import ray
    except ImportError:
        raise ImportError("the ray backend needs Ray: pip install 'hyperscalees[ray]'") from None
    from ray._private import ray_constants  # imported before the variable was set: apply it
    ray_constants.ENABLE_RAY_CLUSTER = False if local else ray_constants.env_bool(
        LOCAL_ONLY, not ray_constants.IS_WINDOWS_OR_OSX)
    return ray


def start_ray(config: RayConfig) -> bool:
    """Connect to ``config.address`` or start a local loopback Ray; True when this call started it.

    Interrupted (a signal handler that raises, e.g. the training loop's during start-up), it
    leaves nothing running: what ``ray.init`` had started is killed before the exception goes on.
    """
    ray = import_ray(local=config.address is None)
    if ray.is_initialized():
        return False
    with ended_if_failed(), _disconnected_if_failed(ray), _own_signal_handlers(ray):
        if config.address is not None:
            _check_token(ray, config.address)
            try:
                ray.init(address=config.address, logging_level=logging.WARNING)
            except ray.exceptions.AuthenticationError:  # token mode without a token: Ray's own page of help
                raise RuntimeError(auth_refused(config.address, token_mode=True)) from None
            return True
        ray.init(num_cpus=max(1, int(round(config.workers * config.cpus_per_worker))),
                 include_dashboard=config.dashboard, dashboard_host="127.0.0.1", _temp_dir=config.temp_dir,
                 logging_level=logging.WARNING)
    gcs = ray.get_runtime_context().gcs_address
    if not gcs.startswith("127."):
        ray.shutdown()
        raise RuntimeError(f"local Ray came up on {gcs}, not on loopback: this Ray version ignores {LOCAL_ONLY}=0")
    return True


def _check_token(ray, address: str) -> None:
    """Refuse in one line a cluster that refuses this driver's token (or its lack of one).

    ``ray.init`` would retry for 20 s, print a warning a second, then raise a ``ConnectionError``
    that never mentions authentication. One connection to the cluster's GCS (milliseconds) tells,
    its one warning line swallowed. The token mode is settled as ``ray.init`` settles it (``auto``
    turns it on when a token is at hand). Best effort: without these Ray internals, nothing is checked.
    """
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available)
        from ray._private.services import canonicalize_bootstrap_address
        from ray._raylet import AuthenticationMode, GcsClient, get_authentication_mode
    except ImportError:
        return
    if address.startswith("ray://"):
        return
    if address == "auto":
        maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
    gcs = canonicalize_bootstrap_address(address)
    if gcs is None:
        return
    try:
        with _quiet_stderr():
            GcsClient(address=gcs)
    except ray.exceptions.AuthenticationError:
        raise RuntimeError(auth_refused(address, get_authentication_mode() == AuthenticationMode.TOKEN)) from None
    except Exception:  # anything else: ray.init says it in its own words
        return


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """File descriptor 2 to /dev/null for a moment (Ray's C++ core writes its warnings there)."""
    import sys
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@contextlib.contextmanager
def _disconnected_if_failed(ray) -> Iterator[None]:
    """If ``ray.init`` fails half-way, undo what it had set up in this process (best effort)."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            ray.shutdown()
        raise


@contextlib.contextmanager
def _own_signal_handlers(ray) -> Iterator[None]:
    """Keep this process's SIGINT and SIGTERM handlers through ``ray.init``.

    ``ray.init`` replaces the driver's SIGTERM handler with ``sys.exit``, and its core worker then
    installs a crash handler for SIGTERM in C: left so, a SIGTERM to a running Ray run would abort
    the process (exit -6, no checkpoint) instead of ending it after the step with one. Ray's Python
    installer is a no-op meanwhile (so a signal during the start-up reaches the run's handler), and
    the handlers in place before are put back afterwards (``signal.signal`` replaces the C one too).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    utils = getattr(getattr(ray, "_private", None), "utils", None)
    installer = getattr(utils, "set_sigterm_handler", None)
    if installer is not None:
        utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    finally:
        if installer is not None:
            utils.set_sigterm_handler = installer
        for s, handler in saved.items():
            if handler is not None:  # None: installed outside Python, nothing to put back
                signal.signal(s, handler)


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else type(e).__name__


def died_unexpectedly(e: BaseException) -> bool:
    """A worker process that crashed while starting (killed, out of memory, a loaded machine), rather
    than one whose start raised an error of its own: the first is replaced like a death mid-run, the
    second would fail again."""
    return "died unexpectedly" in str(e)


def cluster_view(ray) -> str:
    """What Ray sees now (nodes alive, resources free), for an error that says the workers did not start:
    the difference between a cluster too small and one still counting a dead node."""
    try:
        alive = sum(1 for n in ray.nodes() if n.get("Alive"))
        free = {k: v for k, v in ray.available_resources().items() if k in ("CPU", "GPU")}
    except Exception as e:  # noqa: BLE001 - a view for a message; the message must still be raised
        return f"(Ray's view unavailable: {first_line(e)})"
    return f"(Ray sees {alive} node(s) alive; free: {free or 'nothing'})"


def stop_ray() -> None:
    """Disconnect from Ray (and stop the local instance this process started)."""
    import_ray(local=False).shutdown()

