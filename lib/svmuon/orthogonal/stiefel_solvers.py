"""The steepest direction on the Stiefel manifold: the reduced dual and three ways to solve it.

On ``St(m, n) = {W ∈ R^{m×n} : WᵀW = I_n}`` (m >= n; the source articles write St(n, m)) the unit
steepest-ascent direction under the spectral norm solves (book equation ``eq-stiefel-problem``)::

    max tr(GᵀΦ)   s.t.   ‖Φ‖₂ <= 1,   WᵀΦ + ΦᵀW = 0.

Its Lagrange dual is ``min over symmetric X of ‖G + WX‖_*`` (``eq-stiefel-dual``, strong duality holds).
The book's reduction (``thm-stiefel-reduction``) makes that an n × n problem: with

    A = WᵀG,  K = [A]_skew,  G⊥ = G - WA,  C = G⊥ᵀG⊥,  Y = [A]_sym + X,  M = (Y + K)ᵀ(Y + K) + C,

``‖G + WX‖_* = tr(M^{1/2})`` and, where ``M ≻ 0``, ``msign(G + WX) = (G + WX) M^{-1/2}``, with
``WᵀΦ = (Y + K) M^{-1/2}`` and gradient ``∇_Y tr(M^{1/2}) = [WᵀΦ]_sym``. The smoothed dual
``f_ε(Y) = tr((M + ε²I)^{1/2})`` (the nuclear norm of ``[G + WX; εI]``) has the same form with
``M + ε²I``; its ``Φ_ε = (G + WX)(M + ε²I)^{-1/2}`` has ``‖Φ_ε‖₂ < 1`` and tangent residual
``‖WᵀΦ_ε + Φ_εᵀW‖_F = 2‖∇f_ε(Y)‖_F``, so a stationary point of ``f_ε`` gives an exactly feasible
direction whose value is below the optimum by at most ``0.31 k ε`` (k = the number of singular values of
``G + WX`` that vanish at the optimum; ``eq-stiefel-smoothing-gap``).

Solvers (``method=``), each returning :class:`StiefelSolution` with iterations and the residual
``‖WᵀΦ + ΦᵀW‖_F`` of the ``Φ`` it returns:

* ``"newton"`` (the book's): Newton's method on ``f_ε`` in the n × n variable ``Y``, the Newton system
  solved by conjugate gradients preconditioned with the diagonal part of the Hessian in the eigenbasis of
  ``M`` and stopped at the accuracy the next residual needs, a Levenberg–Marquardt damping driven by the
  ratio of actual to predicted decrease, a warm start (``Y0``, the previous step's reduced multiplier, or
  ``X0``) and the residual as stopping rule. No msign; per iteration one n × n eigendecomposition (or, near singular
  optima, one SVD of the stacked ``[Y + K; R]``, ``RᵀR = C``) and a few n × n products.
* ``"fixed_point"`` (su2025stiefel): ``Φ = msign(G + WX)``, ``Q = (G + WX)ᵀΦ``, then ``X`` from the
  Lyapunov equation ``QX + XQ = -2[QA]_sym``; one msign (the ``orthogonalize`` callable) per iteration.
* ``"fixed_point_reduced"``: the same iteration written in the reduced variables (no msign). The book
  shows it is the preconditioned gradient step ``Y <- Y - P⁻¹∇f`` with the preconditioner of ``"newton"``.
* ``"dual_ascent"`` (bernstein2025stiefel, the "manifold Muon" of thinking-machines-lab/manifolds):
  ``Φ = msign(G + WX)``, ``H = WᵀΦ + ΦᵀW``, ``X <- X - 2 α σ̄ (1 - k/K) H`` (``σ̄ = ‖G‖_F/√n`` makes ``α``
  scale-free; with σ̄ = 1 it is the published rule ``Λ <- Λ - α(1 - k/K)H`` for ``X = 2Λ``).

Everything is batched over leading dimensions; the n × n work runs in float64 (cheap next to the m × n
products, which run in the input's dtype). The reduced dual and the Newton machinery live in
:mod:`svmuon.orthogonal.stiefel_dual`, the rank-deficient case in :mod:`svmuon.orthogonal.stiefel_rank`.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import torch

from svmuon._validation import as_tensor, check_finite, check_float, check_int, check_matrix
from svmuon.orthogonal.stiefel_dual import (  # noqa: F401  (re-exported for the kernels' users)
    WORK_DTYPE,
    StiefelSolution,
    _dot,
    _exact_factor,
    _hessian_parts,
    _hessian_vector,
    _newton,
    _real,
    _record,
    _reduce,
    _reduced_fixed_point,
    _residual,
    _skew,
    _spectrum,
    _sym,
)

__all__ = ["StiefelSolution", "stiefel_direction", "reduced_dual", "tangent_residual", "METHODS"]

METHODS = ("newton", "fixed_point", "fixed_point_reduced", "dual_ascent")
_DEFAULT_MAX_ITER = {"newton": 50, "fixed_point": 100, "fixed_point_reduced": 200, "dual_ascent": 100}

def _default_orthogonalize() -> Callable[[torch.Tensor], torch.Tensor]:
    from svmuon.orthogonal.msign import Orthogonalizer

    return Orthogonalizer("svd")

def _multiplier_start(A: torch.Tensor, X0: torch.Tensor | None, warm: torch.Tensor | None) -> torch.Tensor:
    cold = -_sym(A)  # the orthogonal group's multiplier (su2025orthogonal)
    if X0 is None:
        return cold
    X0 = X0.to(WORK_DTYPE)
    return X0 if warm is None else torch.where(warm[..., None, None], X0, cold)


def _fixed_point(W: torch.Tensor, G: torch.Tensor, X0: torch.Tensor | None, *, tol: float, max_iter: int,
                 orthogonalize: Callable[[torch.Tensor], torch.Tensor],
                 warm: torch.Tensor | None = None, trace: list | None = None) -> StiefelSolution:
    """su2025stiefel: ``Φ = msign(Z)``, ``Z = G + WX``, ``Q = [ZᵀΦ]_sym``; solve ``QX + XQ = -2[QA]_sym``
    in the eigenbasis of ``Q`` (denominators ``q_i + q_j`` floored at ``1e-12 q_max``, as the source says
    for a rank-deficient ``Z``)."""
    A = (W.mT @ G).to(WORK_DTYPE)
    X = _multiplier_start(A, X0, warm)
    dt = G.dtype
    calls = factorizations = 0
    t0 = time.perf_counter()
    for it in range(max_iter + 1):
        Z = G + W @ X.to(dt)
        Phi = orthogonalize(Z).to(dt)
        calls += 1
        residual = _residual(W, Phi)
        active = residual > tol
        _record(trace, t0, residual, it, calls, factorizations, 0)
        if it == max_iter or not bool(active.any()):
            break
        Q = _sym((Z.mT @ Phi).to(WORK_DTYPE))
        q, V = torch.linalg.eigh(Q)
        factorizations += 1
        q = q.clamp_min(1e-12 * q.abs().amax(dim=-1, keepdim=True).clamp_min(1e-300))
        rhs = V.mT @ (-2 * _sym(Q @ A)) @ V
        X_new = V @ (rhs / (q[..., :, None] + q[..., None, :])) @ V.mT
        X = torch.where(active[..., None, None], X_new, X)
    return StiefelSolution(Phi, X, residual, it, bool((residual <= tol).all()), calls, 0, factorizations, None)


def _dual_ascent(W: torch.Tensor, G: torch.Tensor, X0: torch.Tensor | None, *, tol: float, max_iter: int,
                 orthogonalize: Callable[[torch.Tensor], torch.Tensor], alpha: float,
                 warm: torch.Tensor | None = None, trace: list | None = None) -> StiefelSolution:
    """bernstein2025stiefel: ``Φ = msign(G + WX)``, ``H = WᵀΦ + ΦᵀW``, ``X <- X - 2ασ̄(1 - k/K)H``."""
    A = (W.mT @ G).to(WORK_DTYPE)
    X = _multiplier_start(A, X0, warm)  # cold: 2Λ₀ with Λ₀ = -(WᵀG + GᵀW)/4
    sigma = torch.linalg.matrix_norm(G.to(WORK_DTYPE))[..., None, None] / math.sqrt(W.shape[-1])
    dt = G.dtype
    calls = 0
    t0 = time.perf_counter()
    for k in range(max_iter + 1):
        Phi = orthogonalize(G + W @ X.to(dt)).to(dt)
        calls += 1
        H = (W.mT @ Phi).to(WORK_DTYPE)
        H = H + H.mT
        residual = torch.linalg.matrix_norm(H)
        active = residual > tol
        _record(trace, t0, residual, k, calls, 0, 0)
        if k == max_iter or not bool(active.any()):
            break
        X = torch.where(active[..., None, None], X - (2 * alpha * (1 - k / max_iter)) * sigma * H, X)
    return StiefelSolution(Phi, X, residual.to(G.dtype if G.dtype == torch.float64 else torch.float32), k,
                           bool((residual <= tol).all()), calls, 0, 0, None)


def solve(W: torch.Tensor, G: torch.Tensor, *, method: str = "newton", tol: float = 1e-6, max_iter: int | None = None,
          X0: torch.Tensor | None = None, orthogonalize: Callable[[torch.Tensor], torch.Tensor] | None = None,
          smoothing: float = 1e-6, max_cg: int = 100, alpha: float = 0.01,
          exact_residual: bool = True, warm: torch.Tensor | None = None,
          trace: list | None = None, rank_rtol: float = 1e-6, Y0: torch.Tensor | None = None) -> StiefelSolution:
    """The unchecked kernel behind :func:`stiefel_direction` (tall ``(..., m, n)`` tensors, same shape).
    ``exact_residual=False`` lets ``"newton"`` report its n × n residual ``2‖∇f_ε‖_F`` (which leaves out the
    rounding of assembling ``Φ``) and save one m × n × n product. ``warm`` (bool ``(...)``): use ``X0`` only
    where True (the cold start elsewhere). ``trace``: a list that receives one dict per iteration (seconds
    since the start, the largest residual, msign calls, factorizations, CG products); it synchronises.
    ``Y0``: warm start in the reduced multiplier ``Y = [WᵀG]_sym + X`` (:class:`StiefelSolution` ``.Y``), instead
    of ``X0``; the optimizer's choice (its optimum depends on the tangent part of ``G`` only)."""
    if Y0 is not None and X0 is not None:
        raise ValueError("pass X0 or Y0, not both")
    if max_iter is None:
        max_iter = _DEFAULT_MAX_ITER[method]
    if method == "newton":
        return _newton(W, G, X0, tol=tol, max_iter=max_iter, smoothing=smoothing, max_cg=max_cg,
                       exact_residual=exact_residual, warm=warm, trace=trace, rank_rtol=rank_rtol, Y0=Y0)
    if method == "fixed_point_reduced":
        return _reduced_fixed_point(W, G, X0, tol=tol, max_iter=max_iter, smoothing=smoothing, warm=warm,
                                    trace=trace, Y0=Y0)
    if Y0 is not None:  # the msign-based solvers iterate on X itself
        X0 = Y0.to(WORK_DTYPE) - _sym((W.mT @ G).to(WORK_DTYPE))
    orth = orthogonalize if orthogonalize is not None else _default_orthogonalize()
    if method == "fixed_point":
        return _fixed_point(W, G, X0, tol=tol, max_iter=max_iter, orthogonalize=orth, warm=warm, trace=trace)
    if method == "dual_ascent":
        return _dual_ascent(W, G, X0, tol=tol, max_iter=max_iter, orthogonalize=orth, alpha=alpha, warm=warm, trace=trace)
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")


# -- public, checked --------------------------------------------------------------------------------------------
def _positive(value: Any, name: str, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    v = float(value)
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise ValueError(f"{name} must be a finite number {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return v


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
    Wt = Wt.to(Gt.dtype).expand(shape)
    return Wt, Gt.expand(shape), was_numpy


def stiefel_direction(W: Any, G: Any, *, method: str = "newton", tol: float = 1e-6, max_iter: int | None = None,
                      X0: Any = None, orthogonalize: Callable[[torch.Tensor], torch.Tensor] | None = None,
                      smoothing: float = 1e-6, max_cg: int = 100, alpha: float = 0.01,
                      trace: list | None = None, rank_rtol: float = 1e-6, Y0: Any = None) -> StiefelSolution:
    """Steepest-ascent direction on ``St(m, n)``: ``Φ`` maximising ``tr(GᵀΦ)`` over ``‖Φ‖₂ <= 1`` and
    ``WᵀΦ + ΦᵀW = 0`` (eq-stiefel-problem), by the chosen solver (see the module docstring).

    Args:
        W: point of ``St(m, n)``, tensor or array ``(..., m, n)``, m >= n, float32/float64, ``WᵀW = I``
            to ``√eps`` of its dtype.
        G: gradient, same matrix shape, batch broadcastable; ``Phi`` has its dtype.
        method: ``"newton"`` (default), ``"fixed_point"``, ``"fixed_point_reduced"`` or ``"dual_ascent"``.
        tol: stop when ``‖WᵀΦ + ΦᵀW‖_F <= tol`` for every matrix (absolute: ``‖Φ‖₂ <= 1``).
        max_iter: outer iteration cap (default 50 / 100 / 200 / 100 by method); the cost is bounded by it.
        X0: warm start, ``(..., n, n)`` symmetric (e.g. the previous ``X``); default ``-[WᵀG]_sym``, the
            orthogonal group's multiplier.
        Y0: warm start in the reduced multiplier ``Y = [WᵀG]_sym + X`` instead, ``(..., n, n)``: e.g. the previous
            solution's ``Y`` times ``‖G_new‖_F / ‖G_old‖_F`` (the multipliers are positively homogeneous in ``G``).
            The better one between optimizer steps, since the optimum in ``Y`` depends only on the tangent part
            of ``G``. At most one of ``X0`` and ``Y0``; either is symmetrised (``(T + Tᵀ)/2``) before use.
        orthogonalize: ``Z -> msign(Z)`` used by ``"fixed_point"`` and ``"dual_ascent"`` (default: exact,
            by SVD), e.g. an :class:`~svmuon.orthogonal.msign.Orthogonalizer`.
        smoothing: ``ε / σ̄`` of the smoothed dual (``"newton"``, ``"fixed_point_reduced"``), with
            ``σ̄ = ‖P_W(G)‖_F/√n`` the root-mean-square singular value of the tangent part of ``G`` (the
            normal part only shifts the multiplier).
        max_cg: Hessian-vector products per Newton iteration at most.
        alpha: dual-ascent step (in units of ``σ̄``), as published.
        rank_rtol: ``"newton"``: singular values of ``G`` below ``rank_rtol · σ_max(G)`` count as zero, and a
            rank-deficient ``G`` is solved on its row space (:mod:`svmuon.orthogonal.stiefel_rank`); in [0, 1).
        trace: a list to receive the convergence history, one dict per iteration (``seconds``, ``residual``,
            ``msign_calls``, ``factorizations``, ``cg_products``); costs a host synchronisation per iteration.

    Returns:
        :class:`StiefelSolution`; ``Phi`` and ``X`` NumPy arrays if ``G`` is one.

    Raises:
        TypeError: non-float inputs or options of the wrong type.
        ValueError: wide ``W`` (m < n), shape mismatch, non-finite entries, ``W`` not on ``St(m, n)``, bad
            options (unknown method, ``tol`` <= 0, ...).

    References:
        su2025stiefel, bernstein2025stiefel, su2025orthogonal; the chapter "The Stiefel case".
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    tol = _positive(tol, "tol")
    smoothing = _positive(smoothing, "smoothing")
    alpha = _positive(alpha, "alpha")
    if max_iter is not None:
        max_iter = check_int(max_iter, "max_iter", minimum=0)
    max_cg = check_int(max_cg, "max_cg", minimum=1)
    if orthogonalize is not None and not callable(orthogonalize):
        raise TypeError(f"orthogonalize must be a callable Z -> msign(Z), got {type(orthogonalize).__name__}")
    Wt, Gt, was_numpy = _check_point_pair(W, G)
    from svmuon.orthogonal.msign import power_of_two_scale

    # Φ does not depend on the size of G (X and Y scale with it): solve for G / c, c a power of two (exact),
    # so that no product over- or underflows, and scale the multipliers back
    c = power_of_two_scale(Gt)
    Gt = Gt / c
    if X0 is not None and Y0 is not None:
        raise ValueError("pass at most one warm start, X0 or Y0")
    starts = {}
    for name, value in (("X0", X0), ("Y0", Y0)):
        if value is None:
            continue
        T, _ = as_tensor(value, name)
        check_float(T, name, (torch.float32, torch.float64))
        check_matrix(T, name, square=True)
        check_finite(T, name)
        n = Wt.shape[-1]
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
    rank_rtol = _positive(rank_rtol, "rank_rtol", allow_zero=True)
    if rank_rtol >= 1:
        raise ValueError(f"rank_rtol must be in [0, 1), got {rank_rtol!r}")
    if trace is not None and not isinstance(trace, list):
        raise TypeError(f"trace must be None or a list, got {type(trace).__name__}")
    out = solve(Wt, Gt, method=method, tol=tol, max_iter=max_iter, X0=starts.get("X0"), Y0=starts.get("Y0"),
                orthogonalize=orthogonalize, smoothing=smoothing, max_cg=max_cg, alpha=alpha, trace=trace,
                rank_rtol=rank_rtol)
    c64 = c.to(WORK_DTYPE)
    out.X = out.X * c64
    out.Y = None if out.Y is None else out.Y * c64
    out.tangent_norm = None if out.tangent_norm is None else out.tangent_norm * c64[..., 0, 0]
    if was_numpy:
        out.Phi, out.X, out.residual = out.Phi.numpy(), out.X.numpy(), out.residual.numpy()
        out.Y = None if out.Y is None else out.Y.numpy()
    return out


def reduced_dual(W: Any, G: Any, X: Any, *, smoothing: float = 0.0) -> tuple[Any, Any]:
    """The reduced dual of thm-stiefel-reduction at a multiplier ``X``: ``(tr((M + ε²I)^{1/2}), Φ)`` with
    ``Φ = (G + WX)(M + ε²I)^{-1/2}`` (``ε = smoothing · ‖P_W(G)‖_F/√n``), using only n × n factorizations.

    For ``smoothing = 0`` and ``M ≻ 0`` this is ``(‖G + WX‖_*, msign(G + WX))``.

    Args:
        W: ``(..., m, n)`` point of St(m, n). G: same shape. X: ``(..., n, n)`` symmetric.
        smoothing: ``ε/σ̄ >= 0``.

    Returns:
        ``(value, Phi)``: value ``(...)``, ``Phi`` ``(..., m, n)``; the type of ``G``.

    Raises:
        TypeError, ValueError: as :func:`stiefel_direction`; ``X`` of the wrong shape; ``M`` singular with
            ``smoothing = 0`` (then ``Φ`` is not defined by this formula).
    """
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
    """``‖WᵀΦ + ΦᵀW‖_F`` per matrix (0 exactly for tangent ``Φ``); shape ``(...)``, type of ``Phi``.

    Raises:
        TypeError: non-float inputs. ValueError: different matrix shapes, non-finite entries.
    """
    Wt, _ = as_tensor(W, "W")
    Pt, was_numpy = as_tensor(Phi, "Phi")
    for T, name in ((Wt, "W"), (Pt, "Phi")):
        check_float(T, name)
        check_matrix(T, name)
        check_finite(T, name)
    if Wt.shape[-2:] != Pt.shape[-2:]:
        raise ValueError(f"W and Phi must have the same matrix shape, got {tuple(Wt.shape)} and {tuple(Pt.shape)}")
    out = _residual(Wt.to(Pt.dtype), Pt)
    return out.numpy() if was_numpy else out
