"""The recipe of test_ray_backend's small-set test: subspace, adapter and norms-only evolution.

Each worker rebuilds the model from the recipe, so P's keys, the adapters' A and the es_map
must come out the same in every process; the coordinator then replays the same updates. A
module of its own so Ray can pickle it by value (workers cannot import the tests folder).
"""
import torch
from torch import nn

import hyperscalees as hs
from hyperscalees.nn.adapters import add_adapters
from hyperscalees.nn.select import norms_and_biases
from hyperscalees.nn.subspace import install_subspace

SELECT = {"subspace": lambda m: install_subspace(m, 16, seed=3), "adapters": lambda m: add_adapters(m, 2, seed=3),
          "norms": norms_and_biases}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp, self.norm, self.out = nn.Linear(4, 16), nn.LayerNorm(16), nn.Linear(16, 1)

    def forward(self, x):
        return self.out(torch.tanh(self.norm(self.inp(x))))


class Regression:
    """Fit sin on a grid that depends on the step only: any chunk on any worker scores the same."""

    def __call__(self, model, lo, hi, step):
        x = torch.linspace(-2, 2, 8).view(8, 1).repeat(1, 4) + 0.01 * step
        y = model(x.repeat(hi - lo, 1)).view(hi - lo, 8)
        return -((y - torch.sin(x[:, 0])) ** 2).mean(dim=1)


class Recipe:
    def __init__(self, kind: str):
        self.kind = kind

    def __call__(self):
        torch.manual_seed(0)
        model = Net()
        es = hs.EGGROLL(model, population=8, sigma=0.05, lr=0.05, seed=1, es_map=SELECT[self.kind](model))
        return es, Regression()
