"""A whole ES step captured once as a CUDA graph and replayed: launch overhead gone.

A small model's step on a GPU is a few hundred small kernels, each ~1.5 µs of GPU work
behind ~5-12 µs of CPU dispatch: the GPU idles. A CUDA graph records the launches of one
step and replays them with a single call. Replay re-runs kernels with the pointers and
scalars they were captured with, so everything that changes between steps must live in
device memory at a fixed address:

- the noise keys: each parameter's key words sit in a fixed buffer rewritten before every
  replay; the fused draw reads them there (``noise.sampling.static_keys``);
- the inputs of ``fitness_fn``: the caller's own tensors, refreshed in place (``x.copy_``);
- everything else must be constant: σ and lr without decay or schedule, an optimizer whose
  step counter lives on the device (``capturable``/``fused``).

A step that cannot be captured runs eagerly, the reason kept in ``GraphedStep.reason``;
``enabled=False`` turns capture off. The first ``warmup`` steps run eagerly (lazy state,
caches and optimizer moments are made there, outside the graph).
"""
from __future__ import annotations

import warnings
from typing import Callable

import torch
from torch import Tensor

from ..noise import fused
from ..noise.keys import mix_int
from ..noise.sampling import param_epoch_key, sampler, static_keys
from ..strategies.metrics import StepMetrics
from ..strategies.rules.torch_optim import OptimizerRule
from .evaluate import evaluate


GraphFitness = Callable[[torch.nn.Module, int, int], Tensor]  # (model, lo, hi): a replay has no new step


class CudaGraphCapture:
    """``torch.cuda.CUDAGraph`` around a callable; the default capture of :class:`GraphedStep`."""

    def __init__(self, device: torch.device):
        self.device = device
        self.graph = None

    def capture(self, fn: Callable):
        self.graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.graph(self.graph, stream=stream):
            out = fn()
        torch.cuda.current_stream(self.device).wait_stream(stream)
        return out

    def replay(self) -> None:
        self.graph.replay()


def capture_obstacle(es, device: torch.device, capture_factory) -> str | None:
    """Why the step of ``es`` cannot be replayed from a graph, or None when it can."""
    strategy, cfg = es.strategy, es.strategy.config
    if capture_factory is CudaGraphCapture and device.type != "cuda":
        return f"CUDA graphs need a CUDA device; the parameters are on {device}"
    if cfg.sigma_decay != 1 or strategy.sigma_schedule is not None:
        return "σ changes every step (sigma_decay / sigma_schedule): a replay would keep the captured σ"
    if cfg.lr_decay != 1 or strategy.lr_schedule is not None:
        return "lr changes every step (lr_decay / lr_schedule): a replay would keep the captured lr"
    how = sampler(device)
    if how not in ("fused", "interpret"):
        return "the fused noise kernel is not in use here (Triton missing, or HYPERSCALEES_NOISE_KERNEL=torch)"
    if how == "interpret" and capture_factory is CudaGraphCapture:
        # The interpreter runs the kernel on host copies of its device tensors: copies a CUDA
        # graph refuses to record (it would fail mid-capture and fall back anyway).
        return ("HYPERSCALEES_NOISE_KERNEL=interpret runs the noise kernel on the host, which a CUDA graph "
                "cannot capture: unset it to use the compiled kernel")
    rule = strategy.rule
    if isinstance(rule, OptimizerRule):
        # torch refuses to capture an optimizer built without capturable=True on CUDA; on other
        # devices a fused optimizer keeps its step count in a tensor too. SGD keeps none.
        flags = ("capturable",) if device.type == "cuda" else ("capturable", "fused")
        for opt in rule.optimizer.optimizers:
            if not isinstance(opt, torch.optim.SGD) and not any(opt.defaults.get(f) for f in flags):
                return f"{type(opt).__name__} is not capturable (build it with capturable=True)"
    elif not getattr(rule, "capturable", False):
        return f"update rule {type(rule).__name__} does not declare capturable = True"
    return None


class GraphedStep:
    """``step = GraphedStep(es, fitness_fn)``; each ``step()`` runs one ES step and returns its metrics.

    ``fitness_fn(model, lo, hi)``: :func:`~hyperscalees.evaluate`'s fitness without ``step``, since
    a replay re-runs the step it captured and cannot hand a new one; it must read inputs that
    stay at one address (update them in place between steps).
    """

    def __init__(self, es, fitness_fn: GraphFitness, chunk: int | None = None, enabled: bool = True,
                 warmup: int = 2, capture_factory=CudaGraphCapture):
        self.es, self.fitness_fn, self.chunk, self.warmup = es, fitness_fn, chunk, warmup
        strategy = es.strategy
        self.names = list(strategy.trainable)
        self.device = strategy.params[self.names[0]].device
        self.capture_factory = capture_factory
        self.reason = capture_obstacle(es, self.device, capture_factory) if enabled else "disabled"
        self.graph = None
        self.outputs: StepMetrics | None = None
        self.steps_run = 0
        self._keys = torch.zeros(len(self.names), 2, dtype=torch.int32, device=self.device)
        self._buffers = {n: self._keys[i] for i, n in enumerate(self.names)}

    @property
    def captured(self) -> bool:
        return self.graph is not None

    def _eager_step(self) -> StepMetrics:
        return self.es.tell(evaluate(self.es, lambda m, lo, hi, step: self.fitness_fn(m, lo, hi), self.chunk))

    def _write_keys(self) -> None:
        """This step's key words into the fixed buffers (no host wait: pinned, asynchronous)."""
        pop = self.es.ask()
        keys = [param_epoch_key(pop, n) for n in self.names]
        fused.key_table([(k, mix_int(k)) for k in keys], self.device, out=self._keys)

    def _graph_step(self) -> StepMetrics:
        self._write_keys()
        with static_keys(self._buffers):
            return self._eager_step()

    def __call__(self) -> StepMetrics:
        self.steps_run += 1
        if self.reason is not None or self.steps_run <= self.warmup:
            return self._eager_step() if self.reason is not None else self._graph_step()
        if self.graph is None:
            return self._capture()
        self._write_keys()
        self.graph.replay()
        strategy = self.es.strategy
        strategy.set_step(strategy.step + 1)  # the replay ran the update; the host's counter follows
        return self._metrics(strategy.step)

    def _capture(self) -> StepMetrics:
        strategy = self.es.strategy
        step = strategy.step
        graph = self.capture_factory(self.device)
        try:
            self._write_keys()
            with static_keys(self._buffers):
                self.outputs = graph.capture(self._eager_step)
        except Exception as err:  # anything the capture cannot hold: run eagerly from now on
            strategy.set_step(step)
            self.reason = f"capture failed: {type(err).__name__}: {err}"
            warnings.warn(f"GraphedStep: {self.reason}; running eagerly", RuntimeWarning)
            return self._eager_step()
        self.graph = graph
        graph.replay()  # capturing records the step; this runs it
        return self._metrics(strategy.step)

    def _metrics(self, step: int) -> StepMetrics:
        """The captured outputs, copied (the next replay overwrites them); the step from the host."""
        raw = {k: (v.clone() if isinstance(v, Tensor) else v) for k, v in
               ((k, self.outputs.raw(k)) for k in self.outputs)}
        raw["step"] = step
        return StepMetrics(raw)
