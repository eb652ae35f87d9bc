"""Backends: turning a population into fitness, in-process (``local``) or across workers (``ray``)."""
from .base import AbstractBackend
from .graph import GraphedStep
from .local import LocalBackend, evaluate
from .ray import RayBackend, RayConfig  # Ray itself is imported only when a RayBackend starts

BACKENDS = {"local": LocalBackend, "ray": RayBackend}
BACKEND_CONFIGS = {"ray": RayConfig}  # backends configured by a frozen dataclass (its fields become flags)


def make_backend(name: str, options: dict | None = None) -> AbstractBackend:
    """The backend called ``name``, configured by ``options`` (fields of its config dataclass)."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of {sorted(BACKENDS)}")
    if name in BACKEND_CONFIGS:
        return BACKENDS[name](BACKEND_CONFIGS[name](**(options or {})))
    if options:
        raise ValueError(f"backend {name!r} takes no options, got {sorted(options)}")
    return BACKENDS[name]()


__all__ = ["AbstractBackend", "BACKENDS", "BACKEND_CONFIGS", "GraphedStep", "LocalBackend", "RayBackend", "RayConfig",
           "evaluate", "make_backend"]
