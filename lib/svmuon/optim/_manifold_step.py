"""One batch of a manifold Muon step (:func:`svmuon.optim.functional.manifold_muon_updates`): the canonical stack,
momentum by projection transport, the manifold's direction and retraction, the point check and the drift, planned
into a :class:`~svmuon.optim.plan.StepPlan`. Private; it talks to the manifold through its public optimizer protocol
(:mod:`svmuon.orthogonal.base`) only."""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from svmuon.optim._batching import _label
from svmuon.optim.distributed import is_dtensor, shard_like, whole
from svmuon.optim.plan import StepPlan
from svmuon.orthogonal.base import eps_damping
from svmuon.orthogonal.msign import power_of_two_scale

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
                         labels, drift_max: float, carried_max: float) -> None:
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
    drift_prev = torch.stack([_as_drift(drifts[i] if drifts else None, defect, labels, i) for i in idx])
    checked = defect if start is None else torch.maximum(defect, start)
    on_manifold, tolerance = _point_check(checked, drift_prev, eta, manifold, orthogonalize, atol)
    # a NaN/Inf in g, B or B' reaches U; U is checked itself (the SVD route reads NaN as 0, the Stiefel one solves it as
    # 0); the tangent norm, from the same U, reaches W' through the step length
    new_drift = torch.zeros_like(drift_prev) if correct else defect.reshape(k, -1).amax(dim=1)
    plan.add_batch([_label(labels, i) for i in idx], [U.reshape(k, -1), W_new, new_B],
                   on_manifold=on_manifold, defect=checked.reshape(k, -1), tolerance=tolerance,
                   defect_before=lambda: manifold.stabilize(Wc, False)[1],
                   drift=None if correct else new_drift, drift_max=drift_max, drift_prev=drift_prev,
                   carried_max=carried_max)
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


def _as_drift(value: torch.Tensor | None, like: torch.Tensor, labels: Any, i: int) -> torch.Tensor:
    """The drift parameter ``i`` carries as a 0-d tensor of ``like``'s dtype (0 for ``None``); its range is checked
    with the step's flags (``StepPlan.add_batch``), its type and size here (metadata: a drift set by hand in
    ``optimizer.state[W]['drift']``)."""
    if value is None:
        return torch.zeros((), dtype=like.dtype, device=like.device)
    if not isinstance(value, torch.Tensor) or value.numel() != 1 or not value.is_floating_point():
        raise ValueError(f"the drift of {_label(labels, i)} (optimizer.state[W]['drift'], or drifts[{i}] in the "
                         f"functional API) must be a 0-d floating-point tensor, got {value!r}; no parameter or "
                         "optimizer state was changed")
    return value.reshape(()).to(dtype=like.dtype, device=like.device)


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
