"""Seeds -> random factors. Nothing here holds state or stores noise."""
from .distributions import DISTRIBUTIONS, bits_to_noise
from .keys import fold_in, mix, name_key
from .population import Population
from .sampling import draw, full_noise, lowrank_factors, lowrank_rows

__all__ = ["DISTRIBUTIONS", "Population", "bits_to_noise", "draw", "fold_in", "full_noise",
           "lowrank_factors", "lowrank_rows", "mix", "name_key"]
