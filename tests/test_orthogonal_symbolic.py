"""SymPy and cvxpy checks of the orthogonal-group formulas (svmuon.orthogonal.symbolic)."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from svmuon.orthogonal import symbolic as S
from svmuon.orthogonal.manifolds import Orthogonal


@pytest.mark.parametrize("n,r", [(3, 1), (3, 2)])
def test_retraction_identity(n, r):
    R = S.retraction_identity_residual(n, r, seed=n + r)
    assert R["polynomial"] == 0  # exact: remainder of a polynomial division
    assert R["idempotent"].is_zero_matrix and R["inverse_square_root"].is_zero_matrix


def test_retraction_identity_would_fail_without_projector():
    # the check can fail: for P = 2I (not idempotent) I - P + P/√(1+η²) is not (I + η²P)^{-1/2}
    eta = sp.Rational(3, 4)
    P = 2 * sp.eye(2)
    M = sp.eye(2) - P + P / sp.sqrt(1 + eta**2)
    assert not sp.simplify(M * M * (sp.eye(2) + eta**2 * P) - sp.eye(2)).is_zero_matrix
    with pytest.raises(ValueError, match="r <= n"):
        S.retraction_identity_residual(2, 3)


def test_skew_msign_3x3():
    R = S.skew_msign_3x3()
    assert R["det"] == 0 and R["rank"] == 0
    assert all(R[k].is_zero_matrix for k in ("projector", "range", "symmetric"))
    O = R["O"]
    assert (O + O.T).is_zero_matrix  # skew by construction, stated for the reader
    # numeric spot check against the SVD msign at one point of the parametrisation
    u, v = sorted(O.free_symbols, key=str)
    On = np.array(O.subs({u: 0.3, v: -1.7}).evalf(), dtype=float)
    from svmuon.orthogonal.msign import msign

    np.testing.assert_allclose(msign(2.5 * On), On, atol=1e-12)  # float64 SVD of a unit-scale 3x3


@pytest.mark.slow
def test_retraction_orthogonal_3x3_rank_deficient():
    assert S.retraction_orthogonality_3x3().is_zero_matrix


def test_sdp_rejects_bad_shapes():
    with pytest.raises(ValueError, match="square"):
        S.reference_direction_sdp(np.eye(2), np.ones((2, 3)))


def test_sdp_value_is_nuclear_norm():
    rng = np.random.default_rng(7)
    W = Orthogonal().project(rng.standard_normal((3, 3)))
    G = rng.standard_normal((3, 3))
    _, value = S.reference_direction_sdp(W, G)
    K = W.T @ G
    # ‖[WᵀG]_skew‖_*: a 3x3 skew has singular values (ρ, ρ, 0), ρ = ‖K_skew‖_F/√2; solver tol 1e-8
    rho = np.linalg.norm((K - K.T) / 2) / np.sqrt(2)
    assert abs(value - 2 * rho) <= 1e-6
