"""Backends: a population turned into fitness from a recipe, in-process (``local``) or on workers (``ray``).

``BACKENDS`` is the one registry: a name, the backend class. A backend configured by a
dataclass says so with a ``Config`` class attribute (its fields become CLI flags). Ray
itself is imported only when a :class:`RayBackend` starts.
"""
from __future__ import annotations

import functools

from .base import AbstractBackend
from .local import LocalBackend
from .ray import RayBackend, RayConfig
from .recipe import Fitness, Recipe

BACKENDS: dict[str, type[AbstractBackend]] = {"local": LocalBackend, "ray": RayBackend}


def get_backend(name: str) -> type[AbstractBackend]:
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of {sorted(BACKENDS)}")
    return BACKENDS[name]


def backend_factory(name: str, options: dict | None = None):
    """``recipe -> backend`` for the backend called ``name`` with ``options`` (fields of its
    ``Config``), checked now: a bad option fails before anything is built or started."""
    cls = get_backend(name)
    options = dict(options or {})
    config_cls = getattr(cls, "Config", None)
    if config_cls is None:
        if options:
            raise ValueError(f"backend {name!r} takes no options, got {sorted(options)}")
        return cls
    return functools.partial(cls, config=config_cls(**options))


__all__ = ["AbstractBackend", "BACKENDS", "Fitness", "LocalBackend", "RayBackend", "RayConfig", "Recipe",
           "backend_factory", "get_backend"]
