"""The checked public functions of the Stiefel direction: :func:`stiefel_direction`, :func:`reduced_dual`,
:func:`tangent_residual` (tensor or NumPy in, the same type out; inputs checked at this boundary)."""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable

import torch

from svmuon._validation import as_tensor, check_finite, check_float, check_matrix
from svmuon.orthogonal.base import check_pair
from svmuon.orthogonal.stiefel.dispatch import solve
from svmuon.orthogonal.stiefel.options import StiefelOptions
from svmuon.orthogonal.stiefel.reduction import (WORK_DTYPE, StiefelSolution, _reduce, _residual, _spectrum, _sym,
                                                 _tangent_part)

__all__ = ["stiefel_direction", "reduced_dual", "tangent_residual"]

_UNSET: Any = object()


def _check_point_pair(W: Any, G: Any) -> tuple[torch.Tensor, torch.Tensor, bool]:
    Wt, _ = as_tensor(W, "W")
    Gt, was_numpy = as_tensor(G, "G")
    for T, name in ((Wt, "W"), (Gt, "G")):
        check_float(T, name, (torch.float32, torch.float64))
        check_matrix(T, name)
        check_finite(T, name)
    m, n = Wt.shape[-2:]
    if m < n:
        raise ValueError(f"W must be tall or square (..., m, n) with m >= n (a point of St(m, n) has orthonormal "
                         f"columns), got {m} x {n}; for a wide matrix with orthonormal rows pass W.mT and G.mT")
    if Gt.shape[-2:] != Wt.shape[-2:]:
        raise ValueError(f"W and G must have the same matrix shape, got W {tuple(Wt.shape)} and G {tuple(Gt.shape)}")
    try:
        shape = torch.broadcast_shapes(Wt.shape, Gt.shape)
    except RuntimeError:
        raise ValueError(f"the batch dimensions of W {tuple(Wt.shape)} and G {tuple(Gt.shape)} are not "
                         "broadcastable") from None
    W64 = Wt.double()
    defect = float((W64.mT @ W64 - torch.eye(n, dtype=torch.float64, device=Wt.device)).abs().amax())
    atol = math.sqrt(torch.finfo(Wt.dtype).eps)
    if not defect <= atol:
        raise ValueError(f"W is not a point of St({m}, {n}): max|WᵀW - I| = {defect:.3g} > {atol:.3g}; "
                         "project it first (svmuon.Stiefel().project(W), the polar factor)")
    return Wt.to(Gt.dtype).expand(shape), Gt.expand(shape), was_numpy


def _warm_starts(Wt: torch.Tensor, c: torch.Tensor, **given: Any) -> dict[str, torch.Tensor]:
    """The checked warm starts (``X0``/``Y0``), symmetrised, broadcast to ``W``'s batch, divided by the scale ``c``."""
    starts = {}
    n = Wt.shape[-1]
    for name, value in given.items():
        if value is None:
            continue
        T, _ = as_tensor(value, name)
        check_float(T, name, (torch.float32, torch.float64))
        check_matrix(T, name, square=True)
        check_finite(T, name)
        if T.shape[-1] != n:
            raise ValueError(f"{name} must be (..., {n}, {n}) for W of shape {tuple(Wt.shape)}, got {tuple(T.shape)}")
        try:
            start = _sym(T.to(WORK_DTYPE)).expand(*Wt.shape[:-2], n, n) / c.to(WORK_DTYPE)
        except RuntimeError:
            raise ValueError(f"{name} has batch dimensions {tuple(T.shape[:-2])}, which do not broadcast to the batch "
                             f"dimensions {tuple(Wt.shape[:-2])} of W (shape {tuple(Wt.shape)})") from None
        ratio = float(start.abs().amax()) if start.numel() else 0.0
        if ratio > 1e100:  # its square would overflow float64: no multiplier of this problem is that large
            raise ValueError(f"{name} is too large for this G: max|{name}| / max|G| = {ratio:.3g} > 1e100 (the "
                             "optimal multiplier is of the size of G)")
        starts[name] = start
    if len(starts) == 2:
        raise ValueError("pass at most one warm start, X0 or Y0")
    return starts


def _normal_only(out: StiefelSolution, W: torch.Tensor, G: torch.Tensor, tol: float) -> StiefelSolution:
    """Where ``‖P_W(G)‖_F <= √eps ‖G‖_F`` (eps of ``G``'s dtype) the tangent part is not resolved by the input: ``W``
    passes the point check with ``max|WᵀW - I|`` up to ``√eps``, which alone gives ``G = W(S + Sᵀ)`` a computed
    tangent part of that relative size, and the reduced multiplier ``Y = [WᵀG]_sym + X`` would be formed with a
    relative error ``eps ‖G‖_F / ‖P_W(G)‖_F >= √eps``, beyond what the iterative solvers' ``tol`` asks. There every
    feasible ``Φ`` has the value ``⟨G, Φ⟩ = ⟨P_W(G), Φ⟩`` of the noise alone, and the minimum-norm optimum of the
    problem with the tangent part taken as zero is returned: ``Φ = 0`` (tangent, in the unit ball),
    ``X = -[WᵀG]_sym``, ``Y = 0``, ``residual = 0``, ``gap = 0`` (as for ``G = 0``; the public ``steepest_direction``'s
    eps rule gives ``Φ ≈ 0`` there too). ``converged`` is then re-read from the residuals (every one ``<= tol``)."""
    tn = out.tangent_norm
    if tn is None:
        tn = torch.linalg.matrix_norm(_tangent_part(W, G).to(WORK_DTYPE))
    floor = math.sqrt(torch.finfo(G.dtype).eps) * torch.linalg.matrix_norm(G.to(WORK_DTYPE))
    small = tn.to(WORK_DTYPE) <= floor
    if not bool(small.any()):
        return out
    box = small[..., None, None]
    out.Phi = torch.where(box, torch.zeros_like(out.Phi), out.Phi)
    S = _sym((W.mT @ G).to(WORK_DTYPE))
    out.X = torch.where(box, -S, out.X.to(WORK_DTYPE))
    out.Y = None if out.Y is None else torch.where(box, torch.zeros_like(S), out.Y.to(WORK_DTYPE))
    out.gap = None if out.gap is None else torch.where(small, 0.0, out.gap.to(WORK_DTYPE))
    if out.residual is not None:
        out.residual = torch.where(small, torch.zeros_like(out.residual), out.residual)
        out.converged = out.converged or bool((out.residual <= tol).all())
    return out


def stiefel_direction(W: Any, G: Any, *, solver: str = StiefelOptions.solver, tol: float | None = None,
                      max_iter: int | None = None, X0: Any = None, Y0: Any = None,
                      orthogonalize: Callable[[torch.Tensor], torch.Tensor] | None = None,
                      smoothing: float = StiefelOptions.smoothing, max_cg: int = StiefelOptions.max_cg,
                      alpha: float = StiefelOptions.alpha, rank_rtol: float = StiefelOptions.rank_rtol,
                      route: str = StiefelOptions.route, work_dtype: torch.dtype = StiefelOptions.work_dtype,
                      trace: list | None = None, method: Any = _UNSET) -> StiefelSolution:
    """Steepest-ascent direction on ``St(m, n)``: ``Φ`` maximising ``tr(GᵀΦ)`` over ``‖Φ‖₂ <= 1`` and
    ``WᵀΦ + ΦᵀW = 0`` (eq-stiefel-problem), by the chosen solver (see :mod:`svmuon.orthogonal.stiefel`).

    Args:
        W: point of ``St(m, n)``, tensor or array ``(..., m, n)``, m >= n, float32/float64, ``WᵀW = I`` to ``√eps``
            of its dtype.
        G: gradient, same matrix shape, batch broadcastable; ``Phi`` has its dtype.
        solver: ``"completion"`` (default: closed form, feasible, within 0.64 % of the optimum at the benchmark's
            sampled steps of real training, up to 13 % on random rank-one gradients, with a certificate in
            ``.gap``), ``"newton"`` (exact, to
            ``tol``), ``"fixed_point"``, ``"fixed_point_reduced"``, ``"dual_ascent"`` or ``"amortized"`` (one warm dual step;
            :class:`~svmuon.orthogonal.stiefel.options.StiefelOptions`).
        tol: the iterative solvers' stop: ``‖WᵀΦ + ΦᵀW‖_F <= tol`` for every matrix (``None``: ``default_tol``).
        max_iter: the iterative solvers' cap (default 50 / 100 / 200 / 100 / 1 by solver).
        X0: warm start, ``(..., n, n)`` symmetric (e.g. the previous ``X``); default ``-[WᵀG]_sym``.
        Y0: warm start in the reduced multiplier ``Y = [WᵀG]_sym + X`` instead, ``(..., n, n)`` (e.g. the previous
            solution's ``Y`` times ``‖G_new‖_F / ‖G_old‖_F``). At most one of ``X0`` and ``Y0``; either is
            symmetrised before use.
        orthogonalize: ``Z -> msign(Z)`` of the square case and of ``"fixed_point"``/``"dual_ascent"`` (default:
            exact, by SVD), e.g. an :class:`~svmuon.orthogonal.msign.Orthogonalizer`.
        smoothing, max_cg, alpha, rank_rtol, route, work_dtype: see ``StiefelOptions``.
        trace: a list to receive the convergence history of an iterative solver, one dict per iteration
            (``seconds``, ``residual``, ``msign_calls``, ``factorizations``, ``cg_products``); it synchronises.
        method: the old spelling of ``solver`` (a ``DeprecationWarning``: elsewhere in the package ``method`` is
            the msign route).

    Returns:
        :class:`~svmuon.orthogonal.stiefel.reduction.StiefelSolution`; ``Phi``, ``X``, ``Y`` NumPy arrays if ``G``
        is one. Where ``G`` has no tangent part to resolve, ``‖P_W(G)‖_F <= √eps ‖G‖_F`` (eps of ``G``'s dtype:
        ``G = 0``, ``G = W(S + Sᵀ)`` up to rounding), every solver returns ``Φ = 0``, ``X = -[WᵀG]_sym``,
        ``Y = 0``, residual and gap 0, converged (the optimum with the tangent part taken as zero; see
        ``_normal_only``).

    Raises:
        TypeError: non-float inputs or options of the wrong type.
        ValueError: wide ``W`` (m < n), shape mismatch, non-finite entries, ``W`` not on ``St(m, n)``, bad
            options (unknown solver, ``tol`` <= 0, ...).

    References:
        su2025stiefel, bernstein2025stiefel, su2025orthogonal; the chapter "The Stiefel case".
    """
    if method is not _UNSET:
        warnings.warn("stiefel_direction(method=...) is deprecated: use solver=... (method is the msign route "
                      "elsewhere in svmuon)", DeprecationWarning, stacklevel=2)
        solver = method
    options = StiefelOptions(solver=solver, tol=tol, max_iter=max_iter, smoothing=smoothing, max_cg=max_cg,
                             rank_rtol=rank_rtol, alpha=alpha, route=route, work_dtype=work_dtype)
    if orthogonalize is not None and not callable(orthogonalize):
        raise TypeError(f"orthogonalize must be a callable Z -> msign(Z), got {type(orthogonalize).__name__}")
    if trace is not None and not isinstance(trace, list):
        raise TypeError(f"trace must be None or a list, got {type(trace).__name__}")
    Wt, Gt, was_numpy = _check_point_pair(W, G)
    from svmuon.orthogonal.msign import power_of_two_scale

    # Φ does not depend on the size of G (X and Y scale with it): solve for G / c, c a power of two (exact),
    # so that no product over- or underflows, and scale the multipliers back
    c = power_of_two_scale(Gt)
    starts = _warm_starts(Wt, c, X0=X0, Y0=Y0)
    Gs = Gt / c
    out = solve(Wt, Gs, options, X0=starts.get("X0"), Y0=starts.get("Y0"), orthogonalize=orthogonalize,
                trace=trace)
    out = _normal_only(out, Wt, Gs, options.tolerance(Gt.dtype, Wt.shape[-1]))
    c64 = c.to(WORK_DTYPE)  # float64 results, whatever the solver's work dtype
    out.X = out.X.to(WORK_DTYPE) * c64
    out.Y = None if out.Y is None else out.Y.to(WORK_DTYPE) * c64
    out.tangent_norm = None if out.tangent_norm is None else out.tangent_norm.to(WORK_DTYPE) * c64[..., 0, 0]
    out.gap = None if out.gap is None else out.gap.to(WORK_DTYPE)
    if was_numpy:
        for name in ("Phi", "X", "Y", "residual", "gap", "tangent_norm"):
            value = getattr(out, name)
            setattr(out, name, value.numpy() if isinstance(value, torch.Tensor) else value)
    return out


def reduced_dual(W: Any, G: Any, X: Any, *, smoothing: float = 0.0) -> tuple[Any, Any]:
    """The reduced dual of thm-stiefel-reduction at a multiplier ``X``: ``(tr((M + ε²I)^{1/2}), Φ)`` with
    ``Φ = (G + WX)(M + ε²I)^{-1/2}`` (``ε = smoothing · ‖P_W(G)‖_F/√n``), using only n × n factorizations.

    For ``smoothing = 0`` and ``M ≻ 0`` this is ``(‖G + WX‖_*, msign(G + WX))``; the value is an upper bound on the
    optimal value of eq-stiefel-problem for every symmetric ``X`` (weak duality).

    Args:
        W: ``(..., m, n)`` point of St(m, n). G: same shape. X: ``(..., n, n)`` symmetric.
        smoothing: ``ε/σ̄ >= 0``.

    Returns:
        ``(value, Phi)``: value ``(...)``, ``Phi`` ``(..., m, n)``; the type of ``G``.

    Raises:
        TypeError, ValueError: as :func:`stiefel_direction`; ``X`` of the wrong shape; ``M`` singular with
            ``smoothing = 0`` (then ``Φ`` is not defined by this formula).
    """
    from svmuon.orthogonal.stiefel.options import _positive

    smoothing = _positive(smoothing, "smoothing", allow_zero=True)
    Wt, Gt, was_numpy = _check_point_pair(W, G)
    Xt, _ = as_tensor(X, "X")
    check_float(Xt, "X", (torch.float32, torch.float64))
    check_matrix(Xt, "X", square=True)
    check_finite(Xt, "X")
    if Xt.shape[-1] != Wt.shape[-1]:
        raise ValueError(f"X must be (..., n, n) with n = {Wt.shape[-1]}, got {tuple(Xt.shape)}")
    red = _reduce(Wt, Gt)
    eps2 = (smoothing * smoothing) * red.sigma2
    Y = red.S + _sym(Xt.to(WORK_DTYPE))
    sp = _spectrum(Y, red, eps2, None)
    if bool((sp.s <= 0).any()):
        raise ValueError("M = (Y+K)ᵀ(Y+K) + C is singular at this X; Φ is then not (G + WX) M^{-1/2} "
                         "(use smoothing > 0)")
    Sinv = (sp.V / sp.s[..., None, :]) @ sp.V.mT
    Phi = Gt @ Sinv.to(Gt.dtype) + Wt @ ((Y - red.S) @ Sinv).to(Gt.dtype)
    value = sp.s.sum(-1).to(Gt.dtype)
    return (value.numpy(), Phi.numpy()) if was_numpy else (value, Phi)


def tangent_residual(W: Any, Phi: Any) -> Any:
    """``‖WᵀΦ + ΦᵀW‖_F`` per matrix (0 exactly for tangent ``Φ``); shape ``(...)``, type of ``Phi``. For wide
    matrices (``m < n``, ``W`` with orthonormal rows, as :class:`~svmuon.orthogonal.stiefel.manifold.Stiefel` takes
    them) ``‖WΦᵀ + ΦWᵀ‖_F``, the residual of the tall transposes.

    Raises:
        TypeError: non-float inputs. ValueError: different matrix shapes, batches that do not broadcast,
            non-finite entries.
    """
    Wt, _ = as_tensor(W, "W")
    Pt, was_numpy = as_tensor(Phi, "Phi")
    for T, name in ((Wt, "W"), (Pt, "Phi")):
        check_float(T, name)
        check_matrix(T, name)
        check_finite(T, name)
    check_pair(Wt, "W", Pt, "Phi")  # one matrix shape, broadcastable batches
    Wt = Wt.to(Pt.dtype)
    if Wt.shape[-2] < Wt.shape[-1]:  # orthonormal rows: the tall transpose's residual
        Wt, Pt = Wt.mT, Pt.mT
    out = _residual(Wt, Pt)
    return out.numpy() if was_numpy else out
