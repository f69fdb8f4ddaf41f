"""The published solvers of the Stiefel direction, kept as references and for comparison.

* ``"fixed_point"`` (su2025stiefel): ``Φ = msign(G + WX)``, ``Q = [(G + WX)ᵀΦ]_sym``, then ``X`` from the
  Lyapunov equation ``QX + XQ = -2[QA]_sym``; one msign (the ``orthogonalize`` callable) per iteration.
* ``"fixed_point_reduced"``: the same iteration in the reduced variables, ``Y <- L_S⁻¹(KS - SK)`` with
  ``S = (M + ε²I)^{1/2}`` (no msign); the book shows it is the preconditioned gradient step ``Y <- Y - P⁻¹∇f_ε``
  with the preconditioner of the Newton solver (thm-fixed-point-pcg).
* ``"dual_ascent"`` (bernstein2025stiefel, the "manifold Muon" of thinking-machines-lab/manifolds; su2025dual):
  ``Φ = msign(G + WX)``, ``H = WᵀΦ + ΦᵀW``, ``X <- X - 2 α σ̄ (1 - k/K) H`` (``σ̄ = ‖G‖_F/√n`` makes ``α``
  scale-free; with σ̄ = 1 it is the published rule ``Λ <- Λ - α(1 - k/K)H`` for ``X = 2Λ``).

Each is an unchecked kernel on tall ``(..., m, n)`` batches returning
:class:`~svmuon.orthogonal.stiefel.reduction.StiefelSolution`; :func:`~svmuon.orthogonal.stiefel.api.stiefel_direction`
is the checked entry point.
"""

from __future__ import annotations

import math
import time
from typing import Callable

import torch

from svmuon.orthogonal.stiefel.hessian import _hessian_parts
from svmuon.orthogonal.stiefel.newton import _start
from svmuon.orthogonal.stiefel.reduction import (
    WORK_DTYPE,
    StiefelSolution,
    _assemble,
    _record,
    _reduce,
    _residual,
    _spectrum,
    _sym,
)

__all__ = ["fixed_point", "fixed_point_reduced", "dual_ascent"]


def _multiplier_start(A: torch.Tensor, X0: torch.Tensor | None, warm: torch.Tensor | None) -> torch.Tensor:
    cold = -_sym(A)  # the orthogonal group's multiplier (su2025orthogonal)
    if X0 is None:
        return cold
    X0 = X0.to(WORK_DTYPE)
    return X0 if warm is None else torch.where(warm[..., None, None], X0, cold)


def fixed_point(W: torch.Tensor, G: torch.Tensor, X0: torch.Tensor | None = None, *, tol: float, max_iter: int,
                orthogonalize: Callable[[torch.Tensor], torch.Tensor], warm: torch.Tensor | None = None,
                trace: list | None = None) -> StiefelSolution:
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
    return StiefelSolution(Phi, X, residual, it, bool((residual <= tol).all()), calls, 0, factorizations)


def dual_ascent(W: torch.Tensor, G: torch.Tensor, X0: torch.Tensor | None = None, *, tol: float, max_iter: int,
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
                           bool((residual <= tol).all()), calls, 0, 0)


def fixed_point_reduced(W: torch.Tensor, G: torch.Tensor, X0: torch.Tensor | None = None, *, tol: float,
                        max_iter: int, smoothing: float, warm: torch.Tensor | None = None,
                        trace: list | None = None, Y0: torch.Tensor | None = None) -> StiefelSolution:
    """Su's fixed point in the reduced variables: ``Y <- L_S⁻¹(KS - SK)``, ``S = (M + ε²I)^{1/2}``, which is
    the preconditioned gradient step ``Y <- Y - P⁻¹∇f_ε`` (``P = ½c`` in the eigenbasis; thm-fixed-point-pcg)."""
    red = _reduce(W, G)
    sigma2 = torch.where(red.sigma2 > 0, red.sigma2, torch.ones_like(red.sigma2))
    eps2 = (smoothing * smoothing) * sigma2
    Y = _start(red, X0, warm, Y0)
    sp = _spectrum(Y, red, eps2, None)
    factorizations = 1
    t0 = time.perf_counter()
    for iterations in range(max_iter + 1):
        b = sp.V.mT @ (Y + red.K) @ sp.V
        g = _sym(b / sp.s[..., None, :])
        r_norm = 2 * torch.linalg.matrix_norm(g)
        active = r_norm > tol
        _record(trace, t0, r_norm, iterations, 0, factorizations, 0)
        if iterations == max_iter or not bool(active.any()):
            break
        c, _ = _hessian_parts(sp.s)
        Y = torch.where(active[..., None, None], _sym(Y - sp.V @ (g / (0.5 * c)) @ sp.V.mT), Y)
        sp = _spectrum(Y, red, eps2, None)
        factorizations += 1
    X = Y - red.S
    Phi = _assemble(W, G, X, sp)
    residual = _residual(W, Phi)
    return StiefelSolution(Phi, X, residual, iterations, bool((residual <= tol).all()), 0, 0, factorizations,
                           red.tangent_norm, Y)
