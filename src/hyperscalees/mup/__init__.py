"""Width transfer (muP): tune σ and lr at a small width, train at a large one.

``width``: which dimensions are widths (:func:`compare_widths` for models built by
constructor); ``resize``: :func:`change_width` for models marked by a prime; ``rules``: muP's
per-parameter multipliers as parameter groups, for gradient optimizers and for ES;
``readout``: the forward multipliers; ``init``: per-layer init std (ezmup's InitStd) under
muP's rule; ``apply``: :func:`apply_mup`, all of it in one call (what ``train TASK --mup``
does). The derivation for ES is in ``docs/guide/mup.md``.
"""
from .apply import apply_mup
from .init import init_per_layer, layer_stds
from .readout import add_output_multipliers, attention_scale, rescale_readout_init, set_attention_scale
from .resize import MARKER, change_width
from .rules import Multipliers, multipliers, mup_groups, torch_groups
from .width import Fans, ParamWidth, compare_widths, register_fans

__all__ = ["MARKER", "Fans", "Multipliers", "ParamWidth", "add_output_multipliers", "apply_mup", "attention_scale",
           "change_width", "compare_widths", "init_per_layer", "layer_stds", "multipliers", "mup_groups",
           "register_fans", "rescale_readout_init", "set_attention_scale", "torch_groups"]
