"""Answer keys: the Stiefel steepest direction as a semidefinite program (cvxpy), independent of the solvers.

The SDP parametrises the tangent space directly instead of imposing ``WᵀΦ + ΦᵀW = 0`` as equations:
complete ``W`` to an orthogonal ``[W, W⊥]`` (a full QR); every tangent vector is ``Φ = WΩ + W⊥E`` with
``Ω`` skew ``n × n`` and ``E`` free ``(m-n) × n`` (absil2008optimization, edelman1998geometry), and since
``[W, W⊥]`` is orthogonal, ``‖Φ‖₂ = ‖[Ω; E]‖₂``. So eq-stiefel-problem is

    max ⟨WᵀG, Ω⟩ + ⟨W⊥ᵀG, E⟩   s.t.   ‖[Ω; E]‖₂ <= 1   (Ω = S - Sᵀ, S free),

a problem with no equality constraint, which interior-point solvers (CLARABEL) solve to about 1e-9
relative accuracy even where the optimum is degenerate (near-square shapes), while the equality-constrained
form stalls there. Nothing here uses the dual, the reduction or any solver of
:mod:`svmuon.orthogonal.stiefel`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["solve_conic", "stiefel_direction_sdp"]


def solve_conic(problem: Any, solver: str, tol: float) -> None:
    """Solve a cvxpy ``problem`` with ``solver`` at gap and feasibility tolerance ``tol``: CLARABEL's and SCS's own
    names for the tolerances, any other solver at its defaults. The caller reads ``problem.status``."""
    if solver == "CLARABEL":
        problem.solve(solver=solver, tol_gap_abs=tol, tol_gap_rel=tol, tol_feas=tol)
    elif solver == "SCS":
        problem.solve(solver=solver, eps=tol, max_iters=200_000)
    else:
        problem.solve(solver=solver)


def stiefel_direction_sdp(W: np.ndarray, G: np.ndarray, *, tol: float = 1e-10,
                          solver: str = "CLARABEL", tiebreak: np.ndarray | None = None,
                          slack: float = 1e-7) -> tuple[np.ndarray, float]:
    """Solve ``max tr(GᵀΦ)`` s.t. ``‖Φ‖₂ <= 1``, ``WᵀΦ + ΦᵀW = 0`` as an SDP (diamond2016cvxpy).

    Args:
        W: ``(m, n)`` float64 array with orthonormal columns (m >= n). G: ``(m, n)`` float64 array.
        tol: the solver's gap and feasibility tolerances.
        solver: a cvxpy conic solver that handles SDPs (``"CLARABEL"`` default, or ``"SCS"``).
        tiebreak: ``(m, n)`` array ``Z`` or ``None``. Given, a second SDP picks, among the directions whose
            value is within ``slack · max(1, value)`` of the optimum, the one maximising ``tr(ZᵀΦ)``: where
            the optimum is not unique, different ``Z`` find different optimal directions (the chapter's
            non-uniqueness section). The returned value is still the first stage's optimum.
        slack: relative slack of the optimal-face constraint of the tiebreak (a little above ``tol``, so the
            second problem stays strictly feasible).

    Returns:
        ``(Phi, value)``: the maximiser (exactly tangent by construction, ``‖Phi‖₂ <= 1`` to the solver's
        feasibility tolerance) and the optimal value.

    Raises:
        ValueError: bad shapes, ``W`` without orthonormal columns, a ``tiebreak`` that is not a finite array of
            ``W``'s shape, a ``slack`` that is not a finite number >= 0, or a solver status other than
            optimal / optimal_inaccurate with a feasible answer (``‖Phi‖₂ <= 1 + max(1e3 tol, 1e-6)``).
    """
    import cvxpy as cp

    W, G = np.asarray(W, dtype=float), np.asarray(G, dtype=float)
    if W.ndim != 2 or W.shape != G.shape or W.shape[0] < W.shape[1]:
        raise ValueError(f"W and G must be tall (m, n) matrices of one shape, got {W.shape} and {G.shape}")
    m, n = W.shape
    if not np.allclose(W.T @ W, np.eye(n), atol=1e-10):
        raise ValueError("W must have orthonormal columns (WᵀW = I)")
    Q, _ = np.linalg.qr(W, mode="complete")
    W_perp = Q[:, n:]
    S = cp.Variable((n, n))
    Omega = S - S.T
    objective = cp.trace((W.T @ G).T @ Omega)
    if m > n:
        E = cp.Variable((m - n, n))
        stacked = cp.vstack([Omega, E])
        objective = objective + cp.trace((W_perp.T @ G).T @ E)
    else:
        stacked = Omega

    def run(problem):  # noqa: ANN001, ANN202
        solve_conic(problem, solver, tol)
        if Omega.value is None or (m > n and E.value is None):
            raise ValueError(f"the SDP solver {solver} returned status {problem.status!r} (no solution)")
        Phi = W @ Omega.value + (W_perp @ E.value if m > n else 0.0)
        # "optimal_inaccurate" (CLARABEL near degenerate optima) is accepted when the answer is feasible to 1e-6
        if problem.status not in ("optimal", "optimal_inaccurate") or \
                not np.linalg.norm(Phi, 2) <= 1 + max(1e3 * tol, 1e-6):
            raise ValueError(f"the SDP solver {solver} returned status {problem.status!r}")
        return np.asarray(Phi)

    problem = cp.Problem(cp.Maximize(objective), [cp.sigma_max(stacked) <= 1])
    Phi = run(problem)
    value = float(problem.value)
    if tiebreak is not None:
        Z = np.asarray(tiebreak, dtype=float)
        if Z.shape != W.shape or not np.isfinite(Z).all():
            raise ValueError(f"tiebreak must be a finite array of the shape of W {W.shape}, got shape {Z.shape}")
        if isinstance(slack, bool) or not isinstance(slack, (int, float)) or not 0 <= slack < float("inf"):
            raise ValueError(f"slack must be a finite number >= 0, got {slack!r}")
        second = (W.T @ Z).T @ Omega
        second = cp.trace(second + ((W_perp.T @ Z).T @ E if m > n else 0))
        face = objective >= value - slack * max(1.0, abs(value))
        Phi = run(cp.Problem(cp.Maximize(second), [cp.sigma_max(stacked) <= 1, face]))
    return Phi, value
