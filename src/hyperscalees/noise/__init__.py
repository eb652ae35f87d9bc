"""Seeds -> random factors, and the per-step store that serves them. Nothing here is stored
beyond one step: every value is a pure function of (seed, parameter, step, pair, element)."""
from .distributions import DISTRIBUTIONS, bits_to_noise
from .draw import Noise, draw_noise, noise_nbytes, noise_scales
from .keys import fold_in, mix, name_key
from .population import Population
from .sampling import draw, full_noise, lowrank_factors, lowrank_rows
from .spec import ESMode, ParamSpec, parse_mode
from .store import NoiseStore

__all__ = ["DISTRIBUTIONS", "ESMode", "Noise", "NoiseStore", "ParamSpec", "Population", "bits_to_noise", "draw",
           "draw_noise", "fold_in", "full_noise", "lowrank_factors", "lowrank_rows", "mix", "name_key",
           "noise_nbytes", "noise_scales", "parse_mode"]
