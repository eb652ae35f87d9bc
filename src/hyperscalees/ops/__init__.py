"""Pure tensor maths of perturbed populations: no state, no randomness."""
from .fullrank import do_mm_dense
from .lowrank_linear import add_lowrank_, do_emb, do_mm, do_Tmm, get_noisy_standard, perturbed_linear
from .lowrank_plan import LowrankPlan, lowrank_plan, plan_term_into
from .update import full_sum, lowrank_sum, pair_weights

__all__ = ["LowrankPlan", "add_lowrank_", "do_emb", "do_mm", "do_mm_dense", "do_Tmm", "full_sum",
           "get_noisy_standard", "lowrank_plan", "lowrank_sum", "pair_weights", "perturbed_linear", "plan_term_into"]
