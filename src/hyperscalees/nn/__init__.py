"""Modules that run a population: hooks for any nn.Module and the module-level ES facade."""
from .es_map import derive_specs
from .module_es import EGGROLL, AbstractModuleES, OpenES
from .perturb import perturbation

__all__ = ["AbstractModuleES", "EGGROLL", "OpenES", "derive_specs", "perturbation"]
