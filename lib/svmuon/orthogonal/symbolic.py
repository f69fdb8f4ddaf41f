"""Independent checks of the orthogonal-group formulas: SymPy derivations and a cvxpy SDP.

Nothing here is used by the optimizer; these functions are the second route the tests and the chapter
hold the closed forms of :mod:`svmuon.orthogonal.manifolds` against (meurer2017sympy, diamond2016cvxpy):

* :func:`retraction_identity_residual` -- ``(I + η²P)^{-1/2} = I - P + P/√(1+η²)`` for every projector
  ``P`` (eq-orth-retraction);
* :func:`skew_msign_3x3` -- msign of a generic 3×3 skew matrix is ``X/ρ``, skew and rank-deficient
  (the skew lemma, thm-skew-msign, in the odd case);
* :func:`retraction_orthogonality_3x3` -- the retraction of a 3×3 orthogonal step with that singular ``O``
  is exactly orthogonal;
* :func:`reference_direction_sdp` -- the steepest direction as the optimum of a semidefinite program.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import sympy as sp

__all__ = [
    "retraction_identity_residual",
    "skew_msign_3x3",
    "retraction_orthogonality_3x3",
    "reference_direction_sdp",
]


def _eta_rational() -> tuple[sp.Symbol, sp.Expr, sp.Expr]:
    """``η = 2t/(1-t²)`` for ``0 < t < 1``, so ``√(1+η²) = (1+t²)/(1-t²)`` is rational: every η > 0 is hit."""
    t = sp.Symbol("t", positive=True)
    return t, 2 * t / (1 - t**2), (1 + t**2) / (1 - t**2)


def _cancel(E: sp.Matrix) -> sp.Matrix:
    return E.applyfunc(sp.cancel)


def retraction_identity_residual(n: int = 3, r: int = 1, seed: int = 0) -> dict[str, Any]:
    """Residuals (all zero) proving ``(I + η²P)^{-1/2} = I - P + P/√(1+η²)`` (eq-orth-retraction).

    Two routes. (1) Polynomial: ``I`` and ``P`` commute, so every expression is a polynomial in ``P`` and may
    be reduced modulo ``p² - p`` (``P`` is idempotent); with ``M = 1 - p + p/√(1+η²)`` the remainder of
    ``M²(1 + η²p) - 1`` is identically zero, for every projector of every rank and size. ``M`` has the
    eigenvalues 1 (on ``ker P``) and ``1/√(1+η²) > 0`` (on ``range P``), so it is the principal root.
    (2) Matrix: the same on a concrete oblique rank-``r`` projector ``P = A(BᵀA)^{-1}Bᵀ`` with random
    integer ``A, B`` (exact rationals) and symbolic ``η`` (through ``η = 2t/(1-t²)``).

    Returns:
        ``{"polynomial": remainder (0), "idempotent": P² - P, "inverse_square_root": M²(I + η²P) - I}``.

    Raises:
        ValueError: unless ``1 <= r <= n``.
    """
    if not (1 <= r <= n):
        raise ValueError(f"need 1 <= r <= n, got n={n}, r={r}")
    p, eta = sp.symbols("p eta", positive=True)
    M = 1 - p + p / sp.sqrt(1 + eta**2)
    remainder = sp.simplify(sp.rem(sp.expand(M**2 * (1 + eta**2 * p) - 1), p**2 - p, p))
    rng = np.random.default_rng(seed)
    while True:
        A = sp.Matrix(rng.integers(-3, 4, size=(n, r)).tolist())
        B = sp.Matrix(rng.integers(-3, 4, size=(n, r)).tolist())
        if (B.T * A).det() != 0:
            break
    P = A * (B.T * A).inv() * B.T
    t, eta_t, root = _eta_rational()
    I = sp.eye(n)
    Mm = I - P + P / root
    return {
        "polynomial": remainder,
        "idempotent": P * P - P,
        "inverse_square_root": _cancel(Mm * Mm * (I + eta_t**2 * P) - I),
    }


def _unit_skew3() -> tuple[sp.Matrix, tuple[sp.Symbol, sp.Symbol]]:
    """Generic 3×3 skew ``O`` with ``a² + b² + c² = 1``, via the rational parametrisation of the sphere."""
    u, v = sp.symbols("u v", real=True)
    d = 1 + u**2 + v**2
    a, b, c = 2 * u / d, 2 * v / d, (1 - u**2 - v**2) / d
    return sp.Matrix([[0, a, b], [-a, 0, c], [-b, -c, 0]]), (u, v)


def skew_msign_3x3() -> dict[str, Any]:
    """msign of a generic 3×3 skew matrix ``X = ρO`` (``ρ > 0``, ``O`` of unit Frobenius²/2) is ``O``.

    ``O`` is skew (by construction), singular (``det X = det Xᵀ = det(-X) = -det X``), ``OᵀO = Π`` is an
    orthogonal projector of rank 2 and ``OΠ = O``, so ``O`` is a partial isometry with the row and column
    spaces of ``X`` and ``OᵀX = ρΠ ⪰ 0``: exactly the characterisation of ``msign(X) = U_r V_rᵀ``
    (thm-skew-msign, odd case). The entries ``(a, b, c)`` run over the unit sphere by the rational
    parametrisation ``(2u, 2v, 1-u²-v²)/(1+u²+v²)``, so every residual is a rational function.

    Returns:
        A dict with keys ``det``, ``projector`` (Π² - Π), ``rank`` (rank Π - 2, an int), ``range``
        (OΠ - O), ``symmetric`` (Π - Πᵀ) and ``O``; every residual is zero.
    """
    O, _ = _unit_skew3()
    Pi = _cancel(O.T * O)
    return {
        "det": sp.cancel(O.det()),
        "projector": _cancel(Pi * Pi - Pi),
        "rank": int(sp.cancel(Pi.trace())) - 2,  # trace of a projector = its rank
        "range": _cancel(O * Pi - O),
        "symmetric": _cancel(Pi - Pi.T),
        "O": O,
    }


def retraction_orthogonality_3x3() -> sp.Matrix:
    """``QᵀQ - I`` (zero) for ``Q = (I - ηO)(I - OᵀO + sOᵀO)``, ``s = 1/√(1+η²)``, ``O`` generic 3×3 skew msign.

    This is the rank-deficient case of eq-orth-retraction (``OᵀO`` has rank 2, not 3): ``I + η²OᵀO`` is
    not a multiple of ``I``, and dividing by ``√(1+η²)`` alone would not give an orthogonal matrix.
    ``O`` has entries ``a, b, c`` with ``a² + b² + c² = 1`` (any 3×3 skew msign, by :func:`skew_msign_3x3`)
    and ``s`` is a symbol with ``s²(1+η²) = 1``; every entry of ``QᵀQ - I`` is a polynomial, reduced modulo
    these two relations (polynomial remainders in ``c`` and then in ``s``). A zero remainder proves the
    identity for every unit skew ``O`` and every ``η``.

    Returns:
        The 3×3 matrix of remainders (zero).
    """
    a, b, c, eta, s = sp.symbols("a b c eta s", real=True)
    O = sp.Matrix([[0, a, b], [-a, 0, c], [-b, -c, 0]])
    I = sp.eye(3)
    P = O.T * O
    Q = (I - eta * O) * (I - P + s * P)

    def reduce(e: sp.Expr) -> sp.Expr:  # remainders: first in c modulo c² - (1 - a² - b²), then in s
        e = sp.rem(sp.expand(e), c**2 - (1 - a**2 - b**2), c)
        return sp.cancel(sp.rem(sp.expand(e), s**2 - 1 / (1 + eta**2), s))

    return (Q.T * Q - I).applyfunc(reduce)


def reference_direction_sdp(W: np.ndarray, G: np.ndarray, *, solver: str = "CLARABEL", tol: float = 1e-8) -> tuple[np.ndarray, float]:
    """Solve ``max tr(GᵀΦ)`` s.t. ``‖Φ‖₂ <= 1``, ``WᵀΦ + ΦᵀW = 0`` with cvxpy (diamond2016cvxpy).

    The spectral-norm ball is the semidefinite constraint ``[[I, Φ], [Φᵀ, I]] ⪰ 0`` (cvxpy's
    ``sigma_max``); the tangent-space condition is linear. The closed form (eq-orth-direction) says the
    optimum is ``Φ = W msign([WᵀG]_skew)`` with value ``‖[WᵀG]_skew‖_*``.

    Args:
        W: ``(n, n)`` orthogonal float64 array. G: ``(n, n)`` float64 array.
        solver: a cvxpy conic solver that handles SDPs (``"CLARABEL"`` default, or ``"SCS"``).
        tol: the solver's gap/feasibility tolerances.

    Returns:
        ``(Phi, value)``.

    Raises:
        ValueError: shapes differ or are not square; the solver does not report an optimal solution.
    """
    import cvxpy as cp

    from svmuon.orthogonal.references import solve_conic

    W, G = np.asarray(W, dtype=float), np.asarray(G, dtype=float)
    if W.ndim != 2 or W.shape[0] != W.shape[1] or W.shape != G.shape:
        raise ValueError(f"W and G must be square matrices of one shape, got {W.shape} and {G.shape}")
    n = W.shape[0]
    Phi = cp.Variable((n, n))
    S = W.T @ Phi + Phi.T @ W  # symmetric: impose its n(n+1)/2 independent entries only
    constraints = [cp.sigma_max(Phi) <= 1, cp.upper_tri(S) == 0, cp.diag(S) == 0]
    problem = cp.Problem(cp.Maximize(cp.trace(G.T @ Phi)), constraints)
    for attempt_tol in (tol, 10 * tol):  # CLARABEL at 1e-8 occasionally stops "optimal_inaccurate"
        solve_conic(problem, solver, attempt_tol)
        if problem.status == "optimal":
            break
    else:
        raise ValueError(f"the SDP solver {solver} returned status {problem.status!r}")
    return np.asarray(Phi.value), float(problem.value)
