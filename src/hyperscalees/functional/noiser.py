"""HyperscaleES's Noiser interface over the core: stateless classes, classmethods only.

A noiser perturbs the population in the forward (``do_mm``, ``do_Tmm``, ``do_emb``,
``get_noisy_standard``) and turns fitness into a parameter update (``convert_fitnesses``,
``do_updates``). Nothing is stored between the two: each call builds the leaf's core
:class:`~hyperscalees.noise.store.NoiseStore` (budget 0) and draws from it, so the update
regenerates every perturbation from (leaf key, epoch // noise_reuse, pair), with the
store's σ/√r, and the perturbed products are the core's ``ops``.

Dimensions: P members in a call (``len(thread_ids)``), K = P/2 pairs, M rows per member,
r rank, N members in an update. Inputs are member-major (leading dim P*M or (P, M, ...)).
Shapes follow HyperscaleES: ``do_mm`` param (out, in) -> x @ Wᵀ; ``do_Tmm`` param (in, out)
-> x @ W; ``do_emb`` param (vocab, dim) -> W[idx]; ``get_noisy_standard`` -> (P, *shape)
per-member copies when ``iterinfo`` is given (the unperturbed param when it is None).

Which noise a leaf gets is one decision, :meth:`AbstractNoiser.kind`: ``"lowrank"``
(σ/√r·A Bᵀ), ``"full"`` (σ·ε) or ``None``; the forward and the update both ask it, so
they cannot disagree. The forward does not see ``es_map``: whatever is routed through a
noiser is perturbed, so EXCLUDED leaves must be used directly by the model.

Update scale (HyperscaleES's, see research notes §2.4): the optimizer receives
``-√N · mean_i(f_i · s_i σ/√r A_i B_iᵀ)`` (or ``s_i σ ε_i``), i.e. ``-√N σ² ĝ`` with the
textbook ĝ = (1/(Nσ)) Σ f_i ε_i, so plain SGD moves W by ``lr·σ·√N·mean_i(f_i ε_i)``.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import ops
from ..noise.distributions import check_distribution
from ..noise.draw import Noise, draw_rows
from ..noise.population import validate_population_args
from ..noise.spec import ESMode, parse_mode
from ..strategies.estimate import estimate_one
from ..strategies.shaping import episode_weighted_z_score, group_normalize, sanitize, z_score
from .solver import resolve_solver, solver_step
from .threads import Threads, leaf_population, leaf_store, noise_name, parse_iterinfo
from .tree import ndindex, path_name, tree_get, tree_items, tree_replace


def fitness_vector(scores, what: str = "fitness") -> Tensor:
    f = torch.as_tensor(scores)
    if f.dim() != 1 or f.numel() == 0:
        raise ValueError(f"{what} must be a non-empty 1-D vector, one score per thread, got shape {tuple(f.shape)}")
    return f if f.is_floating_point() else f.to(torch.float32)


class AbstractNoiser:
    """Shared machinery; concrete noisers only set :meth:`kind` and a few class flags."""

    name = "abstract"
    baseline = False          # EGGROLLBSNoiser: threads with id % group_size in {0, 1} are unperturbed
    sign_update = False       # AltEGGROLLNoiser: update with sign(A) sign(B)ᵀ
    max_grad_norm = None      # EGGROLLBSNoiser clips the update's global norm (HyperscaleES: 1.0)

    # -- setup ---------------------------------------------------------------------------
    @classmethod
    def init_noiser(cls, params, sigma, lr, *, solver="sgd", solver_kwargs=None, rank=1, noise_reuse=1,
                    group_size=0, freeze_nonlora=False, seed=0, distribution="gaussian",
                    update_chunk=1024) -> tuple[dict, dict]:
        """-> (frozen_noiser_params, noiser_params).

        ``noise_reuse`` defaults to 1 (fresh noise each epoch); HyperscaleES defaults to 0,
        which silently reuses epoch 0's perturbations forever. ``lr`` is a float or a
        schedule ``step -> lr``. ``seed`` is folded into every leaf's noise, so noisers
        with different seeds draw independent noise from one es_tree_key.
        ``update_chunk`` bounds how many pairs' noise the update regenerates at once.
        """
        for path, leaf in tree_items(params):
            if not isinstance(leaf, Tensor):
                raise TypeError(f"params leaf {path_name(path)!r} is a {type(leaf).__name__}, not a tensor")
        validate_population_args(2, sigma, rank, noise_reuse)
        check_distribution(distribution)
        if not callable(lr) and not (isinstance(lr, (int, float)) and lr > 0):
            raise ValueError(f"lr must be a number > 0 or a schedule step -> lr, got {lr!r}")
        if not isinstance(group_size, int) or group_size < 0 or group_size % 2 or group_size == 2 and cls.baseline:
            raise ValueError(f"group_size must be 0 or an even integer (antithetic pairs in one group)"
                             f"{', >= 4 for baseline subtraction' if cls.baseline else ''}; got {group_size!r}")
        if cls.baseline and not group_size:
            raise ValueError(f"{cls.__name__} needs group_size > 0: threads id % group_size in {{0, 1}} are baselines")
        if not isinstance(update_chunk, int) or update_chunk < 1:
            raise ValueError(f"update_chunk must be an integer >= 1, got {update_chunk!r}")
        solver_fn, solver_kw = resolve_solver(solver, solver_kwargs)
        frozen = {"noiser": cls.name, "lr": lr, "solver": solver_fn, "solver_kwargs": solver_kw, "rank": rank,
                  "noise_reuse": noise_reuse, "group_size": group_size, "freeze_nonlora": bool(freeze_nonlora),
                  "seed": int(seed), "distribution": distribution, "update_chunk": update_chunk}
        return frozen, {"sigma": float(sigma), "step": 0, "opt_state": None}

    @classmethod
    def kind(cls, frozen: dict, mode: ESMode) -> str | None:
        """"lowrank" | "full" | None for a leaf of this es_map class (forward and update)."""
        raise NotImplementedError

    @classmethod
    def _baseline_every(cls, frozen: dict) -> int:
        return frozen["group_size"] if cls.baseline else 0

    # -- forward -------------------------------------------------------------------------
    @classmethod
    def _call_noise(cls, frozen, noiser_params, key, iterinfo, shape, mode: ESMode, lead: int, device,
                    tokens: Tensor | None = None) -> tuple[Threads | None, Noise | None]:
        """(threads, their pairs' noise of one leaf) for a call whose inputs have leading dim ``lead``.

        Threads are None for an unperturbed call; noise is None when this noiser leaves the
        leaf alone. With ``tokens`` (embedding ids) only the looked-up rows are drawn.
        """
        t = parse_iterinfo(iterinfo, device)
        if t is None:
            return None, None
        if lead % t.size:
            raise ValueError(f"inputs must be member-major: leading dim {lead} is not a multiple of "
                             f"len(thread_ids) = {t.size}")
        kind = cls.kind(frozen, mode)
        if kind is None:
            return t, None
        g = cls._baseline_every(frozen)
        pop = leaf_population(frozen, noiser_params["sigma"], key, t.epoch, t.population_size(g), g)
        store, name = leaf_store(frozen, pop, shape, mode, kind == "lowrank", device), noise_name(frozen)
        if tokens is None:
            return t, store.draw(name, t.pairs, t.signs(pop))
        rows = tokens.reshape(t.pairs.numel(), -1)  # (K, 2M): both members' tokens of each pair
        return t, draw_rows(pop, name, tuple(shape), t.pairs, t.signs(pop), rows, store.is_lowrank(name),
                            store.sigma(name), store.scale(name))

    @classmethod
    def get_noisy_standard(cls, frozen, noiser_params, param, base_key, iterinfo):
        """(P, *shape) per-member copies p + s·σ·ε, or ``param`` itself when ``iterinfo`` is None."""
        t, noise = cls._call_noise(frozen, noiser_params, base_key, iterinfo, param.shape, ESMode.PARAM,
                                   0, param.device)  # lead 0: no member-major input to check
        if t is None:
            return param
        if noise is None:
            return param.expand(t.size, *param.shape)
        return ops.get_noisy_standard(param, noise.eps, noise.signs, noise.scale)

    @classmethod
    def do_mm(cls, frozen, noiser_params, param, base_key, iterinfo, x):
        """x @ (W + E_i)ᵀ per member, W stored (out, in)."""
        _, noise = cls._call_noise(frozen, noiser_params, base_key, iterinfo, param.shape, ESMode.MM_PARAM,
                                   x.shape[0], x.device)
        if noise is None:
            return F.linear(x, param)
        if noise.lowrank:  # a (K, out, r), b (K, in, r)
            return ops.do_mm(x, param, noise.a, noise.b, noise.signs, noise.scale)
        return ops.do_mm_dense(x, param, noise.eps, noise.signs, noise.scale)

    @classmethod
    def do_Tmm(cls, frozen, noiser_params, param, base_key, iterinfo, x):
        """x @ (W + E_i) per member, W stored (in, out); E_i is A Bᵀ in W's own orientation."""
        _, noise = cls._call_noise(frozen, noiser_params, base_key, iterinfo, param.shape, ESMode.MM_PARAM,
                                   x.shape[0], x.device)
        if noise is None:
            return x @ param
        if noise.lowrank:  # a (K, in, r), b (K, out, r)
            return ops.do_Tmm(x, param, noise.a, noise.b, noise.signs, noise.scale)
        return ops.do_mm_dense(x, param.T, noise.eps.transpose(1, 2), noise.signs, noise.scale)

    @classmethod
    def do_emb(cls, frozen, noiser_params, param, base_key, iterinfo, x):
        """(W + E_i)[x] per member, W stored (vocab, dim); only the looked-up rows of noise are drawn."""
        _, noise = cls._call_noise(frozen, noiser_params, base_key, iterinfo, param.shape, ESMode.EMB_PARAM,
                                   x.shape[0], x.device, tokens=x)
        if noise is None:
            return F.embedding(x, param)
        if noise.lowrank:  # a: rows (K, 2M, r) of A, b (K, dim, r)
            return ops.do_emb(x, param, noise.a, noise.b, noise.signs, noise.scale)
        return ops.do_emb_dense(x, param, noise.eps, noise.signs, noise.scale)  # eps: rows (K, 2M, dim)

    # -- fitness -------------------------------------------------------------------------
    @classmethod
    def convert_fitnesses(cls, frozen, noiser_params, raw_scores, num_episodes_list=None) -> Tensor:
        """Raw scores (N,) -> shaped fitness (N,): z-score ``(R - mean) / sqrt(var + 1e-5)``.

        With ``group_size = G > 0`` each group of G consecutive threads (one prompt) has its
        own mean subtracted, and all are divided by the global std. ``num_episodes_list``
        (N,) weights each thread's score by how many episodes it averages, in both mean and
        variance; threads with 0 episodes get fitness 0 (HyperscaleES ignores this argument).
        It cannot be combined with groups. NaN/inf scores count as the worst finite score.
        """
        f, _ = sanitize(fitness_vector(raw_scores, "raw_scores"))
        g = frozen["group_size"]
        if num_episodes_list is not None:
            n = torch.as_tensor(num_episodes_list, device=f.device)
            if n.shape != f.shape:
                raise ValueError(f"num_episodes_list must have shape {tuple(f.shape)}, got {tuple(n.shape)}")
            if g:
                raise ValueError("num_episodes_list cannot be combined with group_size > 0")
            return episode_weighted_z_score(f, n)
        return group_normalize(f, g) if g else z_score(f)

    # -- update --------------------------------------------------------------------------
    @classmethod
    def do_updates(cls, frozen, noiser_params, params, base_keys, fitnesses, iterinfos, es_map):
        """-> (new noiser_params, new params). Inputs are not modified; untouched leaves are shared.

        ``fitnesses`` (N,) are shaped (see :meth:`convert_fitnesses`); ``iterinfos`` is
        ``(epoch, thread_ids)`` with thread_ids = 0..N-1, the threads the fitnesses belong to.
        """
        f = fitness_vector(fitnesses, "fitnesses")
        t = parse_iterinfo(iterinfos)
        if t is None:
            raise ValueError("do_updates needs iterinfos = (epoch, thread_ids), not None")
        if t.size != f.numel():
            raise ValueError(f"fitnesses has {f.numel()} entries but iterinfos names {t.size} threads")
        if not t.is_range():
            raise ValueError("do_updates needs thread_ids = 0, 1, ..., N-1 (one fitness per thread, in order)")
        if not bool(torch.isfinite(f).all()):
            raise ValueError("fitnesses must be finite; pass raw scores through convert_fitnesses first")
        paths, leaves, grads = [], [], []
        for path, param in tree_items(params):
            mode = parse_mode(tree_get(es_map, path))
            kind = cls.kind(frozen, mode)
            if kind is None:
                continue
            paths.append(path)
            leaves.append(param)
            grads.append(cls._leaf_grad(frozen, noiser_params, param, tree_get(base_keys, path), f, t, mode, kind))
        new_np = dict(noiser_params, step=noiser_params["step"] + 1)
        if not paths:
            return new_np, params
        new, state = solver_step(frozen, noiser_params["opt_state"], noiser_params["step"], leaves, grads,
                                 cls.max_grad_norm)
        new_np["opt_state"] = state
        return new_np, tree_replace(params, dict(zip(paths, new)))

    @classmethod
    def _leaf_grad(cls, frozen, noiser_params, param: Tensor, key, f: Tensor, t: Threads, mode: ESMode,
                   kind: str) -> Tensor:
        """-√N σ² ĝ for one leaf; a key tensor (L, ...) means one key per leading slice (scan_map).

        ĝ = (1/(Nσ)) Σ f_i ε_i is the core's estimate, whose bits follow neither the thread
        count nor ``update_chunk``; the -√N σ² factor is HyperscaleES's scaling.
        """
        n, name, g = f.numel(), noise_name(frozen), cls._baseline_every(frozen)
        key = torch.as_tensor(key)
        grad = torch.empty(param.shape, dtype=torch.float32, device=param.device)
        for idx in ndindex(tuple(key.shape)):
            pop = leaf_population(frozen, noiser_params["sigma"], int(key[idx]), t.epoch, n, g)
            store = leaf_store(frozen, pop, param.shape[len(idx):], mode, kind == "lowrank", param.device)
            g_hat = estimate_one(store, name, f, frozen["update_chunk"], cls.sign_update)
            sigma = store.sigma(name)
            grad[idx] = g_hat * (-math.sqrt(n) * sigma * sigma)
        return grad


class NoopNoiser(AbstractNoiser):
    """No noise, no update: the validation / GRPO noiser."""

    name = "noop"

    @classmethod
    def kind(cls, frozen, mode):
        return None
