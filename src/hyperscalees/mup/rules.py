"""muP as parameter groups: per-parameter lr and σ multipliers, init scale and output multiplier.

Every multiplier is relative to the base width (a :class:`ParamWidth` with multipliers 1 gets
1 everywhere), so hyper-parameters tuned at the base width carry over unchanged and muP at
the base width *is* the model you tuned. ``m`` below is the parameter's fan-in multiplier
(``fan_in_mult``), ``mo`` its fan-out multiplier.

Gradient training (Tensor Programs V, readout-multiplier form). ``init`` is the std relative
to the base tensor's: fan-in init for input and hidden weights, while the readout keeps its
base std, so α·W has std ∝ 1/n (TP5's 1/fan-in² variance) and backpropagated signals into the
hidden layers are Θ(1/n), as muP's SGD rule assumes:

=======  ======  =========  ===========  ============
kind     init    output ×   SGD lr ×     Adam lr ×
=======  ======  =========  ===========  ============
input    1       1          mo           1
hidden   1/√m    1          mo/m         1/m
output   1       1/m        m            1
=======  ======  =========  ===========  ============

ES (``docs/guide/mup.md`` derives it; the same for low-rank and full-rank noise): a random
perturbation is uncorrelated with the layer's input, so it moves the output by
σ·(output ×)·√fan-in, and so does the noise-dominated update (Adam: entries ±lr; SGD:
entries lr/σ). Holding both width-independent gives σ × = 1/((output ×)·√m), Adam lr × = σ ×,
SGD lr × = (σ ×)²:

=======  ======  ===========  ============
kind     σ ×     ES-SGD lr ×  ES-Adam lr ×
=======  ======  ===========  ============
input    1       1            1
hidden   1/√m    1/m          1/√m
output   √m      m            √m
=======  ======  ===========  ============
"""
from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

import torch

from ..nn.es_map import derive_specs
from ..noise.spec import ESMode
from ..strategies.rules.optimizers import SOLVER_CLASSES
from .width import KINDS, ParamWidth

PREFIX = "mup/"  # names of the groups mup_groups makes: merging them again is refused


@dataclass(frozen=True)
class Multipliers:
    init: float = 1.0
    output: float = 1.0
    lr: float = 1.0
    sigma: float = 1.0


def init_scale(pw: ParamWidth) -> float:
    """Std of a rebuilt tensor over the base tensor's: std·√fan-in held (1 without a wide fan-in);
    the readout keeps its base std (its forward multiplier does the rest)."""
    return 1.0 if pw.kind == "output" else pw.fan_in_mult ** -0.5


def output_multiplier(pw: ParamWidth) -> float:
    """The readout's forward multiplier 1/m (on W x, not its bias): init-time logits vanish like 1/√m
    and updates stay Θ(1)."""
    return 1.0 / pw.fan_in_mult if pw.kind == "output" else 1.0


def _sgd(pw: ParamWidth) -> Multipliers:
    m, mo = pw.fan_in_mult, pw.fan_out_mult
    return Multipliers(lr={"input": mo, "hidden": mo / m, "output": m}.get(pw.kind, 1.0))


def _adam(pw: ParamWidth) -> Multipliers:
    return Multipliers(lr={"hidden": 1.0 / pw.fan_in_mult}.get(pw.kind, 1.0))


def es_sigma(pw: ParamWidth) -> float:
    """σ × that keeps a perturbation's effect on the layer's output width-independent."""
    return 1.0 / (output_multiplier(pw) * pw.fan_in_mult ** 0.5) if pw.kind != "fixed" else 1.0


def _es_sgd(pw: ParamWidth) -> Multipliers:
    s = es_sigma(pw)
    return Multipliers(lr=s * s, sigma=s)


def _es_adam(pw: ParamWidth) -> Multipliers:
    s = es_sigma(pw)
    return Multipliers(lr=s, sigma=s)


def _standard(pw: ParamWidth) -> Multipliers:
    """Standard parametrisation: fan-in init, one lr and σ for every width (the contrast)."""
    return Multipliers()


# (optimizer family, is it ES?) -> rule
RULES = {("sgd", False): _sgd, ("adam", False): _adam, ("sgd", True): _es_sgd, ("adam", True): _es_adam}


def _family(cls: type) -> str | None:
    """The rule family of a torch.optim class: Adam's (and AdamW's) or SGD's; None: no muP rule."""
    return "adam" if issubclass(cls, torch.optim.Adam) else "sgd" if issubclass(cls, torch.optim.SGD) else None


# the optimizer registry's names (strategies/rules/optimizers.py) read, not retyped: an optimizer
# without a single torch.optim class there (Muon: Muon on matrices, AdamW on the rest) has no rule
FAMILY = {name: fam for name, cls in SOLVER_CLASSES.items() if (fam := _family(cls)) is not None}


def multipliers(pw: ParamWidth, optimizer: str = "adam", es: bool = False, parametrization: str = "mup") -> Multipliers:
    if parametrization == "standard":
        return _standard(pw)
    if parametrization != "mup":
        raise ValueError(f"unknown parametrization {parametrization!r}; choose 'mup' or 'standard'")
    if optimizer not in FAMILY:
        raise ValueError(f"no muP rule for optimizer {optimizer!r}; muP's rules cover {sorted(FAMILY)}")
    rule = RULES[(FAMILY[optimizer], bool(es))]
    m = rule(pw)
    return Multipliers(init=init_scale(pw), output=output_multiplier(pw), lr=m.lr, sigma=m.sigma)


def mup_groups(widths: dict[str, ParamWidth], lr: float, optimizer: str = "adam", es: bool = False,
               groups: list[dict] | None = None, names: list[str] | None = None,
               parametrization: str = "mup", model=None, es_map: dict | None = None) -> list[dict]:
    """Parameter groups (``strategies.groups`` format, exact names) carrying muP's lr and σ.

    ``groups``: the user's own groups (lr, weight_decay, sigma_scale per glob pattern), whose
    values are multiplied by muP's; each is split where muP's multipliers differ inside it.
    ``names``: the parameters the optimizer or ES trains. Default: with ``model``, those ES
    evolves under ``es_map`` (e.g. ``llm.evolving(model)``: a group naming a frozen parameter
    would be refused by the ES facade); without it, all of ``widths``."""
    names = list(names) if names is not None else evolved(model, es_map) if model is not None else list(widths)
    if es_map is not None and model is None:
        raise ValueError("mup_groups: es_map needs the model it maps (pass model=...)")
    unknown = [n for n in names if n not in widths]
    if unknown:
        raise ValueError(f"{unknown[0]} has no width record; pass the widths of this model (change_width or "
                         "compare_widths)")
    owner = _owners(names, groups or [])
    out: dict[tuple, dict] = {}
    kinds: dict[tuple, set] = {}
    for n in names:
        user = owner.get(n, {})
        m = multipliers(widths[n], optimizer, es, parametrization)
        label = user.get("name", "default") if user else "default"
        key = (label, m.lr, m.sigma)
        if key not in out:
            g = {"params": [], "name": label,
                 "lr": float(user.get("lr", lr)) * m.lr, "sigma_scale": float(user.get("sigma_scale", 1.0)) * m.sigma}
            if "weight_decay" in user:
                g["weight_decay"] = user["weight_decay"]
            out[key], kinds[key] = g, set()
        out[key]["params"].append(n)
        kinds[key].add(widths[n].kind)
    for key, g in out.items():  # named after every kind it holds: "mup/default/input+output"
        g["name"] = f"{PREFIX}{g['name']}/{'+'.join(k for k in KINDS if k in kinds[key])}"
    return _unique_names(list(out.values()))


def evolved(model, es_map: dict | None = None) -> list[str]:
    """Names of the parameters ES evolves in ``model`` under ``es_map`` (``nn/es_map.py`` decides)."""
    return [n for n, spec in derive_specs(model, es_map).items() if spec.mode != ESMode.EXCLUDED]


def _unique_names(groups: list[dict]) -> list[dict]:
    seen: dict[str, int] = {}
    for g in groups:
        k = seen.get(g["name"], 0)
        seen[g["name"]] = k + 1
        if k:
            g["name"] = f"{g['name']}#{k}"
    return groups


def _owners(names: list[str], groups: list[dict]) -> dict[str, dict]:
    """{name: the user group that holds it}; refuses groups muP cannot merge."""
    owner = {}
    for i, g in enumerate(groups):
        if not isinstance(g, dict) or "params" not in g:
            raise TypeError(f"parameter group {i} must be a dict with a 'params' entry, got {g!r}")
        if str(g.get("name", "")).startswith(PREFIX):
            raise ValueError(f"parameter group {g['name']!r} was already made by mup_groups: its lr and σ carry muP's "
                             "multipliers, and merging it again would apply them twice; pass your own groups")
        extra = set(g) - {"params", "lr", "weight_decay", "sigma_scale", "name"}
        if extra:
            raise ValueError(f"parameter group {i}: muP cannot merge key(s) {sorted(extra)}; "
                             "it scales lr and sigma_scale and keeps weight_decay")
        pats = [g["params"]] if isinstance(g["params"], str) else list(g["params"])
        hits = [n for n in names if any(fnmatchcase(n, p) for p in pats)]
        if not hits:
            raise ValueError(f"parameter group {g.get('name', i)!r}: {pats} match no parameter")
        for n in hits:
            if n in owner:
                raise ValueError(f"parameter {n!r} is in two groups")
            owner[n] = {**g, "name": str(g.get("name", f"group{i}"))}
    return owner


def torch_groups(model, groups: list[dict]) -> list[dict]:
    """The same groups with tensors instead of names, for a ``torch.optim`` optimizer."""
    params = dict(model.named_parameters())
    return [{"params": [params[n] for n in g["params"]], "lr": g["lr"],
             **({"weight_decay": g["weight_decay"]} if "weight_decay" in g else {})} for g in groups]
