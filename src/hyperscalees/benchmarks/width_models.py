"""Models at a width, under muP or the standard parametrisation, and one training step of each kind.

What the coordinate check and the transfer sweep share. Two models, each with at least two
hidden-to-hidden layers:

- ``mlp``: 16 → n → n → n → n → 10, ReLU, regression onto fixed random targets (MSE);
- ``transformer``: ``models.TinyLM`` with 2 blocks, head dimension fixed at 64 (heads = n/64),
  next-token cross-entropy on a fixed random sequence set (vocabulary 64, 16 tokens).

Both are built by constructor at the base width and at the target width; ``mup.compare_widths``
reads which dimensions grew. Under muP the readout gets its 1/m forward multiplier and keeps
its base-width init, and lr and σ come per parameter from ``mup.mup_groups``; under the
standard parametrisation every group gets the one lr and σ (PyTorch's fan-in init throughout).

Dimensions: B rows (sequences) per batch, P population, n width.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..models import TinyLM, mlp
from ..mup import (add_output_multipliers, compare_widths, mup_groups, rescale_readout_init, set_attention_scale,
                   torch_groups)
from ..nn.module_es import EGGROLL

MODELS = ("mlp", "transformer")
OPTIMIZERS = ("es", "adam", "sgd")
PARAMETRIZATIONS = ("standard", "mup")
D_IN, D_OUT, VOCAB, SEQ, HEAD_DIM = 16, 10, 64, 16, 64


def build(kind: str, width: int, seed: int = 0) -> nn.Module:
    """The model at ``width``: fan-in init (He for the MLP's ReLU layers), zero biases, zero readout.

    PyTorch's default bias init is uniform(±1/√fan-in), which shrinks with width and would make
    the t = 0 activations drift with width in either parametrisation. A zero readout is Tensor
    Programs V's advice: under muP its init-time logits shrink like 1/√m, so with a random readout
    the smallest widths start from a larger loss and train differently for the first steps."""
    torch.manual_seed(seed)
    if kind == "mlp":
        model = mlp([D_IN, width, width, width, width, D_OUT], "relu")
        for i, layer in enumerate(model[::2]):
            nn.init.normal_(layer.weight, std=(2 / layer.in_features) ** 0.5)
    elif kind == "transformer":
        if width % HEAD_DIM:
            raise ValueError(f"transformer widths must be multiples of the head dimension {HEAD_DIM}, got {width}")
        model = TinyLM(VOCAB, width, 2, SEQ)
    else:
        raise ValueError(f"unknown model {kind!r}; choose one of {MODELS}")
    for mod in model.modules():
        if isinstance(mod, nn.Linear) and mod.bias is not None:
            nn.init.zeros_(mod.bias)
    nn.init.zeros_((model[-1] if kind == "mlp" else model.head).weight)
    return model


def batch(kind: str, rows: int, seed: int = 1000) -> tuple[Tensor, Tensor]:
    """(inputs, targets) of one fixed batch: ``rows`` rows (mlp) or sequences (transformer)."""
    g = torch.Generator().manual_seed(seed)
    if kind == "mlp":
        return torch.randn(rows, D_IN, generator=g), torch.randn(rows, D_OUT, generator=g)
    seqs = torch.randint(0, VOCAB, (rows, SEQ + 1), generator=g)
    return seqs[:, :-1], seqs[:, 1:]


def losses(kind: str, out: Tensor, target: Tensor, members: int = 1) -> Tensor:
    """Mean loss per member (members,) of member-major outputs (members·B, ...)."""
    if kind == "mlp":
        return (out - target.repeat(members, 1)).pow(2).view(members, -1).mean(dim=1)
    ce = F.cross_entropy(out.reshape(-1, VOCAB), target.repeat(members, 1).reshape(-1), reduction="none")
    return ce.view(members, -1).mean(dim=1)


def module_kinds(kind: str, base_width: int) -> dict[str, str]:
    """{module: the kind of its weight} for every module with a width-sized weight, read from a
    meta-device pair at the base width and twice it (at the base width itself nothing has grown)."""
    with torch.device("meta"):
        widths = compare_widths(build(kind, base_width), build(kind, 2 * base_width))
    return {name.rsplit(".", 1)[0]: pw.kind for name, pw in widths.items()
            if name.endswith(".weight") and pw.kind != "fixed"}


@dataclass
class Setup:
    """One model at one width, ready to train: ``step()`` takes one step and returns the loss before it."""
    model: nn.Module
    kinds: dict[str, str]          # module name -> the kind of its weight (input, hidden, output)
    step: Callable[[], float]


def prepare(kind: str, width: int, base_width: int, parametrization: str, optimizer: str, lr: float,
            sigma: float = 0.05, population: int = 32, rows: int = 32, seed: int = 0) -> Setup:
    if parametrization not in PARAMETRIZATIONS:
        raise ValueError(f"unknown parametrization {parametrization!r}; choose one of {PARAMETRIZATIONS}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose one of {OPTIMIZERS}")
    model, base = build(kind, width, seed), build(kind, base_width, seed)
    widths = compare_widths(base, model)
    if parametrization == "mup":
        add_output_multipliers(model, widths)
        rescale_readout_init(model, widths)
        set_attention_scale(model, HEAD_DIM)
    x, y = batch(kind, rows)
    es = optimizer == "es"
    groups = mup_groups(widths, lr, "sgd" if optimizer == "sgd" else "adam", es=es, parametrization=parametrization)
    if es:
        runner = EGGROLL(model, population=population, sigma=sigma, lr=lr, optimizer="adam", seed=seed, groups=groups)

        def step() -> float:
            with torch.no_grad():
                before = losses(kind, model(x), y)[0].item()
                with runner.perturbed():
                    fitness = -losses(kind, model(x.repeat(population, 1)), y, population)
                runner.tell(fitness)
                return before
    else:
        opt = (torch.optim.Adam if optimizer == "adam" else torch.optim.SGD)(torch_groups(model, groups))

        def step() -> float:
            opt.zero_grad(set_to_none=True)
            loss = losses(kind, model(x), y)[0]
            loss.backward()
            loss = loss.detach()
            opt.step()
            return loss.item()
    return Setup(model, module_kinds(kind, base_width), step)


def evaluate(kind: str, model: nn.Module, rows: int = 32) -> float:
    """The loss on the fixed batch (the one training sees: these are optimisation benchmarks)."""
    x, y = batch(kind, rows)
    with torch.no_grad():
        return float(losses(kind, model(x), y)[0])
