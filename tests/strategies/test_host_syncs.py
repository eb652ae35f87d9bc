"""A whole ES step makes the host wait for the device zero times; reading metrics is the user's choice.

Counted on the CPU with a TorchDispatchMode (benchmarks/dispatch.py): ``.item()``, ``bool()``,
``unique``, ``nonzero``, boolean-mask indexing and device-to-host copies are the ops that stall a
GPU's launch queue, and they dispatch the same on any device.
"""
import pytest
import torch
from torch import nn

import hyperscalees as hs
from hyperscalees.benchmarks.dispatch import DispatchCounter
from hyperscalees.models import TinyLM, mlp


def lm_case():
    torch.manual_seed(0)
    model = TinyLM(vocab=13, d=16, layers=1, max_len=6)
    ids = torch.randint(0, 13, (8, 6), generator=torch.Generator().manual_seed(1))

    def fitness(m, lo, hi, step):
        logits = m(ids[lo:hi])
        return -nn.functional.cross_entropy(logits.reshape(-1, 13), ids[lo:hi].reshape(-1),
                                            reduction="none").view(hi - lo, -1).mean(dim=1)
    return model, fitness


def mlp_case():
    torch.manual_seed(0)
    model = mlp([5, 16, 3], "tanh")
    x = torch.randn(8 * 4, 5, generator=torch.Generator().manual_seed(1))

    def fitness(m, lo, hi, step):
        return -m(x[lo * 4:hi * 4]).pow(2).view(hi - lo, -1).mean(dim=1)
    return model, fitness


def rnn_case():
    torch.manual_seed(0)
    model = nn.GRU(4, 8, batch_first=True)
    x = torch.randn(8, 5, 4, generator=torch.Generator().manual_seed(1))

    def fitness(m, lo, hi, step):
        return m(x[lo:hi])[0].pow(2).mean(dim=(1, 2))
    return model, fitness


CASES = {"mlp": mlp_case, "tiny_lm": lm_case, "gru": rnn_case}


def one_step(es, fitness):
    return es.tell(hs.evaluate(es, fitness, chunk=4))


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("shaping,optimizer", [("centered_rank", "adam"), ("z_score", "sgd"),
                                               ("pair_sign", "adam"), ("raw", "sgd")])
def test_a_whole_step_never_waits_for_the_device(case, shaping, optimizer):
    model, fitness = CASES[case]()
    es = hs.EGGROLL(model, population=8, sigma=0.05, rank=2, lr=0.01, optimizer=optimizer, shaping=shaping)
    one_step(es, fitness)                                  # first step: lazy set-up allowed to read values
    with DispatchCounter() as counter:
        metrics = one_step(es, fitness)
    assert counter.transfers == 0, (dict(counter.sync_ops), dict(counter.upload_ops))
    assert counter.ops > 0
    with DispatchCounter() as reading:                     # the metrics the user asks for cost one read each
        values = dict(metrics)
    assert reading.syncs == sum(isinstance(metrics.raw(k), torch.Tensor) for k in metrics)
    assert values["step"] == 2 and values["nonfinite"] == 0 and values["grad_norm"] > 0


def test_nonfinite_fitness_is_handled_without_a_sync():
    model, fitness = mlp_case()
    es = hs.EGGROLL(model, population=8, sigma=0.05, lr=0.01)
    one_step(es, fitness)
    before = [p.clone() for p in model.parameters()]
    with DispatchCounter() as counter:
        metrics = es.tell(torch.tensor([1.0, float("nan"), 2.0, float("inf"), 0.0, 1.0, 3.0, -1.0]))
    assert counter.syncs == 0
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    with pytest.warns(RuntimeWarning, match="2 non-finite"):
        from hyperscalees.strategies import metrics as metrics_module
        metrics_module._warned_nonfinite = False
        assert metrics["nonfinite"] == 2


def test_the_counter_sees_the_ops_that_synchronise():
    x = torch.randn(10)
    with DispatchCounter() as counter:
        x.sum().item()
        bool((x > 0).any())
        torch.unique(x)
        x[x > 0]
        torch.nonzero(x)
    assert counter.syncs == 5, dict(counter.sync_ops)


def test_the_counter_sees_host_reads_that_dispatch_no_op():
    x = torch.randn(10)
    with DispatchCounter() as counter:
        x.tolist()
        x.numpy()
        x.cpu()
        x.to("cpu")
        x.to(device="cpu", dtype=torch.float64)
        x.to(torch.float64)                               # not a transfer
        x.to(x.device)                                    # follows a tensor's device: none on a GPU either
    assert dict(counter.sync_ops) == {"Tensor.tolist": 1, "Tensor.numpy": 1, "Tensor.cpu": 1, "Tensor.to(cpu)": 2}
    assert counter.uploads == 0
    assert torch.Tensor.tolist is torch._C.TensorBase.tolist  # the patches are gone once it closes


def test_the_counter_sees_host_to_device_copies():
    import numpy as np
    with DispatchCounter() as counter:
        torch.tensor([1, 2, 3])
        torch.as_tensor([1.0, 2.0], device="cpu")
        torch.from_numpy(np.zeros(3))
        torch.zeros(3) + 1                                # made on the device: not a copy
    assert counter.uploads == 3 and counter.syncs == 0, (dict(counter.upload_ops), dict(counter.sync_ops))
    assert counter.transfers == 3


def test_the_counter_sees_syncs_on_worker_threads():
    import threading
    from concurrent.futures import ThreadPoolExecutor
    x = torch.randn(10)
    pool = ThreadPoolExecutor(1)
    pool.submit(lambda: None).result()                    # the pool thread exists before counting
    with DispatchCounter() as counter:
        pool.submit(lambda: x.sum().item()).result()
        t = threading.Thread(target=lambda: torch.tensor([1.0]).tolist())
        t.start()
        t.join()
    pool.shutdown()
    assert counter.sync_ops == {"aten::_local_scalar_dense": 1, "Tensor.tolist": 1}, dict(counter.sync_ops)
    assert counter.uploads == 1 and counter.by_name["aten::sum"] == 1
    with DispatchCounter() as quiet:                      # nothing leaks into a later counter
        pass
    assert quiet.ops == 0


@pytest.mark.parametrize("name", ["int8-transformer", "egg"])
def test_integer_lm_forward_moves_nothing_between_host_and_device(name):
    """Lookup tables (exp, GELU, RoPE) are built once per device, not in every forward; the logit
    scale is a Python float. (Perturbed, lowrank_term reads two maxima on a CPU only: ops/int8.py.)"""
    from hyperscalees.models.registry import build_lm
    torch.manual_seed(0)
    m = build_lm(name, 256, dim=16, layers=1)
    tok = torch.randint(0, 256, (2, 5))
    m(tok)                                                # first call: tables built and cached
    with DispatchCounter() as counter:
        m(tok)
    assert counter.transfers == 0, (dict(counter.sync_ops), dict(counter.upload_ops))
