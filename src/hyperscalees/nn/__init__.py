"""Modules that run a population: the layer registry, the perturbation context and the ES facade."""
from .es_map import derive_specs
from .layers import AbstractLayer, PopulationContext, population_linear, register_layer, unregister_layer
from .module_es import EGGROLL, AbstractModuleES, OpenES
from .perturb import perturbation

__all__ = ["AbstractLayer", "AbstractModuleES", "EGGROLL", "OpenES", "PopulationContext", "derive_specs",
           "perturbation", "population_linear", "register_layer", "unregister_layer"]
