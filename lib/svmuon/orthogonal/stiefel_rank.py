"""Rank-deficient gradients on St(m, n): reduce to the row space of G, solve there, complete in its null space.

Real gradients are often rank-deficient (a batch smaller than the layer, inputs that are constant, units
that never fire). Then the reduced dual of :mod:`svmuon.orthogonal.stiefel_solvers` has a non-smooth
optimum (``G + WX`` loses rank) and Newton's method crawls. The book's proposition ``prop-stiefel-rank``:
with ``Q = [Q_R, Q_N]`` orthonormal, ``Q_R`` spanning the row space of ``G`` (rank r), ``W_R = WQ_R``
(orthonormal columns: a point of St(m, r)), ``W_N = WQ_N`` and ``G_R = GQ_R``,

* the optimal values agree: ``max over St(m, n) = max over St(m, r)`` for ``(W_R, G_R)``, whose dual is
  smooth for a generic full-rank ``G_R`` (``≤`` by weak duality with ``X = Q_R X_R Q_Rᵀ``, ``≥`` by the
  completion below);
* if ``Φ_R`` solves the reduced problem (orthonormal columns), ``Φ = Φ_R Q_Rᵀ + Φ_N Q_Nᵀ`` is optimal for
  every ``Φ_N`` with ``Φ_RᵀΦ_N = 0``, ``W_RᵀΦ_N = -Φ_RᵀW_N``, ``W_NᵀΦ_N`` skew and ``‖Φ_N‖₂ <= 1``. With
  ``a = W_RᵀΦ_R``, ``b = W_NᵀΦ_R``, ``P = Φ_R - W_R a - W_N b`` (the part of Φ_R outside span(W)) and
  ``D = PᵀP``, these are ``Φ_N = -W_R bᵀ + W_N β + P Λ`` with ``β`` skew and ``bᵀβ + DΛ = -abᵀ``; the
  completion of least Frobenius norm has ``β = [bΛ]_skew`` and ``DΛ + bᵀ[bΛ]_skew = -abᵀ`` (a positive
  semidefinite system in Λ, solved by CG). Its spectral norm is checked; above 1 (not seen in our tests)
  the general smoothed Newton is used instead.

Treating singular values below ``rank_rtol · σ_max`` as zero solves the problem for a nearby ``G'``: the optimal
value is 1-Lipschitz in the nuclear norm (a support function), so it changes by at most the sum ``δ`` of the
discarded singular values (each below ``rank_rtol σ_max``), and the direction returned is within ``2δ`` of optimal
for ``G`` (the chapter's section "Training with it"); a coarser ``rank_rtol`` makes the reduced
problem better conditioned and Newton faster, a trade the chapter measures on real gradients.

The completion makes the optimum non-unique (any ``Φ_N`` of the set is optimal), and its singular values
lie strictly inside (0, 1) in general: the Stiefel direction is then not a partial isometry.
"""

from __future__ import annotations

import torch

from svmuon.orthogonal.stiefel_dual import WORK_DTYPE, StiefelSolution, _newton, _real, _residual, _skew, _sym

__all__ = ["RANK_RTOL", "deficient_rank", "solve_deficient"]

RANK_RTOL = 1e-6  # default: singular values of G below RANK_RTOL · σ_max count as zero (fp32 rounding ~1e-7)


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


def _complete(WR, WN, PR, max_cg: int = 500):  # noqa: ANN001, ANN202
    """The least-Frobenius-norm completion ``Φ_N`` (module docstring), float64; returns ``(Φ_N, β, Λ, b, D)``."""
    a = WR.mT @ PR
    b = WN.mT @ PR
    P = PR - WR @ a - WN @ b
    D = P.mT @ P
    R0 = -a @ b.mT
    op = lambda L: D @ L + b.mT @ _skew(b @ L)  # noqa: E731  the PSD normal operator on r × q matrices
    L = torch.zeros_like(R0)
    r = R0.clone()
    p = r.clone()
    rr = float((r * r).sum())
    stop = (1e-14 * float(R0.abs().max()) * R0.numel() ** 0.5) ** 2
    for _ in range(max_cg):
        if rr <= stop:
            break
        Ap = op(p)
        pAp = float((p * Ap).sum())
        if pAp <= 0:
            break
        alpha = rr / pAp
        L = L + alpha * p
        r = r - alpha * Ap
        rr_new = float((r * r).sum())
        p = r + (rr_new / rr) * p
        rr = rr_new
    beta = _skew(b @ L)
    PN = -WR @ b.mT + WN @ beta + P @ L
    return PN, beta, L, b, D


def solve_deficient(W: torch.Tensor, G: torch.Tensor, X0: torch.Tensor | None, *, tol: float, max_iter: int,
                    smoothing: float, max_cg: int, exact_residual: bool, trace: list | None,
                    rank_rtol: float = RANK_RTOL) -> StiefelSolution | None:
    """Newton on the row space of a rank-deficient 2-D ``G`` plus the completion; ``None`` if ``G`` has full
    numerical rank or the completed ``Φ`` has ``‖Φ‖₂² > 1 + 1e-6`` even after a second reduced solve to
    ``1e-12`` (at most 5 more iterations; the caller then runs the general Newton); between 1 and that, ``Φ`` is divided by ``‖Φ‖₂``. The reduced solve and the completion run in
    float64 whatever the dtype of ``G``: where ``D = PᵀP`` is singular (``m - n < r``) the completion amplifies
    any error of ``Φ_R``, and ``‖Φ‖₂`` is checked on the assembled ``ΦᵀΦ``, not on its blocks."""
    m, n = W.shape
    r, Q = _row_space(G, rank_rtol)
    if r == n:
        return None
    dt = G.dtype
    if r == 0:
        Z = torch.zeros_like(G)
        zero = torch.zeros((), dtype=dt if dt in (torch.float32, torch.float64) else torch.float32, device=G.device)
        eye = torch.eye(n, dtype=WORK_DTYPE, device=G.device)
        return StiefelSolution(Z, torch.zeros(n, n, dtype=WORK_DTYPE, device=G.device), zero, 0, True, 0, 0, 1,
                               (eye, torch.zeros(n, dtype=WORK_DTYPE, device=G.device)), zero.to(WORK_DTYPE))
    QR, QN = Q[:, :r], Q[:, r:]
    # float64 throughout: where D = PᵀP is singular (m - n < r) the completion amplifies any error of Φ_R
    W64 = W.to(WORK_DTYPE)
    WR, WN = W64 @ QR, W64 @ QN
    GR = G.to(WORK_DTYPE) @ QR
    X0R = None if X0 is None else QR.mT @ X0.to(WORK_DTYPE) @ QR
    iterations = cg = factorizations = 0
    # a second reduced solve, to near float64 rounding and warm-started (a few quadratic steps), only if the
    # completion fails its check: the completion amplifies the reduced residual by up to ~1e5 (measured)
    for tol_r, cap in ((tol, max_iter), (min(tol, 1e-12), min(max_iter, 5))):
        red = _newton(WR, GR, X0R, tol=tol_r, max_iter=cap, smoothing=smoothing, max_cg=max_cg,
                      exact_residual=False, trace=trace, rank_aware=False)
        iterations, cg = iterations + red.iterations, cg + red.cg_iterations
        factorizations += red.factorizations + 1
        PN, _, _, _, _ = _complete(WR, WN, red.Phi)
        Phi64 = red.Phi @ QR.mT + PN @ QN.mT
        # Tangent by construction where the completion's linear system is consistent. Where it is not (e.g.
        # m = n with D = 0) CG stops on a least-squares Λ and Φ is far from tangent: refused. Where Λ is large,
        # rounding of PΛ leaves a small tangent residual (measured: 1e-6 from a reduced residual of 6e-8),
        # which the projection P_W removes, moving Φ by that much.
        # what the reduced direction reached, measured on Φ_R itself: a float32 point (orthonormal to ~1e-7) makes
        # it exceed the n × n estimate by the error of WᵀW = I times ‖(M + ε²I)^{-1/2}‖, up to 1e-4 (measured)
        reached = max(float(red.residual.max()), 2 * float(torch.linalg.matrix_norm(_sym(WR.mT @ red.Phi))))
        slack = max(tol, reached, 1e-9)
        raw = _sym(W64.mT @ Phi64)
        consistent = 2 * float(torch.linalg.matrix_norm(raw)) <= 10 * slack
        Phi64 = Phi64 - W64 @ raw
        mu, V = torch.linalg.eigh(_sym(Phi64.mT @ Phi64))  # ΦᵀΦ, measured rather than assumed block diagonal
        excess = float(mu.max()) - 1
        if consistent and excess <= 1e-6:
            break
        if consistent and reached > tol_r and excess <= 10 * slack:
            break  # the reduced solve hit its cap: its completion, scaled, is as good as it gets (unconverged)
        X0R = red.X.to(WORK_DTYPE)
    else:
        return None  # the completion's norm exceeds 1 even from a tight reduced solve: the general Newton decides
    # Where D is singular the completion amplifies the reduced solve's rounding (measured: ‖Φ‖₂² - 1 up to 2e-8
    # from a reduced residual of 3e-15). Dividing by ‖Φ‖₂ keeps Φ tangent (the constraint is linear), makes
    # ‖Φ‖₂ <= 1 exact, and costs at most half of ‖Φ‖₂² - 1 <= 1e-6 of the value, relatively.
    top = float(mu.max())
    if top > 1:
        Phi64, mu = Phi64 / top**0.5, mu / top
    Phi = Phi64.to(dt)
    X = QR @ red.X.to(WORK_DTYPE) @ QR.mT
    residual = _residual(W, Phi) if exact_residual else red.residual.to(_real(dt))
    return StiefelSolution(Phi, X, residual, iterations, bool((residual <= tol).all()), 0, cg, factorizations,
                           (V, mu.clamp(0, 1)), red.tangent_norm)
