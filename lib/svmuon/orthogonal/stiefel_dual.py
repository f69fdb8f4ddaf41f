"""The reduced dual of the Stiefel direction problem and Newton's method on it (the book's solver).

With ``A = WᵀG``, ``K = [A]_skew``, ``G⊥ = G - WA``, ``C = G⊥ᵀG⊥``, ``Y = [A]_sym + X`` and
``M = (Y + K)ᵀ(Y + K) + C``, the dual ``min over symmetric X of ‖G + WX‖_*`` is ``min_Y tr(M^{1/2})``
(thm-stiefel-reduction), an n × n problem; its smoothing ``f_ε(Y) = tr((M + ε²I)^{1/2})`` gives an exactly
tangent ``Φ_ε = (G + WX)(M + ε²I)^{-1/2}`` at every stationary point (eq-stiefel-smoothing-gap). This module
holds the reduction, the spectral factorisation of ``M``, the Hessian of ``f_ε`` (eq-stiefel-hessian), the
damped Newton–CG method with continuation in ε, the source's fixed point in the reduced variables
(thm-fixed-point-pcg), and :class:`~svmuon.orthogonal.stiefel_solvers.StiefelSolution`, what every solver
returns. The public entry points are in
:mod:`svmuon.orthogonal.stiefel_solvers`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

__all__ = ["WORK_DTYPE"]  # StiefelSolution is public through svmuon.orthogonal.stiefel_solvers

WORK_DTYPE = torch.float64  # the n × n solve; its cost is small next to the m × n products
_EPS_START = 1e-2  # continuation: the largest starting ε/σ̄
_EPS_SHRINK = 100.0  # continuation: ε drops by this factor per stage


@dataclass
class StiefelSolution:
    """What a Stiefel direction solver returns (tensors, or NumPy arrays for NumPy input).

    Attributes:
        Phi: ``(..., m, n)``, the direction (ascent: descend along ``-Phi``), dtype of ``G``.
        X: ``(..., n, n)`` symmetric multiplier with ``Phi ≈ msign(G + WX)``, float64 (the n × n work's dtype)
            whatever the dtype of ``G``.
        Y: ``(..., n, n)``, the reduced multiplier ``[WᵀG]_sym + X`` (thm-stiefel-reduction) where the solver
            forms it (``"newton"``, ``"fixed_point_reduced"``), else ``None``; float64 like ``X``. The optimum in ``Y`` depends on
            the tangent part of ``G`` only (``K`` and ``C``), so ``Y`` (pass it as ``Y0``), not ``X``, is the
            warm start for the next optimizer step: ``X`` also carries ``-[WᵀG]_sym``, which changes with
            every step of ``W`` and with the normal part of the update.
        residual: ``(...)``, ``‖WᵀΦ + ΦᵀW‖_F`` of the returned ``Phi``.
        iterations: outer iterations run (the most over the batch).
        converged: every residual <= ``tol``.
        msign_calls: calls of ``orthogonalize`` (0 for the reduced solvers).
        cg_iterations: Hessian-vector products (``"newton"``), else 0.
        factorizations: n × n eigendecompositions or SVDs.
        eig: ``(V, mu)`` with ``ΦᵀΦ = V diag(mu) Vᵀ`` (``V`` ``(..., n, n)``, float64) where the solver knows
            it (``"newton"``, ``"fixed_point_reduced"``), else ``None``; the retraction uses it.
        tangent_norm: ``(...)``, ``‖P_W(G)‖_F`` (the reduced solvers compute it on the way), else ``None``.
    """

    Phi: Any
    X: Any
    residual: Any
    iterations: int
    converged: bool
    msign_calls: int = 0
    cg_iterations: int = 0
    factorizations: int = 0
    eig: tuple[torch.Tensor, torch.Tensor] | None = None
    tangent_norm: Any = None
    Y: Any = None


# -- small kernels --------------------------------------------------------------------------------------------
def _sym(T: torch.Tensor) -> torch.Tensor:
    return (T + T.mT) / 2


def _skew(T: torch.Tensor) -> torch.Tensor:
    return (T - T.mT) / 2


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Frobenius inner product per matrix, shape ``(..., 1, 1)``."""
    return (a * b).sum(dim=(-2, -1), keepdim=True)


def _residual(W: torch.Tensor, Phi: torch.Tensor) -> torch.Tensor:
    """``‖WᵀΦ + ΦᵀW‖_F`` per matrix (the tangent residual), accumulated in at least float32."""
    T = W.mT @ Phi
    T = T if T.dtype in (torch.float32, torch.float64) else T.float()
    return torch.linalg.matrix_norm(T + T.mT)


def _real(dtype: torch.dtype) -> torch.dtype:
    return dtype if dtype in (torch.float32, torch.float64) else torch.float32


class _Reduced(NamedTuple):
    """The reduction of ``(W, G)`` (thm-stiefel-reduction), n × n parts in float64."""

    S: torch.Tensor  # [A]_sym
    K: torch.Tensor  # [A]_skew
    C: torch.Tensor  # G⊥ᵀG⊥
    Gp: torch.Tensor  # G⊥ = G - WA, (..., m, n), dtype of G
    sigma2: torch.Tensor  # ‖P_W(G)‖_F² / n, (..., 1, 1): the scale σ̄² of the problem
    tangent_norm: torch.Tensor  # ‖P_W(G)‖_F = (‖K‖_F² + ‖G⊥‖_F²)^{1/2}, (...)


def _reduce(W: torch.Tensor, G: torch.Tensor) -> _Reduced:
    """Three m × n × n products: ``A = WᵀG``, ``G⊥ = G - WA`` and ``C = G⊥ᵀG⊥``. ``G⊥`` is formed
    explicitly (not ``C = GᵀG - AᵀA``) so that a gradient almost normal to the manifold keeps an accurate
    tangent part (the optimizer's eps rule reads ``‖P_W(G)‖_F``)."""
    A = W.mT @ G
    Gp = G - W @ A
    C = _sym((Gp.mT @ Gp).to(WORK_DTYPE))
    A = A.to(WORK_DTYPE)
    n = W.shape[-1]
    K = _skew(A)
    trC = C.diagonal(dim1=-2, dim2=-1).sum(-1)
    tangent2 = _dot(K, K)[..., 0, 0] + trC
    # the scale of the problem is that of P_W(G): the normal part of G only shifts the multiplier
    sigma2 = tangent2[..., None, None] / n
    return _Reduced(_sym(A), K, C, Gp, sigma2, torch.sqrt(tangent2))


def _exact_factor(red: _Reduced) -> torch.Tensor:
    """``R`` with ``RᵀR = G⊥ᵀG⊥`` from a QR of ``G⊥`` (absolute accuracy ``u‖G‖``, not ``u‖G‖²``)."""
    return torch.linalg.qr(red.Gp.to(WORK_DTYPE), mode="r").R


class _Spectrum(NamedTuple):
    V: torch.Tensor  # eigenvectors of M, (..., n, n)
    lam: torch.Tensor  # eigenvalues of M (>= 0), (..., n)
    s: torch.Tensor  # sqrt(lam + eps²), (..., n)


def _spectrum(Y: torch.Tensor, red: _Reduced, eps2: torch.Tensor, R: torch.Tensor | None) -> _Spectrum:
    """Eigen-decomposition of ``M = (Y+K)ᵀ(Y+K) + C``: by ``eigh`` of M, or (``R`` given, ``RᵀR = C``) by the
    SVD of the stacked ``[Y + K; R]``, which resolves small eigenvalues to absolute accuracy ``u‖G‖`` instead
    of ``u‖G‖²`` (needed near a singular optimum, where ``s ≈ ε``)."""
    B = Y + red.K
    if R is None:
        lam, V = torch.linalg.eigh(B.mT @ B + red.C)
    else:
        _, sv, Vh = torch.linalg.svd(torch.cat([B, R], dim=-2), full_matrices=False)
        lam, V = sv * sv, Vh.mT
    lam = lam.clamp_min(0.0)
    return _Spectrum(V, lam, torch.sqrt(lam + eps2[..., 0]))


def _hessian_parts(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(c, d)`` with ``c_ij = 1/s_i + 1/s_j`` and ``d_ij = 1/((s_i + s_j) s_i s_j)`` (eq-stiefel-hessian)."""
    si, sj = s[..., :, None], s[..., None, :]
    c = 1.0 / si + 1.0 / sj
    d = 1.0 / ((si + sj) * si * sj)
    return c, d


def _hessian_vector(h: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor,
                    diag: torch.Tensor | None = None) -> torch.Tensor:
    """Hessian of ``f_ε`` applied to a symmetric ``h``, all in the eigenbasis of M (eq-stiefel-hessian):
    ``½ c∘h - ½ (T + Tᵀ)`` with ``E = hb + (hb)ᵀ``, ``F = d∘E``, ``T = F bᵀ``; ``diag`` replaces ``½c``
    (the damped system passes ``½(1 + μ)c``). Two n × n products and five elementwise passes."""
    E = h @ b
    F = (E + E.mT).mul_(d)
    T = F @ b.mT
    return torch.addcmul((T + T.mT).mul_(-0.5), 0.5 * c if diag is None else diag, h)


def _pcg(b: torch.Tensor, c: torch.Tensor, d: torch.Tensor, mu: torch.Tensor, rhs: torch.Tensor,
         active: torch.Tensor, forcing: torch.Tensor, max_cg: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Preconditioned CG for the damped Newton system ``(Hess + μP) x = rhs`` with ``P = ½c`` (the diagonal
    part of the Hessian, eq-stiefel-hessian), stopped when the preconditioned residual has dropped by
    ``forcing`` (per matrix). Returns ``(x, model, products)`` with ``model = -⟨rhs, x⟩ + ½⟨x, (Hess+μP)x⟩``
    (the damped quadratic model's change; ``-model`` is the predicted decrease)."""
    diag = (0.5 + 0.5 * mu) * c  # (1 + μ)P: the damped diagonal, which is also the preconditioner
    inv = 1.0 / diag
    hv = lambda h: _hessian_vector(h, b, c, d, diag)  # noqa: E731
    x = torch.zeros_like(rhs)
    r = rhs.clone()
    z = r * inv
    p = z.clone()
    rz = _dot(r, z)
    target = forcing * forcing * rz
    done = ~active[..., None, None]
    products = 0
    for _ in range(max_cg):
        Ap = hv(p)
        products += 1
        pAp = _dot(p, Ap)
        bad = ~(pAp > 0)  # rounding at a (numerically) singular Hessian
        done = done | bad
        alpha = torch.where(done, torch.zeros_like(rz), rz / torch.where(bad, torch.ones_like(pAp), pAp))
        x = x + alpha * p
        r = r - alpha * Ap
        z = r * inv
        rz_new = _dot(r, z)
        done = done | (rz_new <= target)
        if bool(done.all()):
            break
        beta = torch.where(done, torch.zeros_like(rz), rz_new / torch.where(rz > 0, rz, torch.ones_like(rz)))
        p = z + beta * p
        rz = rz_new
    # CG keeps its residual orthogonal to the search directions, so the model value is -½⟨rhs, x⟩; where
    # CG made no progress at all, take the preconditioned gradient step (the fixed point's) instead
    model = -0.5 * _dot(rhs, x)
    stuck = (_dot(x, x) == 0) & active[..., None, None]
    if bool(stuck.any()):
        x = torch.where(stuck, rhs * inv, x)
        model = torch.where(stuck, -_dot(rhs, x) + 0.5 * _dot(x, hv(x)), model)
        products += 1
    return x, model[..., 0, 0], products


def _start(red: _Reduced, X0: torch.Tensor | None, warm: torch.Tensor | None,
           Y0: torch.Tensor | None = None) -> torch.Tensor:
    """``Y₀`` (given), or ``[A]_sym + X0``, where warm (default everywhere if one is given), else ``0``
    (``X = -[A]_sym``, the orthogonal group's multiplier)."""
    if Y0 is not None:
        Y = Y0.to(WORK_DTYPE)
    elif X0 is None:
        return torch.zeros_like(red.S)
    else:
        Y = red.S + X0.to(WORK_DTYPE)
    return Y if warm is None else torch.where(warm[..., None, None], Y, torch.zeros_like(Y))


def _newton(W: torch.Tensor, G: torch.Tensor, X0: torch.Tensor | None, *, tol: float, max_iter: int,
            smoothing: float, max_cg: int, exact_residual: bool = True,
            warm: torch.Tensor | None = None, trace: list | None = None, rank_aware: bool = True,
            rank_rtol: float = 1e-6, Y0: torch.Tensor | None = None) -> StiefelSolution:
    """Damped Newton–CG on the smoothed reduced dual ``f_ε`` (eq-stiefel-smoothing), with continuation in ε.

    * Newton step: PCG on ``(Hess + μP)x = -∇f_ε`` in the eigenbasis of ``M`` (``_pcg``); the damping ``μ``
      is a Levenberg–Marquardt trust parameter (ratio test ``ρ`` = actual / predicted decrease: accept if
      ``ρ > 1e-4``; ``μ`` shrinks by 4 if ``ρ > 0.75``, grows to ``max(4μ, 0.01)`` if ``ρ < 0.25``). For
      large ``μ`` the step tends to the fixed point's preconditioned gradient step.
    * Continuation, where the start (or, later, once, an iterate) is near a singular ``M``
      (``√λ_min < 0.1 σ̄``): ``ε`` starts at ``σ̄ · clamp(r, smoothing, 1e-2)`` (``r`` the residual then, so a
      good warm start starts small) and drops by 100 whenever the residual is below ``ε/σ̄``, down to
      ``smoothing · σ̄``; a sharp (non-smooth) optimum is reached along the smooth path of ``f_ε``.
      Elsewhere ``ε = smoothing · σ̄`` throughout.
    * Stop: residual <= ``tol`` at the final ``ε``, or ``max_iter`` outer iterations.
    """
    red = _reduce(W, G)
    if rank_aware:
        from svmuon.orthogonal.stiefel_rank import deficient_rank

        A = red.S + red.K
        if deficient_rank(G, A.mT @ A + red.C, rank_rtol):  # rank-deficient G: the row-space reduction (prop-stiefel-rank)
            return _newton_deficient(W, G, X0, red, tol=tol, max_iter=max_iter, smoothing=smoothing, max_cg=max_cg,
                                     exact_residual=exact_residual, warm=warm, trace=trace, rank_rtol=rank_rtol,
                                     Y0=Y0)
    sigma2 = torch.where(red.sigma2 > 0, red.sigma2, torch.ones_like(red.sigma2))  # G = 0: Φ = 0 for any ε > 0
    Y = _start(red, X0, warm, Y0)
    eps_rel = torch.full(W.shape[:-2], smoothing, dtype=WORK_DTYPE, device=W.device)
    eps2 = lambda: (eps_rel * eps_rel)[..., None, None] * sigma2  # noqa: E731
    R = None
    sp = _spectrum(Y, red, eps2(), R)
    b = sp.V.mT @ (Y + red.K) @ sp.V
    r0 = 2 * torch.linalg.matrix_norm(_sym(b / sp.s[..., None, :]))
    factorizations = 1
    if X0 is not None or Y0 is not None:
        # a warm start whose residual is near its bound 2√n (far from the optimum: a stale or mis-scaled X0)
        # is kept only if its dual value beats the cold start's; from very far, damped Newton can stall
        suspect = r0 > 0.5 * math.sqrt(W.shape[-1])
        if bool(suspect.any()):
            cold = _spectrum(torch.zeros_like(Y), red, eps2(), R)
            factorizations += 1
            use = suspect & (cold.s.sum(-1) < sp.s.sum(-1))
            Y = torch.where(use[..., None, None], torch.zeros_like(Y), Y)
            sp = _Spectrum(*(torch.where(use[(...,) + (None,) * (a.dim() - use.dim())], a_cold, a)
                             for a, a_cold in zip(sp, cold)))
            b = sp.V.mT @ (Y + red.K) @ sp.V
            r0 = 2 * torch.linalg.matrix_norm(_sym(b / sp.s[..., None, :]))
    sigma = torch.sqrt(sigma2[..., 0, 0])
    # continuation only where the start is near a singular M (else ε = smoothing from the first step)
    cont = sp.lam.amin(dim=-1).sqrt() < 0.1 * sigma
    if W.dtype != WORK_DTYPE and bool(cont.any()):  # near-singular in float32: solve in float64 (see _in_float64)
        return _in_float64(W, G, X0, Y0, warm, tol=tol, max_iter=max_iter, smoothing=smoothing, max_cg=max_cg,
                           exact_residual=exact_residual, trace=trace)
    eps_rel = torch.where(cont, torch.clamp(torch.maximum(r0, eps_rel), max=max(_EPS_START, smoothing)), eps_rel)
    sp = _Spectrum(sp.V, sp.lam, torch.sqrt(sp.lam + eps2()[..., 0]))
    mu = torch.zeros_like(red.sigma2)
    unit = torch.finfo(WORK_DTYPE).eps
    products, iterations = 0, 0
    t0 = time.perf_counter()
    for iterations in range(max_iter + 1):
        if R is None and _needs_svd(sp, eps2(), unit):
            R = _exact_factor(red)
            red = red._replace(C=R.mT @ R)
            sp = _spectrum(Y, red, eps2(), R)
            factorizations += 1
        b = sp.V.mT @ (Y + red.K) @ sp.V
        g = _sym(b / sp.s[..., None, :])  # ∇f_ε in the eigenbasis: [WᵀΦ_ε]_sym
        r_norm = 2 * torch.linalg.matrix_norm(g)  # the tangent residual of Φ_ε(Y)
        late = ~cont & (sp.lam.amin(dim=-1).sqrt() < 0.1 * sigma) & (r_norm > tol)
        if bool(late.any()) and W.dtype != WORK_DTYPE:  # near-singular after all, in float32: restart in float64
            return _in_float64(W, G, X0, Y0, warm, tol=tol, max_iter=max_iter, smoothing=smoothing, max_cg=max_cg,
                               exact_residual=exact_residual, trace=trace)
        if bool(late.any()):  # heading for a singular optimum after all: continue from ε ~ residual, once
            cont = cont | late
            eps_rel = torch.where(late, torch.clamp(torch.maximum(r_norm, eps_rel), max=max(_EPS_START, smoothing)), eps_rel)
            sp = _Spectrum(sp.V, sp.lam, torch.sqrt(sp.lam + eps2()[..., 0]))
            g = _sym(b / sp.s[..., None, :])
            r_norm = 2 * torch.linalg.matrix_norm(g)
        shrink = (r_norm <= eps_rel) & (eps_rel > smoothing)
        if bool(shrink.any()):  # next stage of the continuation for those matrices
            eps_rel = torch.where(shrink, torch.clamp(eps_rel / _EPS_SHRINK, min=smoothing), eps_rel)
            mu = torch.where(shrink[..., None, None], torch.zeros_like(mu), mu)
            s = torch.sqrt(sp.lam + eps2()[..., 0])
            sp = _Spectrum(sp.V, sp.lam, s)
            g = _sym(b / s[..., None, :])
            r_norm = 2 * torch.linalg.matrix_norm(g)
        active = (r_norm > tol) | (eps_rel > smoothing)
        _record(trace, t0, r_norm, iterations, 0, factorizations, products)
        if iterations == max_iter or not bool(active.any()):
            break
        c, d = _hessian_parts(sp.s)
        # inexact Newton: relative CG accuracy r (quadratic convergence). Where M stays well conditioned (no
        # continuation) the preconditioner is good and CG need not be finer than the next residual needs to
        # reach tol: the last step then costs a few products instead of ~15. Near a singular optimum a loose
        # CG step loses the quadratic rate (measured: 26 iterations became 50+ on a 7×5 instance), so there
        # the accuracy stays r.
        relaxed = torch.where(cont, r_norm, torch.maximum(r_norm, 0.5 * tol / r_norm))
        forcing = torch.clamp(relaxed, max=0.1)[..., None, None]
        f0 = sp.s.sum(-1)
        pending = active.clone()
        for _ in range(20):  # trust (damping) adjustments; usually the first step is accepted
            x, model, k = _pcg(b, c, d, mu, -g, pending, forcing, max_cg)
            products += k
            trial_Y = _sym(Y + sp.V @ x @ sp.V.mT)  # re-symmetrised: rounding of a large step is not symmetric
            trial = _spectrum(trial_Y, red, eps2(), R)
            factorizations += 1
            actual = f0 - trial.s.sum(-1)
            predicted = -model
            rho = actual / torch.where(predicted > 0, predicted, torch.ones_like(predicted))
            rho = torch.where(predicted > 0, rho, -torch.ones_like(rho))
            negligible = (predicted.abs() <= 1e3 * unit * f0) & (actual >= -1e3 * unit * f0)
            accept = pending & ((rho > 1e-4) | negligible)
            m3 = pending[..., None, None]
            mu = torch.where(m3 & (rho > 0.75)[..., None, None], torch.where(mu > 1e-3, mu / 4, torch.zeros_like(mu)), mu)
            mu = torch.where(m3 & (rho < 0.25)[..., None, None], torch.clamp(4 * mu, min=1e-2), mu)
            a2, a1 = accept[..., None, None], accept[..., None]
            Y = torch.where(a2, trial_Y, Y)
            sp = _Spectrum(torch.where(a2, trial.V, sp.V), torch.where(a1, trial.lam, sp.lam),
                           torch.where(a1, trial.s, sp.s))
            pending = pending & ~accept
            if not bool(pending.any()):
                break
    X = Y - red.S
    Sinv = (sp.V / sp.s[..., None, :]) @ sp.V.mT  # (M + ε²I)^{-1/2}
    dt = G.dtype
    Phi = G @ Sinv.to(dt) + W @ (X @ Sinv).to(dt)  # (G + WX)(M + ε²I)^{-1/2}
    mu_phi = sp.lam / (sp.lam + eps2()[..., 0])  # eigenvalues of ΦᵀΦ = S⁻¹MS⁻¹
    near_singular = bool(cont.any())
    if near_singular:
        # M near-singular: (M + ε²I)^{-1/2} multiplies the rounding of the reduction (and a float32 W's WᵀW - I)
        # by up to 1/ε², so ‖Φ‖₂ <= 1 and the n × n residual no longer hold for the assembled Φ (measured in
        # float32: ‖Φ‖₂ up to 1.3). Measure ‖Φ‖₂ and divide by it where it exceeds 1 (Φ stays as tangent as
        # it was), and report the exact residual. Only here: elsewhere the assembly is consistent.
        top = torch.linalg.eigvalsh(_sym((Phi.mT @ Phi).to(WORK_DTYPE))).amax(dim=-1).clamp_min(1.0)
        Phi = Phi / torch.sqrt(top).to(dt)[..., None, None]
        mu_phi = mu_phi / top[..., None]
    # the exact residual costs one more m × n × n product; the hot path reads the n × n value 2‖∇f_ε‖_F
    residual = _residual(W, Phi) if exact_residual or near_singular else r_norm.to(_real(dt))
    return StiefelSolution(Phi, X, residual, iterations, bool((residual <= tol).all()), 0, products,
                           factorizations, (sp.V, mu_phi), red.tangent_norm, Y)


def _in_float64(W: torch.Tensor, G: torch.Tensor, X0: torch.Tensor | None, Y0: torch.Tensor | None,
                warm: torch.Tensor | None, *, tol: float, max_iter: int, smoothing: float, max_cg: int,
                exact_residual: bool, trace: list | None) -> StiefelSolution:
    """Newton in float64 for a float32 problem whose ``M`` is near-singular, returned in float32.

    There ``(M + ε²I)^{-1/2}`` multiplies the reduction's float32 rounding, and the float32 point's
    ``WᵀW - I`` (about 1e-7), by up to ``1/ε²``: the float32 iteration stalls far from the optimum (measured on
    random float32 instances with singular optima: residuals up to 0.7 after 50 iterations, values 20 % off).
    One Björck step makes ``W`` orthonormal in float64; the direction is exact there and tangent at the float32
    ``W`` to its rounding."""
    dt = G.dtype
    W64 = W.to(WORK_DTYPE)
    W64 = W64 + 0.5 * W64 @ (torch.eye(W64.shape[-1], dtype=WORK_DTYPE, device=W64.device) - W64.mT @ W64)
    sol = _newton(W64, G.to(WORK_DTYPE), X0, tol=tol, max_iter=max_iter, smoothing=smoothing, max_cg=max_cg,
                  exact_residual=False, warm=warm, trace=trace, rank_aware=False, Y0=Y0)
    sol.Phi = sol.Phi.to(dt)
    sol.residual = _residual(W, sol.Phi) if exact_residual else sol.residual.to(_real(dt))
    sol.converged = bool((sol.residual <= tol).all())
    return sol


def _newton_deficient(W: torch.Tensor, G: torch.Tensor, X0: torch.Tensor | None, red: _Reduced, *, tol: float,
                      max_iter: int, smoothing: float, max_cg: int, exact_residual: bool,
                      warm: torch.Tensor | None, trace: list | None, rank_rtol: float,
                      Y0: torch.Tensor | None = None) -> StiefelSolution:
    """Matrix by matrix: the row-space reduction where it applies (:mod:`svmuon.orthogonal.stiefel_rank`),
    else the general Newton; results stacked back into the batch."""
    from svmuon.orthogonal.stiefel_rank import solve_deficient

    batch = W.shape[:-2]
    Wf, Gf = W.reshape(-1, *W.shape[-2:]), G.reshape(-1, *G.shape[-2:])
    if Y0 is not None:  # the row-space reduction takes X: X0 = Y0 - [WᵀG]_sym (red.S, already formed)
        X0 = Y0.to(WORK_DTYPE) - red.S
    X0f = None if X0 is None else X0.reshape(-1, *X0.shape[-2:])
    warmf = None if warm is None else warm.reshape(-1)
    opts = dict(tol=tol, max_iter=max_iter, smoothing=smoothing, max_cg=max_cg, exact_residual=exact_residual)
    sols = []
    for i in range(Wf.shape[0]):
        x0 = None if X0f is None or (warmf is not None and not bool(warmf[i])) else X0f[i]
        sol = solve_deficient(Wf[i], Gf[i], x0, trace=trace, rank_rtol=rank_rtol, **opts)
        if sol is None:
            sol = _newton(Wf[i], Gf[i], x0, trace=trace, rank_aware=False, **opts)
        sols.append(sol)
    stack = lambda xs: torch.stack(xs).reshape(tuple(batch) + tuple(xs[0].shape))  # noqa: E731
    eig = (stack([s.eig[0] for s in sols]), stack([s.eig[1] for s in sols]))
    out = StiefelSolution(stack([s.Phi for s in sols]), stack([s.X.to(WORK_DTYPE) for s in sols]),
                          stack([s.residual for s in sols]), max(s.iterations for s in sols),
                          all(s.converged for s in sols), 0, sum(s.cg_iterations for s in sols),
                          sum(s.factorizations for s in sols), eig, red.tangent_norm)
    out.Y = out.X + red.S
    return out


def _reduced_fixed_point(W: torch.Tensor, G: torch.Tensor, X0: torch.Tensor | None, *, tol: float,
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
    Sinv = (sp.V / sp.s[..., None, :]) @ sp.V.mT
    Phi = G @ Sinv.to(G.dtype) + W @ (X @ Sinv).to(G.dtype)
    residual = _residual(W, Phi)
    return StiefelSolution(Phi, X, residual, iterations, bool((residual <= tol).all()), 0, 0, factorizations,
                           (sp.V, sp.lam / (sp.lam + eps2[..., 0])), red.tangent_norm, Y)


def _record(trace: list | None, t0: float, residual: torch.Tensor, iteration: int, msign_calls: int,
            factorizations: int, products: int) -> None:
    """Append one point of a convergence history (only when the caller asked for one: it synchronises)."""
    if trace is not None:
        trace.append({"iteration": iteration, "seconds": time.perf_counter() - t0,
                      "residual": float(residual.max()), "msign_calls": msign_calls,
                      "factorizations": factorizations, "cg_products": products})


def _needs_svd(sp: _Spectrum, eps2: torch.Tensor, unit: float) -> bool:
    """True if some ``s² = λ + ε²`` sits within 1e6 rounding units of ``λ_max`` (eigh loses it there)."""
    floor = 1e6 * unit * sp.lam.amax(dim=-1)
    return bool(((sp.lam.amin(dim=-1) + eps2[..., 0, 0]) < floor).any())


