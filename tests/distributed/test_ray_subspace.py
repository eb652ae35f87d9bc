"""Subspace, adapter and norms-only evolution on two Ray workers: bit-identical to the local run.

Each worker rebuilds the model from the recipe, so P's keys, the adapters' A and the es_map
must come out the same in every process; the coordinator then replays the same updates.
"""
import sys

import pytest
import torch
from torch import nn

import hyperscalees as hs
from hyperscalees.distributed import LocalBackend, RayBackend
from hyperscalees.nn.adapters import add_adapters
from hyperscalees.nn.select import norms_and_biases
from hyperscalees.nn.subspace import install_subspace

from test_ray_backend import ray_cluster  # noqa: F401  (the module's one local Ray)

pytestmark = pytest.mark.xdist_group("ray")  # with --dist loadgroup (make test) one worker runs them all: one Ray

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


def test_small_sets_on_ray_are_bit_identical_to_local(ray_cluster):  # noqa: F811
    import ray.cloudpickle as cloudpickle
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import the tests folder
    for kind in SELECT:
        recipe = Recipe(kind)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # as each Ray worker (num_cpus=1)
        try:
            with LocalBackend(recipe, chunk=4) as local:
                for _ in range(3):
                    local.step()
                expected = {k: v.clone() for k, v in local.model.state_dict().items()}
        finally:
            torch.set_num_threads(threads)
        with RayBackend(recipe, workers=2, chunk=4) as remote:
            for _ in range(3):
                remote.step()
            got = remote.model.state_dict()
        start = recipe()[0].model.state_dict()
        assert expected.keys() == got.keys()
        assert all(torch.equal(expected[k], got[k]) for k in expected), kind
        assert any(not torch.equal(start[k], expected[k]) for k in expected), f"{kind}: 3 steps moved nothing"
