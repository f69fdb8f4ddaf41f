"""The optimal set of the steepest-direction problem on O(n) (book theorem thm-orth-family, eq-orth-family).

For K = [WᵀG]_skew of rank r with null-space basis Z, the maximisers of ``tr(GᵀΦ)`` over ``‖Φ‖₂ <= 1``,
``WᵀΦ`` skew are exactly ``W(msign(K) + Z S Zᵀ)``, S skew with ``‖S‖₂ <= 1``. Expected values come from cvxpy
(diamond2016cvxpy) solving the semidefinite program directly, and from NumPy evaluations of the objective and
the constraints; the skew matrices K are built with a chosen rank, so msign(K) and Z are known from the
construction, not from the library.

Tolerances. CLARABEL is run at its default gap/feasibility tolerances (1e-8): optimal values agree to ~1e-7.
Over the optimal set relaxed by a slack δ in the objective, a direction the theorem allows is reached to the
solver's accuracy, while one it forbids is reached only to O(√δ) (a tilt by θ costs O(θ²) of the objective);
the tests check the √δ scaling between δ = 1e-4 and 1e-6 (smaller δ makes the set too thin for CLARABEL).
"""

from __future__ import annotations

import numpy as np
import pytest

cp = pytest.importorskip("cvxpy")

from svmuon import Orthogonal, msign  # noqa: E402
from svmuon.orthogonal import skew  # noqa: E402
from svmuon.orthogonal.symbolic import reference_direction_sdp  # noqa: E402

M = Orthogonal()
DELTA = 1e-6  # slack of the relaxed optimal set (see the module docstring)


def _skew_of_rank(n, r, rng, scales=None):
    """K = P diag(s_k J) Pᵀ (r/2 blocks J = [[0, 1], [-1, 0]]), its msign P diag(J) Pᵀ, and the null basis."""
    P, _ = np.linalg.qr(rng.standard_normal((n, n)))
    s = rng.uniform(0.5, 2.0, r // 2) if scales is None else np.asarray(scales, float)
    K0, O0 = np.zeros((n, n)), np.zeros((n, n))
    for k, sk in enumerate(s):
        K0[2 * k, 2 * k + 1], K0[2 * k + 1, 2 * k] = sk, -sk
        O0[2 * k, 2 * k + 1], O0[2 * k + 1, 2 * k] = 1.0, -1.0
    return P @ K0 @ P.T, P @ O0 @ P.T, P[:, r:], float(s.sum() * 2)


def _problem(n, r, seed):
    rng = np.random.default_rng(seed)
    K, O, Z, nuc = _skew_of_rank(n, r, rng)
    W, _ = np.linalg.qr(rng.standard_normal((n, n)))
    B = rng.standard_normal((n, n))
    G = W @ (K + B + B.T)  # any symmetric part: [WᵀG]_skew = K
    return W, G, K, O, Z, nuc, rng


def _push(W, G, nuc, D, delta=DELTA):
    """max tr(Dᵀ WᵀΦ) over feasible Φ with tr(GᵀΦ) >= nuc - delta (CLARABEL; SCS where it gives up)."""
    n = W.shape[0]
    Phi = cp.Variable((n, n))
    T = W.T @ Phi + Phi.T @ W
    cons = [cp.sigma_max(Phi) <= 1, cp.upper_tri(T) == 0, cp.diag(T) == 0, cp.trace(G.T @ Phi) >= nuc - delta]
    prob = cp.Problem(cp.Maximize(cp.trace(D.T @ (W.T @ Phi))), cons)
    try:
        prob.solve(solver="CLARABEL")
    except cp.error.SolverError:  # the relaxed optimal set is thin; the first-order solver copes
        prob.solve(solver="SCS", eps=1e-9, max_iters=200_000)
    assert prob.status in ("optimal", "optimal_inaccurate")
    return float(prob.value)


def _random_skew(k, rng):
    A = rng.standard_normal((k, k))
    return A - A.T


@pytest.mark.parametrize("n,r", [(4, 2), (5, 2), (6, 2), (6, 4), (3, 0)])
def test_every_member_of_the_family_is_optimal(n, r):
    W, G, K, O, Z, nuc, rng = _problem(n, r, seed=10 * n + r)
    # G is built as W(K + S): one n-term product and a subtraction of O(1) terms, ~n u
    assert np.abs(skew(W.T @ G) - K).max() < 1e-13
    np.testing.assert_allclose(msign(K), O, rtol=0, atol=1e-12)  # the construction's msign is the library's
    _, value = reference_direction_sdp(W, G)
    assert abs(value - nuc) < 1e-6  # SDP optimum = ‖K‖_* (solver tolerance 1e-8, values to ~1e-7)
    for _ in range(5):
        S = _random_skew(n - r, rng)
        S *= rng.uniform(0, 1) / max(np.linalg.norm(S, 2), 1e-300) if n - r >= 2 else 0.0
        Phi = W @ (O + Z @ S @ Z.T)
        assert np.linalg.norm(Phi, 2) <= 1 + 1e-12  # float64 rounding of a norm-1 product
        assert np.abs(W.T @ Phi + Phi.T @ W).max() < 1e-13
        assert abs(np.trace(G.T @ Phi) - nuc) < 1e-12 * max(1.0, nuc)
        assert abs(np.sum(Phi**2) - (r + np.sum(S**2))) < 1e-12  # ‖Φ‖_F² = r + ‖S‖_F²


@pytest.mark.parametrize("n,r", [(4, 2), (5, 2)])
def test_sdp_optimal_set_is_the_whole_ball_of_s(n, r):
    """Support function of the optimal set in a direction Z S̃ Zᵀ is max over the ball ‖S‖₂ <= 1 = ‖S̃‖_*."""
    W, G, K, O, Z, nuc, rng = _problem(n, r, seed=100 + n)
    for _ in range(2):
        St = _random_skew(n - r, rng)
        got = _push(W, G, nuc, Z @ St @ Z.T)
        expected = np.linalg.svd(St, compute_uv=False).sum()  # ‖S̃‖_* (msign(S̃) is skew: attained)
        assert abs(got - expected) < 1e-5 * max(1.0, expected)


@pytest.mark.parametrize("n,r", [(4, 2), (6, 2),  # CLARABEL solves these in ~0.1 s; SCS takes ~10 s on the others
                                 pytest.param(5, 2, marks=pytest.mark.slow), pytest.param(6, 4, marks=pytest.mark.slow)])
def test_sdp_optimal_set_never_couples_range_and_null_space(n, r):
    W, G, K, O, Z, nuc, rng = _problem(n, r, seed=200 + n)
    R = np.linalg.svd(K)[0][:, :r]  # orthonormal basis of range(K)
    x, y = R @ rng.standard_normal(r), Z @ rng.standard_normal(n - r)
    x, y = x / np.linalg.norm(x), y / np.linalg.norm(y)
    D = np.outer(x, y) - np.outer(y, x)  # allowed by the constraints, excluded by the theorem
    # over the optimal set relaxed by δ the coupling is O(√δ): a factor 10 smaller for δ 100 times smaller
    # (0.2 allows for the solvers' own error), so it is zero on the optimal set itself; an allowed direction
    # of the same size reaches order one at every δ (test above)
    c4, c6 = _push(W, G, nuc, D, 1e-4), _push(W, G, nuc, D, 1e-6)
    assert c6 < 0.2 * c4 and c6 < 5e-3
    # the least-Frobenius-norm member is W msign(K) (to O(√δ), as above)
    Phi = cp.Variable((n, n))
    T = W.T @ Phi + Phi.T @ W
    cons = [cp.sigma_max(Phi) <= 1, cp.upper_tri(T) == 0, cp.diag(T) == 0, cp.trace(G.T @ Phi) >= nuc - 1e-6]
    cp.Problem(cp.Minimize(cp.sum_squares(Phi)), cons).solve(solver="CLARABEL")
    assert np.abs(Phi.value - W @ O).max() < 5e-3


@pytest.mark.parametrize("n,r", [(3, 2), (4, 4), (5, 4), (6, 6)])
def test_unique_when_rank_is_n_or_n_minus_1(n, r):
    W, G, K, O, Z, nuc, rng = _problem(n, r, seed=300 + n)
    Phi_sdp, value = reference_direction_sdp(W, G)
    assert abs(value - nuc) < 1e-6  # the conic solver's value at its default gaps (~1e-8 relative of ‖K‖_* ~ 5)
    # the maximiser is unique, so the solver's point converges to W O (to ~√tol of the solver)
    assert np.abs(Phi_sdp - W @ O).max() < 1e-3
    np.testing.assert_allclose(M.steepest_direction(W, G), W @ O, rtol=0, atol=1e-12)
