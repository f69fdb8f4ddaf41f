"""Rank-deficient gradients on St(m, n): reduce to the row space of G, solve there, complete in its null space.

A wrapper around any exact solver (:func:`with_rank_reduction`). Real gradients are often rank-deficient (a batch
smaller than the layer, inputs that are constant, units that never fire); then the reduced dual has a non-smooth
optimum (``G + WX`` loses rank) and the smoothed Newton method crawls. The book's proposition ``prop-stiefel-rank``:
with ``Q = [Q_R, Q_N]`` orthonormal, ``Q_R`` spanning the row space of ``G`` (rank r), ``W_R = WQ_R`` (a point of
St(m, r)), ``W_N = WQ_N`` and ``G_R = GQ_R``,

* the optimal values agree: ``max over St(m, n) = max over St(m, r)`` for ``(W_R, G_R)``, whose dual is
  smooth for a generic full-rank ``G_R``;
* if ``Φ_R`` solves the reduced problem, ``Φ = Φ_R Q_Rᵀ + Φ_N Q_Nᵀ`` is optimal for every ``Φ_N`` with
  ``Φ_RᵀΦ_N = 0``, ``W_RᵀΦ_N = -Φ_RᵀW_N``, ``W_NᵀΦ_N`` skew and ``‖Φ_N‖₂ <= 1``. With ``a = W_RᵀΦ_R``,
  ``b = W_NᵀΦ_R``, ``P = Φ_R - W_R a - W_N b`` and ``D = PᵀP``, these are ``Φ_N = -W_R bᵀ + W_N β + P Λ`` with
  ``β`` skew and ``bᵀβ + DΛ = -abᵀ``; the completion of least Frobenius norm has ``β = [bΛ]_skew`` and
  ``DΛ + bᵀ[bΛ]_skew = -abᵀ`` (a positive semidefinite system in Λ, solved by CG). ``‖Φ‖₂`` is checked on the
  assembled ``ΦᵀΦ``; a completion that fails the check is refused and the caller's full solver decides.

Treating singular values below ``rank_rtol · σ_max`` as zero solves the problem for a nearby ``G'``: the optimal
value is 1-Lipschitz in the nuclear norm, so it changes by at most the sum ``δ`` of the discarded singular values,
and the direction returned is within ``2δ`` of optimal for ``G`` (the chapter's section "Training with it").
"""

from __future__ import annotations

from typing import Callable

import torch

from svmuon.orthogonal.stiefel.reduction import WORK_DTYPE, StiefelSolution, _real, _residual, _skew, _sym

__all__ = ["RANK_RTOL", "deficient_rank", "solve_deficient", "with_rank_reduction"]

RANK_RTOL = 1e-6  # default: singular values of G below RANK_RTOL · σ_max count as zero (fp32 rounding ~1e-7)

Solver = Callable[..., StiefelSolution]  # (W, G, X0, *, tol, max_iter) -> StiefelSolution


def deficient_rank(G: torch.Tensor, gram: torch.Tensor, rank_rtol: float = RANK_RTOL) -> bool:
    """Cheap pre-check (no sync beyond the result): could ``G`` have a singular value below ``rank_rtol σ_max``?
    ``gram`` is ``GᵀG`` in float64 (from the reduction's products); a Cholesky of ``gram - t tr(gram) I`` with
    ``t = max(1e-6, 10 rank_rtol²)`` fails iff some eigenvalue is below ``t tr`` (loose on purpose: the rank
    itself is then decided in float64)."""
    n = gram.shape[-1]
    shift = max(1e-6, 10 * rank_rtol * rank_rtol) * gram.diagonal(dim1=-2, dim2=-1).sum(-1)[..., None, None]
    _, info = torch.linalg.cholesky_ex(gram - shift * torch.eye(n, dtype=gram.dtype, device=gram.device))
    return bool((info > 0).any())


def _row_space(G: torch.Tensor, rank_rtol: float) -> tuple[int, torch.Tensor]:
    """``(r, Q)`` for a 2-D ``G``: numerical rank at ``rank_rtol`` and eigenvectors of ``GᵀG`` (float64 products),
    largest first."""
    G64 = G.to(WORK_DTYPE)
    lam, Q = torch.linalg.eigh(G64.mT @ G64)
    lam, Q = lam.flip(-1), Q.flip(-1)
    top = float(lam[0]) if lam.numel() else 0.0
    r = int((lam > (rank_rtol**2) * top).sum()) if top > 0 else 0
    return r, Q


def _complete_null(WR: torch.Tensor, WN: torch.Tensor, PR: torch.Tensor, max_cg: int = 500) -> torch.Tensor:
    """The least-Frobenius-norm completion ``Φ_N`` (module docstring), float64, by CG on the PSD system."""
    a, b = WR.mT @ PR, WN.mT @ PR
    P = PR - WR @ a - WN @ b
    D = P.mT @ P
    R0 = -a @ b.mT
    op = lambda L: D @ L + b.mT @ _skew(b @ L)  # noqa: E731  the PSD normal operator on r × q matrices
    L, r = torch.zeros_like(R0), R0.clone()
    p, rr = r.clone(), float((r * r).sum())
    stop = (1e-14 * float(R0.abs().max()) * R0.numel() ** 0.5) ** 2
    for _ in range(max_cg):
        if rr <= stop:
            break
        Ap = op(p)
        pAp = float((p * Ap).sum())
        if pAp <= 0:
            break
        alpha = rr / pAp
        L, r = L + alpha * p, r - alpha * Ap
        rr_new = float((r * r).sum())
        p, rr = r + (rr_new / rr) * p, rr_new
    return -WR @ b.mT + WN @ _skew(b @ L) + P @ L


def _checked_completion(W64, QR, QN, WR, WN, red: StiefelSolution, tol: float):  # noqa: ANN001, ANN202
    """``(Φ, μ_max, consistent, reached)`` for a reduced solution: the completion, made tangent, with the largest
    eigenvalue of the assembled ``ΦᵀΦ`` and whether the completion's system was consistent (tangent up to the
    reduced solve's accuracy ``reached``; e.g. m = n with D = 0 is not)."""
    Phi64 = red.Phi @ QR.mT + _complete_null(WR, WN, red.Phi) @ QN.mT
    # what the reduced direction reached, measured on Φ_R itself: a float32 point (orthonormal to ~1e-7) makes it
    # exceed the n × n estimate by the error of WᵀW = I times ‖(M + ε²I)^{-1/2}‖, up to 1e-4 (measured)
    reached = max(float(red.residual.max()), 2 * float(torch.linalg.matrix_norm(_sym(WR.mT @ red.Phi))))
    slack = max(tol, reached, 1e-9)
    raw = _sym(W64.mT @ Phi64)
    consistent = 2 * float(torch.linalg.matrix_norm(raw)) <= 10 * slack
    Phi64 = Phi64 - W64 @ raw  # rounding of PΛ leaves a small tangent residual where Λ is large: removed
    top = float(torch.linalg.eigvalsh(_sym(Phi64.mT @ Phi64)).max())
    return Phi64, top, consistent, reached, slack


def solve_deficient(W: torch.Tensor, G: torch.Tensor, X0: torch.Tensor | None, *, solve_reduced: Solver,
                    tol: float, max_iter: int, exact_residual: bool, rank_rtol: float = RANK_RTOL
                    ) -> StiefelSolution | None:
    """The reduced solve plus the completion for a 2-D rank-deficient ``G``; ``None`` if ``G`` has full numerical
    rank or the completed ``Φ`` has ``‖Φ‖₂² > 1 + 1e-6`` even after a second reduced solve to ``1e-12`` (at most 5
    more iterations; the caller then runs its full solver). Between 1 and that, ``Φ`` is divided by ``‖Φ‖₂``.
    The reduced solve and the completion run in float64: where ``D = PᵀP`` is singular (``m - n < r``) the
    completion amplifies any error of ``Φ_R`` (measured: by up to ~1e5)."""
    r, Q = _row_space(G, rank_rtol)
    n = W.shape[-1]
    if r == n:
        return None
    dt, dev = G.dtype, G.device
    if r == 0:
        zero = torch.zeros((), dtype=_real(dt), device=dev)
        return StiefelSolution(torch.zeros_like(G), torch.zeros(n, n, dtype=WORK_DTYPE, device=dev), zero, 0, True,
                               0, 0, 1, zero.to(WORK_DTYPE))
    QR, QN = Q[:, :r], Q[:, r:]
    W64 = W.to(WORK_DTYPE)
    WR, WN, GR = W64 @ QR, W64 @ QN, G.to(WORK_DTYPE) @ QR
    X0R = None if X0 is None else QR.mT @ X0.to(WORK_DTYPE) @ QR
    iterations = cg = factorizations = 0
    for tol_r, cap in ((tol, max_iter), (min(tol, 1e-12), min(max_iter, 5))):
        red = solve_reduced(WR, GR, X0R, tol=tol_r, max_iter=cap)
        iterations, cg = iterations + red.iterations, cg + red.cg_iterations
        factorizations += red.factorizations + 1
        Phi64, top, consistent, reached, slack = _checked_completion(W64, QR, QN, WR, WN, red, tol)
        if consistent and (top - 1 <= 1e-6 or (reached > tol_r and top - 1 <= 10 * slack)):
            break  # (the second case: the reduced solve hit its cap; its completion, scaled, is the best there is)
        X0R = red.X.to(WORK_DTYPE)
    else:
        return None
    if top > 1:  # keeps Φ tangent (the constraint is linear) and costs at most half of ‖Φ‖₂² - 1 of the value
        Phi64 = Phi64 / top**0.5
    Phi = Phi64.to(dt)
    residual = _residual(W, Phi) if exact_residual else red.residual.to(_real(dt))
    return StiefelSolution(Phi, QR @ red.X.to(WORK_DTYPE) @ QR.mT, residual, iterations,
                           bool((residual <= tol).all()), 0, cg, factorizations, red.tangent_norm)


def with_rank_reduction(W: torch.Tensor, G: torch.Tensor, X0: torch.Tensor | None, S: torch.Tensor,
                        tangent_norm: torch.Tensor, *, solve_full: Solver, warm: torch.Tensor | None, tol: float,
                        max_iter: int, exact_residual: bool, rank_rtol: float) -> StiefelSolution:
    """Matrix by matrix: the row-space reduction where it applies, else ``solve_full``; results stacked back into
    the batch. ``S = [WᵀG]_sym`` (to report ``Y = S + X``), ``tangent_norm = ‖P_W(G)‖_F``; both from the caller's
    reduction. ``solve_full`` (also used on the reduced problems) takes ``(W, G, X0, *, tol, max_iter)``."""
    batch = W.shape[:-2]
    Wf, Gf = W.reshape(-1, *W.shape[-2:]), G.reshape(-1, *G.shape[-2:])
    X0f = None if X0 is None else X0.reshape(-1, *X0.shape[-2:])
    warmf = None if warm is None else warm.reshape(-1)
    sols = []
    for i in range(Wf.shape[0]):
        x0 = None if X0f is None or (warmf is not None and not bool(warmf[i])) else X0f[i]
        sol = solve_deficient(Wf[i], Gf[i], x0, solve_reduced=solve_full, tol=tol, max_iter=max_iter,
                              exact_residual=exact_residual, rank_rtol=rank_rtol)
        sols.append(sol if sol is not None else solve_full(Wf[i], Gf[i], x0, tol=tol, max_iter=max_iter))
    stack = lambda xs: torch.stack(xs).reshape(tuple(batch) + tuple(xs[0].shape))  # noqa: E731
    X = stack([s.X.to(WORK_DTYPE) for s in sols])
    return StiefelSolution(stack([s.Phi for s in sols]), X, stack([s.residual for s in sols]),
                           max(s.iterations for s in sols), all(s.converged for s in sols), 0,
                           sum(s.cg_iterations for s in sols), sum(s.factorizations for s in sols), tangent_norm,
                           X + S)
