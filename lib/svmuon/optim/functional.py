"""Functional core of the optimizers: pure functions of lists of tensors (torch's ``_muon.py`` pattern).

:class:`svmuon.optim.muon.Muon` and :class:`svmuon.optim.manifold_muon.ManifoldMuon` only collect, per
param group, the parameters that have a gradient, their gradients and their state, and call the functions
here with explicit keyword arguments; nothing below ``step()`` sees a param-group dict. A step has two phases:

1. **plan** (:func:`muon_updates`, :func:`manifold_muon_updates`): compute every new value (momentum
   buffers, parameters, solver state) out of place into a :class:`~svmuon.optim.plan.StepPlan`, with a boolean per
   parameter that says whether its update is finite (and, on a manifold, whether the point was still on
   it). No host synchronisation: same-shape matrices are stacked and orthogonalised in one batched call.
2. **verify, then commit** (:meth:`~svmuon.optim.plan.StepPlan.verify`,
   :meth:`~svmuon.optim.plan.StepPlan.commit`): one host synchronisation reads every flag at once; only if
   all hold are the new values copied into place. A step is therefore
   atomic: a NaN gradient, a momentum that overflows, a NaN buffer loaded from a checkpoint or a point
   moved off its manifold raises one error naming the parameter, and nothing at all is changed.

:func:`muon` and :func:`manifold_muon` do all three for one list of parameters (the functional API); the
optimizers plan every param group first and verify once, so a step over several groups is atomic too.

The public functions live here; the batching helpers they share are in ``_batching`` and one manifold batch's plan
(momentum transport, direction, retraction, point check, drift) in ``_manifold_step``, both private.

**The** ``eps`` **rule, one meaning everywhere.** ``eps`` is the size, relative to its reference, below
which the matrix handed to msign counts as noise: the orthogonalised step is multiplied by
``min(1, ‖A‖_F / (eps · ref))``. For Muon ``A = U`` (the momentum update) and ``ref = 1``: torch.optim.Muon's
absolute floor, so a vanishing update takes a vanishing step. On a manifold ``A = P_W(U)`` (the tangent
part of the update, ``W[WᵀU]_skew`` on O(n)) and ``ref = ‖U‖_F``: a tangent part at rounding level relative
to the update (``‖[WᵀU]_skew‖ ≈ 1e-7 ‖U‖`` for a normal gradient in float32) takes no full step of length
``lr`` in a random direction. ``eps = 0`` switches the rule off (a purely scale-invariant step).

References:
    paszke2019pytorch (torch.optim.Muon and its functional form), jordan2024muon, su2025orthogonal.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np
import torch

from svmuon.optim._batching import _batch_momentum, _batches, _check_lengths, _label, check_disjoint
from svmuon.optim._manifold_step import _Shaped, _host_bound, _plan_manifold_batch
from svmuon.optim.distributed import is_dtensor, shard_like
from svmuon.orthogonal.base import eps_damping
from svmuon.optim.plan import NonFiniteUpdateError, OffManifoldError, StepPlan  # noqa: F401  (also importable from here)

__all__ = ["muon", "manifold_muon", "muon_updates", "manifold_muon_updates", "adjust_lr", "DRIFT_MAX",
           "CARRIED_DRIFT_MAX"]

#: The most drift (``‖WᵀW - I‖_max`` left by uncorrected steps, ``correct=False``) a step may leave: the point check
#: adds the drift to its tolerance, so an unbounded one would switch the check off (a loaded 0.4 let a 0.6-scaled point
#: pass). Uncorrected float32 runs with Keller Jordan's schedule leave 2.1e-2 after 10,000 steps at lr = 0.02 (the
#: recorded orthogonal-drift experiment); at lr = 0.3 with three steps of it, 0.1 after 1,000 (tests). A step that
#: would leave more is refused (``OffManifoldError``, naming the cause), and a checkpoint may hold no more.
DRIFT_MAX = 0.1
#: The most drift a step may *carry* in (a loaded or given one): the ceiling rounded up to float32, so that a float32
#: checkpoint written at the ceiling (float32(0.1) = 0.10000000149) loads into, and steps in, a float64 model.
CARRIED_DRIFT_MAX = max(DRIFT_MAX, float(np.float32(DRIFT_MAX)))


def adjust_lr(lr: Any, adjust_lr_fn: str | None, shape: Sequence[int]) -> Any:
    """Learning rate of a ``(m, n)`` matrix after the named shape rule (torch.optim.Muon's ``_adjust_lr``).

    * ``None`` or ``"original"`` (jordan2024muon): ``lr * sqrt(max(1, m / n))``. Since ``‖msign(U)‖₂ = 1``,
      this is a step of spectral norm ``lr`` per unit of ``sqrt(max(1, m/n))``, the "spectral norm per
      step" reading: a step whose size as an operator (``‖ΔW‖₂``, the norm of eq-steepest) is
      ``lr * sqrt(m/n)`` for tall matrices, ``lr`` otherwise.
    * ``"match_rms_adamw"`` (liu2025moonlight): ``0.2 * lr * sqrt(max(m, n))``. A full-rank ``msign`` of an
      ``(m, n)`` matrix has RMS entry ``sqrt(min(m, n) / (m n)) = 1 / sqrt(max(m, n))``; this rule makes the
      update's RMS 0.2 ``lr``, the typical RMS of an AdamW update, so AdamW's lr and weight decay carry over.

    Args:
        lr: a float or a 0-d tensor (kept a tensor: no host synchronisation).
        adjust_lr_fn: the rule's name. shape: ``(m, n, ...)``; only the first two entries are read.

    Raises:
        ValueError: unknown rule (the message starts as torch.optim.Muon's).
    """
    m, n = shape[:2]
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        return lr * math.sqrt(max(1.0, m / n))
    if adjust_lr_fn == "match_rms_adamw":
        return lr * (0.2 * math.sqrt(max(m, n)))
    raise ValueError(f"Adjust learning rate function {adjust_lr_fn} is not supported: adjust_lr_fn must be None, "
                     "'original' or 'match_rms_adamw'")


def muon_updates(
    params: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor],
    momentum_buffers: Sequence[torch.Tensor],
    *,
    lr: Any,
    weight_decay: float,
    momentum: float,
    nesterov: bool,
    orthogonalize: Callable[[torch.Tensor], torch.Tensor],
    eps: float,
    adjust_lr_fn: str | None,
    labels: Sequence[Any] | None = None,
    plan: StepPlan | None = None,
) -> StepPlan:
    """Plan one Muon step (jordan2024muon; the conventions of torch.optim.Muon), changing nothing.

    For each matrix ``W`` (shape ``(m, n)``) with gradient ``g`` and buffer ``B``: ``B' = μB + (1-μ)g``;
    ``U = (1-μ)g + μB'`` (Nesterov) or ``B'``; ``O = orthogonalize(U) · min(1, ‖U‖_F / eps)``;
    ``W' = (1 - lr·weight_decay) W - adjust_lr(lr, adjust_lr_fn, (m, n)) · O``. Same-shape matrices go
    through one batched ``orthogonalize`` call; a DTensor (FSDP2 shard) is gathered whole for it and the
    result cut back into its block (:mod:`svmuon.optim.distributed`).

    Args:
        params, grads, momentum_buffers: equal-length lists of ``(m, n)`` tensors (buffers as ``zeros_like``
            for a first step).
        lr: float or 0-d tensor. weight_decay, momentum, eps: floats. nesterov: bool.
        orthogonalize: ``X -> msign(X)`` on ``(k, m, n)`` tensors, e.g. an
            :class:`~svmuon.orthogonal.msign.Orthogonalizer`. Its result is overwritten (it becomes the new
            parameters): it must not share memory with anything else than its input (which is copied then).
        adjust_lr_fn: see :func:`adjust_lr`.
        labels: names of the parameters for error messages (default ``"parameter i"``).
        plan: a plan to add to (default: a new one).

    Returns:
        The plan; ``plan.verify()`` then ``plan.commit()`` apply it.

    Raises:
        ValueError: lists of unequal lengths. Nothing else is checked here (the optimizer checked its
            options; shapes must match): a non-finite update shows at ``plan.verify()``.
    """
    _check_lengths(params=params, grads=grads, momentum_buffers=momentum_buffers, labels=labels)
    plan = plan if plan is not None else StepPlan("Muon")
    for idx in _batches(params, grads):
        P = [params[i] for i in idx]
        new_B, U = _batch_momentum(idx, grads, momentum_buffers, momentum, nesterov)
        norm = torch.linalg.matrix_norm(U if U.dtype in (torch.float32, torch.float64) else U.float())
        O = orthogonalize(U)
        if O.untyped_storage().data_ptr() == U.untyped_storage().data_ptr():  # e.g. an identity: O is written below
            O = O.clone()
        scale = (adjust_lr(lr, adjust_lr_fn, tuple(P[0].shape)) * eps_damping(norm, 1.0, eps)).to(O.dtype)
        decay = 1 - lr * weight_decay
        if is_dtensor(P[0]):  # checked on the gathered whole: the same answer on every rank
            plan.add_batch([_label(labels, idx[0])], [O])
            p = P[0]
            plan.write(p, p * decay - shard_like(O[0], p).to(p.dtype) * scale[0])
            plan.write(momentum_buffers[idx[0]], new_B[0])
            continue
        # W' = decay W - scale O, built in O's storage (O is ours); a NaN/Inf in g, B or B' reaches U,
        # and from U every entry of O (Newton–Schulz mixes all entries), so checking W' checks them all
        new_P = O.mul_(-scale[:, None, None]).to(P[0].dtype)
        for j, p in enumerate(P):
            if isinstance(decay, torch.Tensor):
                new_P[j].addcmul_(p, decay)
            else:
                new_P[j].add_(p, alpha=decay)
        plan.add_batch([_label(labels, i) for i in idx], [new_P])
        for j, i in enumerate(idx):
            plan.write(params[i], new_P[j])
            plan.write(momentum_buffers[i], new_B[j])
    return plan


def muon(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], momentum_buffers: Sequence[torch.Tensor],
         **kwargs: Any) -> None:
    """One atomic Muon step in place: :func:`muon_updates`, then verify (one host sync), then commit.

    Keyword arguments as for :func:`muon_updates`.

    Raises:
        NonFiniteUpdateError: some update is NaN/Inf (nothing was changed).
    """
    plan = muon_updates(params, grads, momentum_buffers, **kwargs)
    plan.verify()
    plan.commit()


def manifold_muon_updates(
    params: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor],
    momentum_buffers: Sequence[torch.Tensor],
    solver_states: Sequence[dict[str, torch.Tensor]] | None = None,
    *,
    lr: Any,
    manifold: Any,
    orthogonalize: Callable[[torch.Tensor], torch.Tensor],
    momentum: float,
    nesterov: bool,
    eps: float | None,
    correct: bool | Sequence[bool],
    atol: float | None,
    drifts: Sequence[torch.Tensor | None] | None = None,
    infos: Sequence[dict[str, torch.Tensor]] | None = None,
    labels: Sequence[Any] | None = None,
    plan: StepPlan | None = None,
) -> StepPlan:
    """Plan one step of Muon on a manifold (su2025orthogonal), changing nothing.

    For each point ``W`` with gradient ``g`` and buffer ``B``, through the manifold's public optimizer protocol
    (:mod:`svmuon.orthogonal.base`; the same-shape parameters of a batch in one call, wide and tall ones together
    where the manifold sees them in one canonical orientation):

    * momentum kept in the tangent space (projection transport, absil2008optimization §8.1):
      ``B' = P_W(μB + (1-μ)g)`` and ``U = (1-μ)g + μB'`` (Nesterov) or ``B'``. The buffer is tangent at the point
      it was made at and re-projected at the next point; the normal part of a gradient never enters it, so a term
      constant on the manifold (weight decay ``c‖W‖²`` on ``WᵀW = I``) changes nothing (thm-tangent-momentum);
    * the manifold's unit steepest direction for ``U`` (``manifold.direction``), whose value depends on
      ``P_W(U)`` only;
    * the step length ``η = lr · min(1, ‖P_W(U)‖_F / (eps ‖U‖_F))`` (the eps rule of the module docstring);
    * ``manifold.retract_direction``, then ``manifold.stabilize``, which forms ``W'ᵀW'`` once to measure the
      defect and (where ``correct``) applies one Björck step, or more for a long step (``_corrections``). The
      point must have been on the manifold: the step
      is refused if the defect exceeds ``2 (atol + drift) + slack`` (``drift`` the defect left by the previous
      uncorrected step, ``slack = manifold.step_slack(η, orthogonalize)``), and an uncorrected step is refused where it
      would leave a drift above :data:`DRIFT_MAX`.

    Args:
        params, grads, momentum_buffers: equal-length lists of tensors ``(..., m, n)`` (points, gradients,
            buffers; a buffer as ``zeros_like`` for a first step).
        solver_states: one dict per parameter with the manifold's ``state_keys`` (empty dicts, or ``None`` for
            all, at a first step); updated in place at commit.
        lr: float or 0-d tensor (the spectral length of the step). momentum, nesterov: as Muon.
        manifold: a :class:`~svmuon.orthogonal.base.Manifold`. orthogonalize: ``X -> msign(X)``.
        eps: the eps rule's threshold (``None``: ``√eps`` of the parameter's dtype).
        correct: apply the Björck correction (one bool, or one per parameter).
        atol: tolerance of the point check (``None``: ``√eps`` of the parameter's dtype).
        drifts: per parameter, the defect left by its previous uncorrected step (0-d tensor, updated at commit;
            required where ``correct`` is False, else ``None`` is allowed).
        infos: one dict per parameter, filled at commit with ``(,)``-tensors ``tangent_norm``, ``damping``,
            ``defect`` and the manifold's own diagnostics. labels, plan: as :func:`muon_updates`.

    Returns:
        The plan. At commit, each ``drifts[i]`` is overwritten with the new drift (if a tensor) and
        ``solver_states``/``infos`` are updated.

    Raises:
        ValueError: per-parameter lists of unequal lengths; ``correct=False`` for a parameter without a drift
            tensor; a drift that is not a 0-d floating-point tensor; parameters, buffers, drifts and solver-state
            tensors that share memory, or one solver-state dict for two parameters (the commit writes each in
            place; every parameter needs its own buffer, drift and dict).
        TypeError: ``correct`` neither a bool nor a sequence of bools; ``drifts`` not a list, or an entry neither
            a tensor nor ``None``; a solver state that is not a dict.

    At ``plan.verify()`` (read with the step's one synchronisation): a carried drift outside
    ``[0, CARRIED_DRIFT_MAX]`` (NaN included: ``ValueError``), non-finite updates (``NonFiniteUpdateError``),
    points off the manifold and drifts beyond ``DRIFT_MAX`` (``OffManifoldError``).
    """
    flags = _check_correct(correct, len(params))
    _check_lengths(params=params, grads=grads, momentum_buffers=momentum_buffers, solver_states=solver_states,
                   correct=flags, drifts=drifts, infos=infos, labels=labels)
    _check_drifts(drifts, flags, labels)
    _check_disjoint(labels, solver_states, params=params, momentum_buffers=momentum_buffers, drifts=drifts)
    return _manifold_muon_plan(params, grads, momentum_buffers, solver_states, lr=lr, manifold=manifold,
                               orthogonalize=orthogonalize, momentum=momentum, nesterov=nesterov, eps=eps,
                               correct=flags, atol=atol, drifts=drifts, infos=infos, labels=labels, plan=plan)


def _manifold_muon_plan(params, grads, momentum_buffers, solver_states, *, lr, manifold, orthogonalize,  # noqa: ANN001
                        momentum, nesterov, eps, correct, atol, drifts, infos, labels, plan) -> StepPlan:  # noqa: ANN001
    """:func:`manifold_muon_updates` without its argument checks (the optimizer's hot path: its own state was
    checked when it was made or loaded); ``correct`` is a list of bools."""
    plan = plan if plan is not None else StepPlan("ManifoldMuon")
    flips = [bool(manifold.transposed(tuple(p.shape))) for p in params]
    shapes = [tuple(p.shape[:-2]) + ((p.shape[-1], p.shape[-2]) if f else tuple(p.shape[-2:]))
              for p, f in zip(params, flips)]
    lr_max = _host_bound(lr)
    for idx in _batches([_Shaped(s, p.dtype) for s, p in zip(shapes, params)], grads, (correct,)):
        _plan_manifold_batch(plan, idx, params, grads, momentum_buffers, solver_states, flips, lr=lr, lr_max=lr_max,
                             manifold=manifold, orthogonalize=orthogonalize, momentum=momentum, nesterov=nesterov,
                             eps=eps, correct=correct[idx[0]], atol=atol, drifts=drifts, infos=infos, labels=labels,
                             drift_max=DRIFT_MAX, carried_max=CARRIED_DRIFT_MAX)
    return plan


def _check_correct(correct: Any, n: int) -> list[bool]:
    if isinstance(correct, (bool, np.bool_)):
        return [bool(correct)] * n
    if isinstance(correct, (str, bytes)) or not isinstance(correct, Sequence) \
            or not all(isinstance(c, (bool, np.bool_)) for c in correct):
        raise TypeError(f"correct must be a bool or a sequence of bools (one per parameter), got {correct!r}")
    return [bool(c) for c in correct]


def _check_drifts(drifts: Any, flags: list[bool], labels: Sequence[Any] | None) -> None:
    """Metadata only (no host read): ``drifts`` a list of 0-d floating tensors or ``None`` (not where uncorrected)."""
    if drifts is not None and (isinstance(drifts, (str, bytes, torch.Tensor)) or not isinstance(drifts, Sequence)):
        raise TypeError(f"drifts must be a list (one 0-d tensor or None per parameter), got {type(drifts).__name__}")
    for i, f in enumerate(flags):
        d = None if drifts is None else drifts[i]
        if d is None:
            if not f:  # taken as 0, the drift would soon be blamed on the step
                raise ValueError(f"correct=False needs drifts: a 0-d tensor per uncorrected parameter "
                                 f"(torch.zeros(()) at the start), which the step updates in place; none for "
                                 f"{_label(labels, i)}")
            continue
        if not isinstance(d, torch.Tensor):
            raise TypeError(f"drifts[{i}] ({_label(labels, i)}) must be a 0-d floating-point tensor or None, got "
                            f"{type(d).__name__}")
        if d.dim() != 0 or not d.is_floating_point():
            raise ValueError(f"drifts[{i}] ({_label(labels, i)}) must be a 0-d floating-point tensor (one drift per "
                             f"parameter, whatever its batch shape), got shape {tuple(d.shape)} {d.dtype}")


def _check_disjoint(labels: Sequence[Any] | None, solver_states: Sequence[Any] | None,
                    **lists: Sequence[Any] | None) -> None:
    """``ValueError`` where two of the tensors the commit writes (named by list and index) share memory, or one
    solver-state dict serves two parameters (``_batching.check_disjoint``)."""
    items = [(t, f"{name}[{i}] ({_label(labels, i)})", "written") for name, tensors in lists.items()
             for i, t in enumerate(tensors or ())]
    owners: dict[int, int] = {}
    for i, state in enumerate(solver_states or ()):
        if not isinstance(state, dict):
            raise TypeError(f"solver_states[{i}] ({_label(labels, i)}) must be a dict, got {type(state).__name__}")
        if id(state) in owners:
            raise ValueError(f"solver_states[{owners[id(state)]}] and solver_states[{i}] are one dict: each parameter "
                             "needs its own (its solver state is written at commit)")
        owners[id(state)] = i
        items += [(t, f"solver_states[{i}][{key!r}] ({_label(labels, i)})", "written") for key, t in state.items()]
    check_disjoint(items)


def manifold_muon(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor],
                  momentum_buffers: Sequence[torch.Tensor], solver_states: Sequence[dict] | None = None,
                  **kwargs: Any) -> None:
    """One atomic step of Muon on a manifold, in place: :func:`manifold_muon_updates`, verify, commit.

    Raises:
        ValueError, TypeError: bad arguments, as :func:`manifold_muon_updates`; a carried drift outside
            ``[0, CARRIED_DRIFT_MAX]``. NonFiniteUpdateError: some update is NaN/Inf. OffManifoldError: a point
            had left its manifold, or uncorrected steps would leave a drift above ``DRIFT_MAX``. In every case
            nothing was changed.
    """
    plan = manifold_muon_updates(params, grads, momentum_buffers, solver_states, **kwargs)
    plan.verify()
    plan.commit()
