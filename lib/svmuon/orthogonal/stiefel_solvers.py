"""The steepest direction on the Stiefel manifold: the reduced dual and three ways to solve it.

On ``St(m, n) = {W ∈ R^{m×n} : WᵀW = I_n}`` (m >= n; the source articles write St(n, m)) the unit
steepest-ascent direction under the spectral norm solves (book equation ``eq-stiefel-problem``)::

    max tr(GᵀΦ)   s.t.   ‖Φ‖₂ <= 1,   WᵀΦ + ΦᵀW = 0.

Its Lagrange dual is ``min over symmetric X of ‖G + WX‖_*`` (``eq-stiefel-dual``, strong duality holds).
The book's reduction (theorem ``thm-stiefel-reduction``) makes that an n × n problem: with

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
  ``M``, a backtracking line search, a warm start ``X0`` (the previous step's multiplier) and the
  residual as stopping rule. No msign; per iteration one n × n eigendecomposition (or, near singular
  optima, one SVD of the stacked ``[Y + K; R]``, ``RᵀR = C``) and a few n × n products.
* ``"fixed_point"`` (su2025stiefel): ``Φ = msign(G + WX)``, ``Q = (G + WX)ᵀΦ``, then ``X`` from the
  Lyapunov equation ``QX + XQ = -2[QA]_sym``; one msign (the ``orthogonalize`` callable) per iteration.
* ``"fixed_point_reduced"``: the same iteration written in the reduced variables (no msign). The book
  shows it is the preconditioned gradient step ``Y <- Y - P⁻¹∇f`` with the preconditioner of ``"newton"``.
* ``"dual_ascent"`` (bernstein2025stiefel, the "manifold Muon" of thinking-machines-lab/manifolds):
  ``Φ = msign(G + WX)``, ``H = WᵀΦ + ΦᵀW``, ``X <- X - 2 α σ̄ (1 - k/K) H`` (``σ̄ = ‖G‖_F/√n`` makes ``α``
  scale-free; with σ̄ = 1 it is the published rule ``Λ <- Λ - α(1 - k/K)H`` for ``X = 2Λ``).

Everything is batched over leading dimensions; the n × n work runs in float64 (cheap next to the m × n
products, which run in the input's dtype).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import torch

from svmuon._validation import as_tensor, check_finite, check_float, check_int, check_matrix

__all__ = ["StiefelSolution", "stiefel_direction", "reduced_dual", "tangent_residual", "METHODS"]

METHODS = ("newton", "fixed_point", "fixed_point_reduced", "dual_ascent")
_DEFAULT_MAX_ITER = {"newton": 50, "fixed_point": 100, "fixed_point_reduced": 200, "dual_ascent": 100}
WORK_DTYPE = torch.float64  # the n × n solve; its cost is small next to the m × n products


@dataclass
class StiefelSolution:
    """What a Stiefel direction solver returns (tensors, or NumPy arrays for NumPy input).

    Attributes:
        Phi: ``(..., m, n)``, the direction (ascent: descend along ``-Phi``), dtype of ``G``.
        X: ``(..., n, n)`` symmetric multiplier with ``Phi ≈ msign(G + WX)``; pass it as ``X0`` to warm start.
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


def _default_orthogonalize() -> Callable[[torch.Tensor], torch.Tensor]:
    from svmuon.orthogonal.msign import Orthogonalizer

    return Orthogonalizer("svd")


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


def _hessian_vector(h: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """Hessian of ``f_ε`` applied to a symmetric ``h``, all in the eigenbasis of M (eq-stiefel-hessian):
    ``½ c∘h - ½ (T + Tᵀ)`` with ``E = hb + (hb)ᵀ``, ``F = d∘E``, ``T = F bᵀ``."""
    E = h @ b
    F = d * (E + E.mT)
    T = F @ b.mT
    return 0.5 * c * h - 0.5 * (T + T.mT)


def _pcg(b: torch.Tensor, c: torch.Tensor, d: torch.Tensor, mu: torch.Tensor, rhs: torch.Tensor,
         active: torch.Tensor, forcing: torch.Tensor, max_cg: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Preconditioned CG for the damped Newton system ``(Hess + μP) x = rhs`` with ``P = ½c`` (the diagonal
    part of the Hessian, eq-stiefel-hessian), stopped when the preconditioned residual has dropped by
    ``forcing`` (per matrix). Returns ``(x, model, products)`` with ``model = -⟨rhs, x⟩ + ½⟨x, (Hess+μP)x⟩``
    (the damped quadratic model's change; ``-model`` is the predicted decrease)."""
    P = 0.5 * c
    hv = lambda h: _hessian_vector(h, b, c, d) + mu * P * h  # noqa: E731
    x = torch.zeros_like(rhs)
    r = rhs.clone()
    z = r / ((1 + mu) * P)
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
        z = r / ((1 + mu) * P)
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
        x = torch.where(stuck, rhs / ((1 + mu) * P), x)
        model = torch.where(stuck, -_dot(rhs, x) + 0.5 * _dot(x, hv(x)), model)
        products += 1
    return x, model[..., 0, 0], products


def _start(red: _Reduced, X0: torch.Tensor | None, warm: torch.Tensor | None) -> torch.Tensor:
    """``Y₀ = [A]_sym + X0`` where warm (default everywhere if ``X0`` is given), else ``0`` (``X = -[A]_sym``)."""
    if X0 is None:
        return torch.zeros_like(red.S)
    Y = red.S + X0.to(WORK_DTYPE)
    return Y if warm is None else torch.where(warm[..., None, None], Y, torch.zeros_like(Y))


def _newton(W: torch.Tensor, G: torch.Tensor, X0: torch.Tensor | None, *, tol: float, max_iter: int,
            smoothing: float, max_cg: int, exact_residual: bool = True,
            warm: torch.Tensor | None = None, trace: list | None = None, rank_aware: bool = True) -> StiefelSolution:
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
        if deficient_rank(G, A.mT @ A + red.C):  # a rank-deficient G: the row-space reduction (prop-stiefel-rank)
            return _newton_deficient(W, G, X0, red, tol=tol, max_iter=max_iter, smoothing=smoothing, max_cg=max_cg,
                                     exact_residual=exact_residual, warm=warm, trace=trace)
    sigma2 = torch.where(red.sigma2 > 0, red.sigma2, torch.ones_like(red.sigma2))  # G = 0: Φ = 0 for any ε > 0
    Y = _start(red, X0, warm)
    eps_rel = torch.full(W.shape[:-2], smoothing, dtype=WORK_DTYPE, device=W.device)
    eps2 = lambda: (eps_rel * eps_rel)[..., None, None] * sigma2  # noqa: E731
    R = None
    sp = _spectrum(Y, red, eps2(), R)
    b = sp.V.mT @ (Y + red.K) @ sp.V
    r0 = 2 * torch.linalg.matrix_norm(_sym(b / sp.s[..., None, :]))
    sigma = torch.sqrt(sigma2[..., 0, 0])
    # continuation only where the start is near a singular M (else ε = smoothing from the first step)
    cont = sp.lam.amin(dim=-1).sqrt() < 0.1 * sigma
    eps_rel = torch.where(cont, torch.clamp(torch.maximum(r0, eps_rel), max=max(1e-2, smoothing)), eps_rel)
    sp = _Spectrum(sp.V, sp.lam, torch.sqrt(sp.lam + eps2()[..., 0]))
    mu = torch.zeros_like(red.sigma2)
    unit = torch.finfo(WORK_DTYPE).eps
    factorizations, products, iterations = 1, 0, 0
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
        if bool(late.any()):  # heading for a singular optimum after all: continue from ε ~ residual, once
            cont = cont | late
            eps_rel = torch.where(late, torch.clamp(torch.maximum(r_norm, eps_rel), max=max(1e-2, smoothing)), eps_rel)
            sp = _Spectrum(sp.V, sp.lam, torch.sqrt(sp.lam + eps2()[..., 0]))
            g = _sym(b / sp.s[..., None, :])
            r_norm = 2 * torch.linalg.matrix_norm(g)
        shrink = (r_norm <= eps_rel) & (eps_rel > smoothing)
        if bool(shrink.any()):  # next stage of the continuation for those matrices
            eps_rel = torch.where(shrink, torch.clamp(eps_rel / 100, min=smoothing), eps_rel)
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
        forcing = torch.clamp(r_norm, max=0.1)[..., None, None]  # quadratic: ‖step error‖ ~ r²
        f0 = sp.s.sum(-1)
        pending = active.clone()
        for _ in range(20):  # trust (damping) adjustments; usually the first step is accepted
            x, model, k = _pcg(b, c, d, mu, -g, pending, forcing, max_cg)
            products += k
            trial_Y = Y + sp.V @ x @ sp.V.mT
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
    # the exact residual costs one more m × n × n product; the hot path reads the n × n value 2‖∇f_ε‖_F
    residual = _residual(W, Phi) if exact_residual else r_norm.to(_real(dt))
    mu_phi = sp.lam / (sp.lam + eps2()[..., 0])  # eigenvalues of ΦᵀΦ = S⁻¹MS⁻¹
    return StiefelSolution(Phi, X, residual, iterations, bool((residual <= tol).all()), 0, products,
                           factorizations, (sp.V, mu_phi), red.tangent_norm)


def _newton_deficient(W: torch.Tensor, G: torch.Tensor, X0: torch.Tensor | None, red: _Reduced, *, tol: float,
                      max_iter: int, smoothing: float, max_cg: int, exact_residual: bool,
                      warm: torch.Tensor | None, trace: list | None) -> StiefelSolution:
    """Matrix by matrix: the row-space reduction where it applies (:mod:`svmuon.orthogonal.stiefel_rank`),
    else the general Newton; results stacked back into the batch."""
    from svmuon.orthogonal.stiefel_rank import solve_deficient

    batch = W.shape[:-2]
    Wf, Gf = W.reshape(-1, *W.shape[-2:]), G.reshape(-1, *G.shape[-2:])
    X0f = None if X0 is None else X0.reshape(-1, *X0.shape[-2:])
    warmf = None if warm is None else warm.reshape(-1)
    opts = dict(tol=tol, max_iter=max_iter, smoothing=smoothing, max_cg=max_cg, exact_residual=exact_residual)
    sols = []
    for i in range(Wf.shape[0]):
        x0 = None if X0f is None or (warmf is not None and not bool(warmf[i])) else X0f[i]
        sol = solve_deficient(Wf[i], Gf[i], x0, trace=trace, **opts)
        if sol is None:
            sol = _newton(Wf[i], Gf[i], x0, trace=trace, rank_aware=False, **opts)
        sols.append(sol)
    stack = lambda xs: torch.stack(xs).reshape(tuple(batch) + tuple(xs[0].shape))  # noqa: E731
    eig = (stack([s.eig[0] for s in sols]), stack([s.eig[1] for s in sols]))
    out = StiefelSolution(stack([s.Phi for s in sols]), stack([s.X.to(WORK_DTYPE) for s in sols]),
                          stack([s.residual for s in sols]), max(s.iterations for s in sols),
                          all(s.converged for s in sols), 0, sum(s.cg_iterations for s in sols),
                          sum(s.factorizations for s in sols), eig, red.tangent_norm)
    return out


def _reduced_fixed_point(W: torch.Tensor, G: torch.Tensor, X0: torch.Tensor | None, *, tol: float,
                         max_iter: int, smoothing: float, warm: torch.Tensor | None = None,
                         trace: list | None = None) -> StiefelSolution:
    """Su's fixed point in the reduced variables: ``Y <- L_S⁻¹(KS - SK)``, ``S = (M + ε²I)^{1/2}``, which is
    the preconditioned gradient step ``Y <- Y - P⁻¹∇f_ε`` (``P = ½c`` in the eigenbasis; thm-fixed-point-pcg)."""
    red = _reduce(W, G)
    sigma2 = torch.where(red.sigma2 > 0, red.sigma2, torch.ones_like(red.sigma2))
    eps2 = (smoothing * smoothing) * sigma2
    Y = _start(red, X0, warm)
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
        Y = torch.where(active[..., None, None], Y - sp.V @ (g / (0.5 * c)) @ sp.V.mT, Y)
        sp = _spectrum(Y, red, eps2, None)
        factorizations += 1
    X = Y - red.S
    Sinv = (sp.V / sp.s[..., None, :]) @ sp.V.mT
    Phi = G @ Sinv.to(G.dtype) + W @ (X @ Sinv).to(G.dtype)
    residual = _residual(W, Phi)
    return StiefelSolution(Phi, X, residual, iterations, bool((residual <= tol).all()), 0, 0, factorizations,
                           (sp.V, sp.lam / (sp.lam + eps2[..., 0])), red.tangent_norm)


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
          trace: list | None = None) -> StiefelSolution:
    """The unchecked kernel behind :func:`stiefel_direction` (tall ``(..., m, n)`` tensors, same shape).
    ``exact_residual=False`` lets ``"newton"`` report its n × n residual ``2‖∇f_ε‖_F`` (which leaves out the
    rounding of assembling ``Φ``) and save one m × n × n product. ``warm`` (bool ``(...)``): use ``X0`` only
    where True (the cold start elsewhere). ``trace``: a list that receives one dict per iteration (seconds
    since the start, the largest residual, msign calls, factorizations, CG products); it synchronises."""
    if max_iter is None:
        max_iter = _DEFAULT_MAX_ITER[method]
    if method == "newton":
        return _newton(W, G, X0, tol=tol, max_iter=max_iter, smoothing=smoothing, max_cg=max_cg,
                       exact_residual=exact_residual, warm=warm, trace=trace)
    if method == "fixed_point_reduced":
        return _reduced_fixed_point(W, G, X0, tol=tol, max_iter=max_iter, smoothing=smoothing, warm=warm, trace=trace)
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
                      trace: list | None = None) -> StiefelSolution:
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
        orthogonalize: ``Z -> msign(Z)`` used by ``"fixed_point"`` and ``"dual_ascent"`` (default: exact,
            by SVD), e.g. an :class:`~svmuon.orthogonal.msign.Orthogonalizer`.
        smoothing: ``ε / σ̄`` of the smoothed dual (``"newton"``, ``"fixed_point_reduced"``), with
            ``σ̄ = ‖P_W(G)‖_F/√n`` the root-mean-square singular value of the tangent part of ``G`` (the
            normal part only shifts the multiplier).
        max_cg: Hessian-vector products per Newton iteration at most.
        alpha: dual-ascent step (in units of ``σ̄``), as published.
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
    X0t = None
    if X0 is not None:
        X0t, _ = as_tensor(X0, "X0")
        check_float(X0t, "X0", (torch.float32, torch.float64))
        check_matrix(X0t, "X0", square=True)
        check_finite(X0t, "X0")
        n = Wt.shape[-1]
        if X0t.shape[-1] != n:
            raise ValueError(f"X0 must be (..., {n}, {n}) for W of shape {tuple(Wt.shape)}, got {tuple(X0t.shape)}")
        X0t = _sym(X0t.to(WORK_DTYPE)).expand(*Wt.shape[:-2], n, n)
    if trace is not None and not isinstance(trace, list):
        raise TypeError(f"trace must be None or a list, got {type(trace).__name__}")
    out = solve(Wt, Gt, method=method, tol=tol, max_iter=max_iter, X0=X0t, orthogonalize=orthogonalize,
                smoothing=smoothing, max_cg=max_cg, alpha=alpha, trace=trace)
    if was_numpy:
        out.Phi, out.X, out.residual = out.Phi.numpy(), out.X.numpy(), out.residual.numpy()
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
