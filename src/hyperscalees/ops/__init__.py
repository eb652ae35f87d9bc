"""Pure tensor maths of perturbed populations: no state, no randomness."""
from .fixed_order import addmm_blocks_
from .fullrank import add_emb_dense, do_emb_dense, do_mm_dense
from .lowrank_linear import add_emb_lowrank, add_lowrank_, do_emb, do_mm, do_Tmm, perturbed_linear
from .lowrank_plan import LowrankPlan, lowrank_plan, plan_term_into
from .member import add_vector_noise, get_noisy_standard, member_coef, member_values
from .update import REDUCTION_PAIRS, full_sum, full_sum_, lowrank_sum, lowrank_sum_, pair_weights

__all__ = ["LowrankPlan", "REDUCTION_PAIRS", "add_emb_dense", "add_emb_lowrank", "add_lowrank_", "add_vector_noise",
           "addmm_blocks_", "do_emb", "do_emb_dense", "do_mm", "do_mm_dense", "do_Tmm", "full_sum", "full_sum_",
           "get_noisy_standard", "lowrank_plan", "lowrank_sum", "lowrank_sum_", "member_coef", "member_values",
           "pair_weights", "perturbed_linear", "plan_term_into"]
