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
from collections import defaultdict
from typing import Any, Callable, Sequence

import torch

from svmuon.optim.distributed import is_dtensor, shard_like, whole
from svmuon.orthogonal.base import eps_damping
from svmuon.orthogonal.msign import power_of_two_scale
from svmuon.optim.plan import NonFiniteUpdateError, OffManifoldError, StepPlan  # noqa: F401  (also importable from here)

__all__ = ["muon", "manifold_muon", "muon_updates", "manifold_muon_updates", "adjust_lr", "DRIFT_MAX"]

#: The most drift (``‖WᵀW - I‖_max`` left by uncorrected steps, ``correct=False``) a step may leave: the point check
#: adds the drift to its tolerance, so an unbounded one would switch the check off (a loaded 0.4 let a 0.6-scaled point
#: pass). Uncorrected float32 runs with Keller Jordan's schedule leave 2.1e-2 after 10,000 steps at lr = 0.02 (the
#: recorded orthogonal-drift experiment); at lr = 0.3 with three steps of it, 0.1 after 1,000 (tests). A step that
#: would leave more is refused (``OffManifoldError``, naming the cause), and a checkpoint may hold no more.
DRIFT_MAX = 0.1


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


def _stack(tensors: list[torch.Tensor]) -> torch.Tensor:
    """A ``(k, ...)`` batch; a view for ``k = 1``."""
    return tensors[0].unsqueeze(0) if len(tensors) == 1 else torch.stack(tensors)


def _check_lengths(**lists: Sequence[Any] | None) -> None:
    """``ValueError`` unless every given list has the length of the first (``zip`` would silently truncate)."""
    given = {name: len(v) for name, v in lists.items() if v is not None}
    if len(set(given.values())) > 1:
        raise ValueError(f"the per-parameter lists must have equal lengths, got {given}")


def _label(labels: Sequence[Any] | None, i: int) -> Any:
    return labels[i] if labels is not None else f"parameter {i}"


def _batches(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], extra: Sequence[Any] = ()) -> list[list[int]]:
    """Indices grouped by (shape, dtype, device, *extra); a DTensor is a batch of its own."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, (p, g) in enumerate(zip(params, grads)):
        key = ("dtensor", i) if is_dtensor(g) else (tuple(p.shape), g.dtype, p.dtype, g.device,
                                                    *(e[i] for e in extra))
        groups[key].append(i)
    return list(groups.values())


def _momentum(G: torch.Tensor, B: torch.Tensor, momentum: float, nesterov: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(B', U)``: ``B' = μB + (1-μ)G`` out of place, ``U = (1-μ)G + μB'`` (Nesterov) or ``B'`` (torch.optim.Muon)."""
    new_B = B.lerp(G, 1 - momentum)
    return new_B, (G.lerp(new_B, momentum) if nesterov else new_B)


def _batch_momentum(idx: list[int], grads: Sequence[torch.Tensor], buffers: Sequence[torch.Tensor], momentum: float,
                    nesterov: bool) -> tuple[list[torch.Tensor], torch.Tensor]:
    """``([B'_j], U)`` for a batch: ``U`` stacked ``(k, m, n)``, a plain tensor (a DTensor's gathered whole:
    orthogonalising it whole is the only correct way, see :mod:`svmuon.optim.distributed`)."""
    if is_dtensor(grads[idx[0]]):  # a batch of one FSDP2 shard: momentum on the shard, then gather U
        new_B, U = _momentum(grads[idx[0]], buffers[idx[0]], momentum, nesterov)
        return [new_B], whole(U).unsqueeze(0)
    new_B, U = _momentum(_stack([grads[i] for i in idx]), _stack([buffers[i] for i in idx]), momentum, nesterov)
    return list(new_B.unbind(0)), U


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
        drifts: per parameter, the defect left by its previous uncorrected step (0-d tensor or ``None``).
        infos: one dict per parameter, filled at commit with ``(,)``-tensors ``tangent_norm``, ``damping``,
            ``defect`` and the manifold's own diagnostics. labels, plan: as :func:`muon_updates`.

    Returns:
        The plan. At commit, each ``drifts[i]`` is overwritten with the new drift (if a tensor) and
        ``solver_states``/``infos`` are updated.

    Raises:
        ValueError: per-parameter lists of unequal lengths. Non-finite updates and points off the
            manifold show at ``plan.verify()``.
    """
    flags = [correct] * len(params) if isinstance(correct, bool) else list(correct)
    _check_lengths(params=params, grads=grads, momentum_buffers=momentum_buffers, solver_states=solver_states,
                   correct=flags, drifts=drifts, infos=infos, labels=labels)
    plan = plan if plan is not None else StepPlan("ManifoldMuon")
    flips = [bool(manifold.transposed(tuple(p.shape))) for p in params]
    shapes = [tuple(p.shape[:-2]) + ((p.shape[-1], p.shape[-2]) if f else tuple(p.shape[-2:]))
              for p, f in zip(params, flips)]
    lr_max = _host_bound(lr)
    for idx in _batches([_Shaped(s, p.dtype) for s, p in zip(shapes, params)], grads, (flags,)):
        _plan_manifold_batch(plan, idx, params, grads, momentum_buffers, solver_states, flips, lr=lr, lr_max=lr_max,
                             manifold=manifold, orthogonalize=orthogonalize, momentum=momentum, nesterov=nesterov,
                             eps=eps, correct=flags[idx[0]], atol=atol, drifts=drifts, infos=infos, labels=labels)
    return plan


class _Shaped:
    """A parameter's canonical shape and dtype, what ``_batches`` groups by (tall and wide matrices of a
    manifold that handles wide ones transposed share one batch)."""

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype) -> None:
        self.shape, self.dtype = shape, dtype


def _host_bound(lr: Any) -> float | None:
    """The learning rate as a host float (a bound on every step length), or ``None`` for a tensor learning rate
    (reading it would be a host synchronisation; the retraction then takes its route for any step length)."""
    if isinstance(lr, torch.Tensor):  # not read: that would be a host synchronisation on an accelerator
        return None
    return float(lr)


def _canonical_stack(tensors: Sequence[torch.Tensor], idx: list[int], flips: Sequence[bool]) -> torch.Tensor:
    """``(k, ..., m, n)`` of the batch in the manifold's canonical orientation (transposed where it says so)."""
    if len(idx) == 1:
        T = tensors[idx[0]]
        return (T.mT if flips[idx[0]] else T).unsqueeze(0)
    # a transposed view copied contiguous first: stack's own strided copy of it is slower (measured, 2 cores)
    return torch.stack([tensors[i].mT.contiguous() if flips[i] else tensors[i] for i in idx])


def _plan_manifold_batch(plan: StepPlan, idx: list[int], params, grads, buffers, solver_states, flips, *,  # noqa: ANN001
                         lr: Any, lr_max: float | None, manifold: Any, orthogonalize: Any, momentum: float,
                         nesterov: bool, eps: float | None, correct: bool, atol: float | None, drifts, infos,
                         labels) -> None:
    """One batch of :func:`manifold_muon_updates` (same canonical shape, dtype, device and correction flag)."""
    dt = is_dtensor(params[idx[0]])
    if dt:  # FSDP2, a batch of one shard: the whole point, and the gradient with the buffer in one all-gather
        i = idx[0]
        W = whole(params[i]).unsqueeze(0)
        G, B = whole(torch.stack([grads[i], buffers[i].to(grads[i].dtype)])).unsqueeze(1).unbind(0)
        W, G, B = (T.mT if flips[i] else T for T in (W, G, B))
    else:
        W, G, B = (_canonical_stack(T, idx, flips) for T in (params, grads, buffers))
    shape = W.shape[1:]
    Wc, Gc, Bc = _flat(W), _flat(G.to(W.dtype)), _flat(B.to(W.dtype))
    B1 = Bc.lerp(Gc, 1 - momentum)
    U = Gc.lerp(B1, momentum) if nesterov else B1
    new_B = manifold.tangent(Wc, B1)  # projection transport: the buffer stays tangent (thm-tangent-momentum)
    # an exact power-of-two rescaling: the direction and the eps ratio do not depend on the size of U, and
    # WᵀU, ‖U‖_F, ‖P_W(U)‖_F cannot overflow for a finite U (a 1e38 gradient was refused as "not finite")
    u_scale = power_of_two_scale(U)
    U = U / u_scale
    state = _stacked_state(manifold, Wc, [solver_states[i] if solver_states else {} for i in idx], shape)
    d = manifold.direction(Wc, U, orthogonalize, state)  # eq-orth-direction on O(n)
    eps_ = math.sqrt(torch.finfo(W.dtype).eps) if eps is None else eps
    damping = eps_damping(d.tangent_norm, torch.linalg.matrix_norm(U), eps_)  # the eps rule
    eta = (lr * damping).to(W.dtype)[:, None, None]
    # where the retraction heals any W (Stiefel), the point before the step (from the direction, where it formed WᵀW)
    start = d.start_defect if d.start_defect is not None else manifold.start_defect(Wc)
    corrections = _corrections(manifold, orthogonalize, lr_max, W.dtype) if correct else 0
    W_new, defect = manifold.stabilize(manifold.retract_direction(Wc, d.step, eta, lr_max), corrections)
    W_new, new_B = W_new.reshape(W.shape), new_B.reshape(W.shape)
    k = len(idx)
    drift_prev = torch.stack([_as_drift(drifts[i] if drifts else None, defect) for i in idx])
    checked = defect if start is None else torch.maximum(defect, start)
    on_manifold, tolerance = _point_check(checked, drift_prev, eta, manifold, orthogonalize, atol)
    # a NaN/Inf in g, B or B' reaches U; U is checked itself (the SVD route reads NaN as 0, the Stiefel one solves it as
    # 0); the tangent norm, from the same U, reaches W' through the step length
    new_drift = torch.zeros_like(drift_prev) if correct else defect.reshape(k, -1).amax(dim=1)
    plan.add_batch([_label(labels, i) for i in idx], [U.reshape(k, -1), W_new, new_B],
                   on_manifold=on_manifold, defect=checked.reshape(k, -1), tolerance=tolerance,
                   defect_before=lambda: manifold.stabilize(Wc, False)[1],
                   drift=None if correct else new_drift, drift_max=DRIFT_MAX)
    info = {"tangent_norm": d.tangent_norm * u_scale.reshape(-1), "damping": damping, "defect": defect, **d.info}
    state_rows = _rows(d.state, k, shape) if solver_states is not None else None
    info_rows = _rows(info, k, shape) if infos is not None else None
    for j, i in enumerate(idx):
        back = (lambda T: T.mT) if flips[i] else (lambda T: T)  # noqa: E731
        p = params[i]
        plan.write(p, shard_like(back(W_new[j]), p) if dt else back(W_new[j]))
        plan.write(buffers[i], shard_like(back(new_B[j]), buffers[i]) if dt else back(new_B[j]))
        if drifts is not None and isinstance(drifts[i], torch.Tensor):
            plan.write(drifts[i], new_drift[j])
        if state_rows is not None:
            _plan_state(plan, solver_states[i], {key: rows[j] for key, rows in state_rows.items()})
        if info_rows is not None:
            _plan_state(plan, infos[i], {key: rows[j] for key, rows in info_rows.items()}, copy=False)


def _corrections(manifold: Any, orthogonalize: Any, lr_max: float | None, dtype: torch.dtype) -> int:
    """How many Björck steps follow a corrected retraction: one, or (with a host bound on the step length) as many
    as bring the most one step can add, ``ε = manifold.step_slack_bound(lr_max)`` (eq-orth-drift), to rounding level,
    ``16 u``, each mapping ``ε`` to ``3ε²/4``. One suffices for short steps (``lr = 0.02``: ``ε ≈ 3e-8`` with Keller
    Jordan's band); at ``lr = 0.5`` the band's ``7e-3`` would leave ``4e-5`` after one (measured ``8e-6`` in float64,
    accepted by the point check's slack). At most 6 (the bound is below 1 for the schedules' bands, where the
    iteration converges quadratically)."""
    if lr_max is None:
        return 1
    e, target, count = manifold.step_slack_bound(lr_max, orthogonalize), 16 * torch.finfo(dtype).eps, 1
    while count < 6 and 0.75 * e * e > target:
        e, count = 0.75 * e * e, count + 1
    return count


def _flat(T: torch.Tensor) -> torch.Tensor:
    """``(k, ..., m, n) -> (k·b, m, n)``: every matrix of a batch of parameters as one batch of matrices."""
    return T.reshape(-1, *T.shape[-2:])


def _point_check(defect: torch.Tensor, drift_prev: torch.Tensor, eta: torch.Tensor, manifold: Any,
                 orthogonalize: Any, atol: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per parameter (``k`` of them, ``b`` matrices each): whether ``defect <= 2 (atol + drift) + slack`` holds for
    every matrix (``(k,)``; fails for NaN), and the tolerance of each matrix (``(k, b)``, or ``(k, 1)`` where it is
    the same for all; read for the error message only)."""
    k = drift_prev.shape[0]
    tol = math.sqrt(torch.finfo(defect.dtype).eps) if atol is None else atol
    slack = manifold.step_slack(eta, orthogonalize)
    slack = slack.reshape(k, -1) if isinstance(slack, torch.Tensor) else slack
    tolerance = (drift_prev[:, None] + tol) * 2 + slack
    return (defect.reshape(k, -1) <= tolerance).all(dim=1), tolerance


def _rows(values: dict[str, torch.Tensor], k: int, shape: tuple[int, ...]) -> dict[str, tuple[torch.Tensor, ...]]:
    """Each parameter's part of per-matrix batch values ``(k·b, ...)``: per name, ``k`` tensors ``(...)`` of the
    parameter's batch dims (0-d tensors for plain matrices)."""
    if len(shape) == 2:  # plain matrices: one row per parameter already
        return {key: v.unbind(0) for key, v in values.items()}
    return {key: v.reshape(k, *shape[:-2], *v.shape[1:]).unbind(0) for key, v in values.items()}


def manifold_muon(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor],
                  momentum_buffers: Sequence[torch.Tensor], solver_states: Sequence[dict] | None = None,
                  **kwargs: Any) -> None:
    """One atomic step of Muon on a manifold, in place: :func:`manifold_muon_updates`, verify, commit.

    Raises:
        NonFiniteUpdateError: some update is NaN/Inf. OffManifoldError: a point had left its manifold.
            In both cases nothing was changed.
    """
    plan = manifold_muon_updates(params, grads, momentum_buffers, solver_states, **kwargs)
    plan.verify()
    plan.commit()


def _as_drift(value: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    if value is None:
        return torch.zeros((), dtype=like.dtype, device=like.device)
    return value.to(dtype=like.dtype, device=like.device)


def _stacked_state(manifold: Any, W: torch.Tensor, states: list[dict[str, torch.Tensor]],
                   shape: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """The batch's solver state, one row per matrix ``(k·b, *S)``: stacked where every parameter has it
    (a parameter of shape ``(*B, m, n)`` keeps ``(*B, *S)``), else initialised by the manifold for the
    canonical batch ``W`` (``(k·b, m, n)``) and overwritten where a parameter already has it."""
    keys = tuple(getattr(manifold, "state_keys", ()))
    if not keys:
        return {}
    nb = len(shape) - 2  # batch dims of one parameter
    if all(all(key in s for key in keys) for s in states):
        return {key: torch.stack([s[key] for s in states]).reshape(W.shape[0], *states[0][key].shape[nb:])
                for key in keys}
    fresh = manifold.init_state(W)
    for j, s in enumerate(states):  # parameters that already have state keep it
        for key in keys:
            if key in s:
                fresh[key].reshape(len(states), -1, *fresh[key].shape[1:])[j] = s[key].reshape(-1, *fresh[key].shape[1:])
    return fresh


def _plan_state(plan: StepPlan, target: dict[str, torch.Tensor], new: dict[str, torch.Tensor], copy: bool = True) -> None:
    """At commit, copy into existing same-shape tensors of ``target`` and store a clone where there is none
    (solver state, ``copy``); or store the new value itself, a view of the batch result (diagnostics)."""
    if not copy:  # the diagnostics: one update at commit
        plan.on_commit(lambda t=target, n=new: t.update(n))
        return
    for key, value in new.items():
        old = target.get(key)
        if isinstance(old, torch.Tensor) and old.shape == value.shape:
            plan.write(old, value)
        else:
            plan.on_commit(lambda t=target, k=key, v=value: t.__setitem__(k, v.clone()))
