"""Tests of svmuon.orthogonal.stiefel_solvers: the reduction, the solvers against the SDP answer key, bad input.

Expected values come from independent routes: the nuclear norm and msign by SVD of the m × n matrix, finite
differences for derivatives, and the semidefinite program of svmuon.orthogonal.references (cvxpy/CLARABEL,
which parametrises the tangent space and never sees the dual, the reduction or a solver).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from svmuon.orthogonal.stiefel import newton as nt
from svmuon.orthogonal.stiefel import reduction as ss
from svmuon.orthogonal.references import stiefel_direction_sdp
from svmuon.orthogonal.stiefel import Stiefel, reduced_dual, stiefel_direction, tangent_residual


def _point(rng, m, n):
    Q, R = np.linalg.qr(rng.standard_normal((m, n)))
    return Q * np.sign(np.diag(R))


def _svd_msign(Z):
    U, s, Vt = np.linalg.svd(Z, full_matrices=False)
    keep = s > 1e-12 * s[0]  # msign drops the null singular directions (a skew matrix of odd order has one)
    return U[:, keep] @ Vt[keep]


def _sdp(W, G):
    with warnings.catch_warnings():  # CLARABEL reports "optimal_inaccurate" on degenerate (near-square) optima
        warnings.simplefilter("ignore", UserWarning)
        return stiefel_direction_sdp(W, G)


def _cases():
    """The issue's instances: 8×3, 12×5, 20×7, a near-square 16×15, a rank-deficient G, m = n."""
    rng = np.random.default_rng(20261130)
    out = {}
    for m, n in [(8, 3), (12, 5), (20, 7), (16, 15)]:
        out[f"{m}x{n}"] = (_point(rng, m, n), rng.standard_normal((m, n)))
    W = _point(rng, 12, 5)
    out["rank2_G_12x5"] = (W, rng.standard_normal((12, 2)) @ rng.standard_normal((2, 5)))
    out["square_6x6"] = (_point(rng, 6, 6), rng.standard_normal((6, 6)))
    out["square_5x5"] = (_point(rng, 5, 5), rng.standard_normal((5, 5)))
    out["singular_7x5"] = (_point(rng, 7, 5), rng.standard_normal((7, 5)))  # odd m: a non-smooth optimum
    return out


CASES = _cases()


# -- the reduction (thm-stiefel-reduction) ------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(8, 3), (20, 7), (16, 15), (6, 6)])
def test_reduction_equals_nuclear_norm_and_msign(shape):
    rng = np.random.default_rng(1)
    W, G = _point(rng, *shape), rng.standard_normal(shape)
    X = rng.standard_normal((shape[1], shape[1]))
    X = X + X.T
    value, Phi = reduced_dual(W, G, X)
    Z = G + W @ X
    # an SVD of the m × n matrix is the independent route; 1e-12 relative: a few dozen roundings of O(1) terms
    assert value == pytest.approx(np.linalg.svd(Z, compute_uv=False).sum(), rel=1e-12)
    np.testing.assert_allclose(Phi, _svd_msign(Z), rtol=0, atol=1e-11)


def test_gradient_of_the_dual_is_sym_WtPhi():
    # ∇_X ‖G + WX‖_* = [WᵀΦ]_sym against central differences (step 1e-6: error ~1e-12/1e-6 + 1e-12 ~ 1e-6)
    rng = np.random.default_rng(2)
    W, G = _point(rng, 12, 5), rng.standard_normal((12, 5))
    X = rng.standard_normal((5, 5))
    X = X + X.T
    H = rng.standard_normal((5, 5))
    H = H + H.T
    _, Phi = reduced_dual(W, G, X)
    grad = (W.T @ Phi + Phi.T @ W) / 2
    h = 1e-6
    fd = (reduced_dual(W, G, X + h * H)[0] - reduced_dual(W, G, X - h * H)[0]) / (2 * h)
    assert np.sum(grad * H) == pytest.approx(fd, rel=1e-6)


def test_hessian_vector_product_matches_differences_of_the_gradient():
    # eq-stiefel-hessian in the eigenbasis of M against central differences of the gradient (rel 1e-6 as above)
    torch.manual_seed(3)
    W = Stiefel().random(12, 5, dtype=torch.float64)  # from the global generator seeded above
    G = torch.randn(12, 5, dtype=torch.float64)
    red = ss._reduce(W, G)
    eps2 = torch.zeros(1, 1, dtype=torch.float64)
    Y = ss._sym(torch.randn(5, 5, dtype=torch.float64))
    H1, H2 = (ss._sym(torch.randn(5, 5, dtype=torch.float64)) for _ in range(2))

    def grad(Yv):
        sp = ss._spectrum(Yv, red, eps2, None)
        Sinv = (sp.V / sp.s) @ sp.V.mT
        return ss._sym((Yv + red.K) @ Sinv)

    sp = ss._spectrum(Y, red, eps2, None)
    b = sp.V.mT @ (Y + red.K) @ sp.V
    c, d = nt._hessian_parts(sp.s)
    hv = sp.V @ nt._hessian_vector(sp.V.mT @ H1 @ sp.V, b, c, d) @ sp.V.mT
    h = 1e-6
    fd = (grad(Y + h * H1) - grad(Y - h * H1)) / (2 * h)
    assert float((H2 * hv).sum()) == pytest.approx(float((H2 * fd).sum()), rel=1e-6)


# -- the answer key ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(CASES))
def test_newton_reaches_the_sdp_optimum(name):
    W, G = CASES[name]
    _, value = _sdp(W, G)
    sol = stiefel_direction(W, G, solver="newton", tol=1e-9, max_iter=200)
    Phi = sol.Phi
    # the hard targets: objective within 1e-6 of the SDP (whose own accuracy is ~1e-9 relative),
    # tangent residual <= 1e-8, ‖Φ‖₂ <= 1 + 1e-8
    assert np.sum(G * Phi) == pytest.approx(value, rel=1e-6)
    assert float(tangent_residual(W, Phi)) <= 1e-8
    assert float(sol.residual) == pytest.approx(float(tangent_residual(W, Phi)), rel=1e-6, abs=1e-15)
    assert np.linalg.norm(Phi, 2) <= 1 + 1e-8


@pytest.mark.parametrize("method", ["fixed_point", "fixed_point_reduced", "dual_ascent"])
@pytest.mark.parametrize("name", ["8x3", "12x5", pytest.param("20x7", marks=pytest.mark.slow)])
def test_published_solvers_reach_the_sdp_optimum_on_tall_shapes(method, name):
    W, G = CASES[name]
    _, value = _sdp(W, G)
    max_iter = 5000 if method == "dual_ascent" else 500  # dual ascent is a subgradient method: slow
    sol = stiefel_direction(W, G, solver=method, tol=1e-9, max_iter=max_iter)
    assert sol.converged
    assert np.sum(G * sol.Phi) == pytest.approx(value, rel=1e-6)
    assert float(tangent_residual(W, sol.Phi)) <= 1e-8
    assert np.linalg.norm(sol.Phi, 2) <= 1 + 1e-8


def test_square_case_is_the_orthogonal_closed_form():
    # m = n: Φ = W msign(K), K = [WᵀG]_skew (su2025orthogonal), here by NumPy's SVD. Every solver now returns this
    # closed form at m = n (stiefel/dispatch.py), so the two are two SVD routes to one polar factor: each within
    # n eps ‖K‖₂ / σ⁺ of it (backward-stable SVD; the polar factor's condition is 1/σ⁺, σ⁺ the smallest non-zero
    # singular value; odd n: K is singular and both drop its null direction). Bound 2.7e-14 (6x6), 6.5e-15 (5x5);
    # measured 1.6e-15 and 9e-16. (It was atol=1e-9, which a 2-core EPYC exceeded, 1.02e-9, when Newton's smoothed
    # Φ_ε was returned here: that is within ε²/(2σ⁺²) + r/2 of Φ, plus rounding amplified by 1/ε where K is
    # singular, ~4e-9 at the default ε = 1e-6 σ̄ and tol = 1e-9; eq-stiefel-smoothing-gap.)
    eps64 = np.finfo(np.float64).eps
    for name in ("square_6x6", "square_5x5"):
        W, G = CASES[name]
        n = W.shape[1]
        A = W.T @ G
        K = (A - A.T) / 2
        closed = W @ _svd_msign(K)
        sv = np.linalg.svd(K, compute_uv=False)
        for solver in ("newton", "completion"):
            sol = stiefel_direction(W, G, solver=solver, tol=1e-9)
            bound = 2 * n * eps64 * sv[0] / sv[sv > 1e-12 * sv[0]].min()
            np.testing.assert_allclose(sol.Phi, closed, rtol=0, atol=bound)


def test_square_trick_is_not_optimal_on_tall_shapes():
    # the counterexample of the chapter: W msign([WᵀG]_skew) is feasible but strictly suboptimal for m > n
    rng = np.random.default_rng(5)
    W, G = _point(rng, 5, 3), rng.standard_normal((5, 3))
    A = W.T @ G
    naive = W @ _svd_msign((A - A.T) / 2)
    _, value = _sdp(W, G)
    assert float(tangent_residual(W, naive)) <= 1e-12
    assert np.sum(G * naive) < value - 0.1  # a gap far above the SDP's accuracy


def test_non_smooth_optimum_is_not_a_partial_isometry():
    # at the singular 7 × 5 instance the SDP's optimum has a singular value strictly inside (0, 1), and so does
    # Newton's: msign(G + WX) cannot be optimal there for any X (the chapter's non-uniqueness section)
    W, G = CASES["singular_7x5"]
    P_sdp, _ = _sdp(W, G)
    sol = stiefel_direction(W, G, solver="newton", tol=1e-9, max_iter=200)
    for P in (P_sdp, sol.Phi):
        s = np.linalg.svd(P, compute_uv=False)
        assert 0.05 < s.min() < 0.95
    np.testing.assert_allclose(np.linalg.svd(sol.Phi, compute_uv=False), np.linalg.svd(P_sdp, compute_uv=False),
                               atol=1e-3)  # the SDP's Φ is accurate to ~1e-4 in entries on this degenerate case


# -- the solvers' structure ------------------------------------------------------------------------------------------
def test_reduced_fixed_point_is_the_source_iteration():
    # thm-fixed-point-pcg: Su's Lyapunov update (m × n, exact msign) and the preconditioned gradient step in
    # the reduced variables give the same iterates (here after 1, 2 and 3 steps); 1e-10: rounding of both routes
    rng = np.random.default_rng(6)
    W, G = _point(rng, 20, 7), rng.standard_normal((20, 7))
    for k in (1, 2, 3):
        a = stiefel_direction(W, G, solver="fixed_point", tol=1e-300, max_iter=k)
        b = stiefel_direction(W, G, solver="fixed_point_reduced", tol=1e-300, max_iter=k, smoothing=1e-300)
        np.testing.assert_allclose(a.X, b.X, rtol=0, atol=1e-10)


def test_warm_start_from_the_solution_needs_no_iteration():
    W, G = CASES["12x5"]
    sol = stiefel_direction(W, G, solver="newton", tol=1e-9)
    again = stiefel_direction(W, G, solver="newton", tol=1e-9, X0=sol.X)
    assert again.iterations == 0
    near = stiefel_direction(W, G + 1e-3 * np.random.default_rng(7).standard_normal(G.shape), solver="newton", tol=1e-9, X0=sol.X)
    assert near.iterations < sol.iterations


def test_bounded_cost_and_honest_report_when_not_converged():
    # near-square with a singular optimum, capped at 3 iterations: it stops, says so, and reports the true residual
    W, G = CASES["singular_7x5"]
    sol = stiefel_direction(W, G, solver="newton", tol=1e-12, max_iter=3)
    assert sol.iterations == 3 and not sol.converged
    assert float(sol.residual) == pytest.approx(float(tangent_residual(W, sol.Phi)), rel=1e-9)
    assert float(sol.residual) > 1e-12
    assert np.linalg.norm(sol.Phi, 2) <= 1 + 1e-12  # smoothing keeps ‖Φ‖₂ < 1 at every iterate


def test_batched_equals_separate_and_types():
    rng = np.random.default_rng(8)
    W = np.stack([_point(rng, 9, 4) for _ in range(3)])
    G = rng.standard_normal((3, 9, 4))
    batch = stiefel_direction(torch.from_numpy(W), torch.from_numpy(G), solver="newton", tol=1e-10)
    assert isinstance(batch.Phi, torch.Tensor) and batch.Phi.shape == (3, 9, 4) and batch.X.shape == (3, 4, 4)
    for i in range(3):
        one = stiefel_direction(W[i], G[i], solver="newton", tol=1e-10)
        assert isinstance(one.Phi, np.ndarray)
        # both stop at residual <= tol = 1e-10 from the same start; Φ moves by ~κ · residual, κ ~ 10
        np.testing.assert_allclose(batch.Phi[i].numpy(), one.Phi, rtol=0, atol=1e-9)


def test_float32_input_gives_float32_output():
    rng = np.random.default_rng(9)
    W, G = _point(rng, 64, 16).astype(np.float32), rng.standard_normal((64, 16)).astype(np.float32)
    sol = stiefel_direction(torch.from_numpy(W), torch.from_numpy(G), solver="newton", tol=1e-6)
    assert sol.Phi.dtype == torch.float32
    assert float(sol.residual) <= 1e-5  # fp32 assembly of Φ: ~ u₃₂ √(n²) rounding on top of the tolerance


def test_zero_gradient_gives_zero_direction_and_normal_gradient_a_tiny_tangent_norm():
    rng = np.random.default_rng(10)
    W = _point(rng, 7, 3)
    sol = stiefel_direction(W, np.zeros((7, 3)))
    np.testing.assert_array_equal(sol.Phi, 0.0)
    # a purely normal G = W S (S symmetric) has tangent part at rounding level: below √eps ‖G‖_F it is no
    # direction, and the raw entry point returns Φ = 0, as for G = 0 (tests/test_bad_input_session13.py), with
    # ‖P_W(G)‖_F reported, which the optimizer's eps rule reads (svmuon.optim.functional)
    G = W @ np.diag([1.0, 2.0, 3.0])
    sol = stiefel_direction(torch.from_numpy(W), torch.from_numpy(G), solver="newton")
    assert float(sol.tangent_norm) <= 1e-14 * np.linalg.norm(G)
    assert float(sol.Phi.abs().max()) == 0.0 and bool(sol.converged)


# -- bad input ------------------------------------------------------------------------------------------------------
def test_bad_input_gives_clear_errors():
    rng = np.random.default_rng(11)
    W, G = _point(rng, 6, 3), rng.standard_normal((6, 3))
    with pytest.raises(ValueError, match="m >= n"):
        stiefel_direction(W.T.copy(), G.T.copy(), solver="newton")
    with pytest.raises(ValueError, match="not a point of St"):
        stiefel_direction(2 * W, G, solver="newton")
    bad = G.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="G must be finite"):
        stiefel_direction(W, bad, solver="newton")
    with pytest.raises(ValueError, match="same matrix shape"):
        stiefel_direction(W, G[:5], solver="newton")
    with pytest.raises(ValueError, match="solver must be one of"):
        stiefel_direction(W, G, solver="magic")
    with pytest.raises(ValueError, match="tol"):
        stiefel_direction(W, G, solver="newton", tol=0.0)
    with pytest.raises(ValueError, match="X0 must be"):
        stiefel_direction(W, G, solver="newton", X0=np.zeros((4, 4)))
    with pytest.raises(TypeError, match="orthogonalize"):
        stiefel_direction(W, G, solver="fixed_point", orthogonalize=3)
    with pytest.raises(TypeError, match="W must be"):
        stiefel_direction([[1.0]], G, solver="newton")


@pytest.mark.parametrize("method", ["newton", "fixed_point_reduced", "fixed_point"])
@pytest.mark.parametrize("scale", [1e-300, 1e-25, 1e25, 1e200])
def test_the_direction_does_not_depend_on_the_size_of_g(method, scale):
    # Φ(cG) = Φ(G) and X(cG) = c X(G) for c > 0 (the problem is positively homogeneous); the solver divides G by
    # a power of two first, so huge and tiny gradients neither overflow nor underflow (float64 here)
    W, G = CASES["12x5"]
    ref = stiefel_direction(W, G, solver=method, tol=1e-9)
    sol = stiefel_direction(W, scale * G, solver=method, tol=1e-9)
    assert sol.converged and np.isfinite(sol.Phi).all()
    np.testing.assert_allclose(sol.Phi, ref.Phi, rtol=0, atol=1e-8)
    np.testing.assert_allclose(sol.X / scale, ref.X, rtol=1e-7, atol=1e-7 * np.abs(ref.X).max())
    if method == "newton":
        assert float(sol.tangent_norm) / scale == pytest.approx(float(ref.tangent_norm), rel=1e-12)


def test_float32_gradients_near_the_ends_of_the_range():
    rng = np.random.default_rng(14)
    W = _point(rng, 64, 16).astype(np.float32)
    G = rng.standard_normal((64, 16)).astype(np.float32)
    St = ss_Stiefel()
    ref = stiefel_direction(St.project(W.astype(np.float64)), G.astype(np.float64), solver="newton", tol=1e-10)  # W to 1e-7
    for scale in (1e-30, 1e30):
        sol = stiefel_direction(torch.from_numpy(W), torch.from_numpy(G * np.float32(scale)), solver="newton")
        assert sol.converged and float(np.linalg.norm(sol.Phi.numpy(), 2)) <= 1 + 1e-5
        np.testing.assert_allclose(sol.Phi.numpy(), ref.Phi, rtol=0, atol=1e-4)
        Phi = St.steepest_direction(torch.from_numpy(W), torch.from_numpy(G * np.float32(scale)))
        np.testing.assert_allclose(Phi.numpy(), ref.Phi, rtol=0, atol=1e-4)


def ss_Stiefel():
    from svmuon import Stiefel

    return Stiefel(solver="newton")  # compared with the exact direction


@pytest.mark.parametrize("size", [1e6, 1e15, 1e20])
def test_a_far_warm_start_still_reaches_the_optimum(size):
    # a stale or mis-scaled X0 (here size·I and a random symmetric one): the iterate is re-symmetrised after every
    # step, and a start far from the optimum (residual near its bound 2√n) is dropped for the cold one when its
    # dual value is worse; the answer is the cold solution's (whose value the SDP checks, test above)
    W, G = CASES["8x3"]
    cold = stiefel_direction(W, G, solver="newton", tol=1e-9)
    rng = np.random.default_rng(15)
    S = rng.standard_normal((3, 3))
    for X0 in (size * np.eye(3), size * (S + S.T)):
        sol = stiefel_direction(W, G, solver="newton", tol=1e-9, X0=X0)
        assert sol.converged
        np.testing.assert_allclose(sol.X, sol.X.T, rtol=0, atol=1e-12 * max(1.0, np.abs(sol.X).max()))
        # both at residual <= 1e-9: the values differ by O(residual · ‖G‖) (the dual gap of a feasible point)
        assert float((G * sol.Phi).sum()) == pytest.approx(float((G * cold.Phi).sum()), rel=1e-9)


def test_warm_start_in_the_reduced_multiplier():
    W, G = CASES["12x5"]
    sol = stiefel_direction(W, G, solver="newton", tol=1e-10)
    np.testing.assert_allclose(sol.Y, sol.X + (W.T @ G + G.T @ W) / 2, rtol=0, atol=1e-12)
    again = stiefel_direction(W, G, solver="newton", tol=1e-10, Y0=sol.Y)
    assert again.iterations == 0
    for method in ("fixed_point", "fixed_point_reduced"):  # Y0 reaches the other solvers as X0 = Y0 - [WᵀG]_sym
        assert stiefel_direction(W, G, tol=1e-9, Y0=sol.Y, solver=method).iterations <= 1


def test_bad_warm_starts_give_clear_errors():
    W, G = CASES["8x3"]
    with pytest.raises(ValueError, match="X0 or Y0"):
        stiefel_direction(W, G, solver="newton", X0=np.zeros((3, 3)), Y0=np.zeros((3, 3)))
    with pytest.raises(ValueError, match="X0 has batch dimensions"):
        stiefel_direction(W, G, solver="newton", X0=np.zeros((2, 3, 3)))
    with pytest.raises(ValueError, match="Y0 is too large"):
        stiefel_direction(W, G, solver="newton", Y0=1e200 * np.eye(3))
    with pytest.raises(ValueError, match="Y0 must be finite"):
        stiefel_direction(W, G, solver="newton", Y0=np.full((3, 3), np.nan))


def test_the_optimum_is_not_unique_for_a_rank_deficient_gradient():
    # the SDP over its optimal face, pushed towards +Z and -Z, finds two optimal directions far apart; Newton's
    # (the least-norm completion of prop-stiefel-rank) is optimal too. On a full-rank draw the face is a point:
    # the two tiebreaks differ only by what the 1e-7 slack allows (O(√slack))
    W, G = CASES["rank2_G_12x5"]
    Z = np.random.default_rng(16).standard_normal(G.shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        P1, v = stiefel_direction_sdp(W, G, tiebreak=Z)
        P2, _ = stiefel_direction_sdp(W, G, tiebreak=-Z)
        W8, G8 = CASES["8x3"]
        Q1, _ = stiefel_direction_sdp(W8, G8, tiebreak=Z[:8, :3])
        Q2, _ = stiefel_direction_sdp(W8, G8, tiebreak=-Z[:8, :3])
    P3 = stiefel_direction(W, G, solver="newton", tol=1e-10).Phi
    for P in (P1, P2, P3):
        assert float(np.sum(G * P)) == pytest.approx(v, rel=2e-7)  # the face's slack, 1e-7, plus the SDP's accuracy
        assert np.linalg.norm(W.T @ P + P.T @ W) <= 1e-8 and np.linalg.norm(P, 2) <= 1 + 1e-6
    assert np.linalg.norm(P1 - P2) > 1.0 and np.linalg.norm(P1 - P3) > 0.5
    assert np.linalg.norm(Q1 - Q2) < 0.05


def test_answer_key_and_default_tol_refuse_bad_input():
    from svmuon.orthogonal.stiefel import default_tol

    W, G = CASES["8x3"]
    for kw, match in ((dict(tiebreak=np.full((8, 3), np.nan)), "tiebreak must be a finite array"),
                      (dict(tiebreak=np.ones((3, 3))), "tiebreak must be a finite array"),
                      (dict(tiebreak=np.ones((8, 3)), slack=-1e-3), "slack must be a finite number"),
                      (dict(tiebreak=np.ones((8, 3)), slack=float("nan")), "slack must be a finite number")):
        with pytest.raises(ValueError, match=match):
            stiefel_direction_sdp(W, G, **kw)
    with pytest.raises(TypeError, match="dtype must be"):
        default_tol(torch.float16, 4)
    with pytest.raises(TypeError, match="n must be an integer"):
        default_tol(torch.float32, 2.5)
    with pytest.raises(ValueError, match="n must be an integer"):
        default_tol(torch.float32, 0)


# -- rank-deficient gradients (prop-stiefel-rank) -----------------------------------------------------------------
@pytest.mark.parametrize("shape,r", [((12, 5), 3), ((16, 15), 10), ((30, 10), 9)])
def test_rank_deficient_gradient_reduces_to_its_row_space(shape, r):
    rng = np.random.default_rng(12)
    m, n = shape
    W = _point(rng, m, n)
    G = rng.standard_normal((m, r)) @ rng.standard_normal((r, n))
    _, value = _sdp(W, G)
    sol = stiefel_direction(W, G, solver="newton", tol=1e-9)
    # the same optimum as the SDP, reached through the reduced problem on St(m, r) plus the completion
    assert np.sum(G * sol.Phi) == pytest.approx(value, rel=1e-6)
    assert float(tangent_residual(W, sol.Phi)) <= 1e-8
    s = np.linalg.svd(sol.Phi, compute_uv=False)
    assert s.max() <= 1 + 1e-8
    # value of the reduced problem (W_R, G_R) on the row space equals the full one (independent solve)
    _, Q = np.linalg.eigh(G.T @ G)
    QR = Q[:, ::-1][:, :r]
    reduced = stiefel_direction(W @ QR, G @ QR, solver="newton", tol=1e-10)
    assert np.sum((G @ QR) * reduced.Phi) == pytest.approx(value, rel=1e-6)


@pytest.mark.parametrize("m,n,r,seed", [(9, 7, 3, 11), (9, 7, 3, 6), (7, 5, 4, 8), (8, 6, 3, 2), (8, 6, 3, 8)])
def test_rank_deficient_completion_stays_feasible(m, n, r, seed):
    # found by a random search (rank-r G, m - n < r, so D = PᵀP in the completion is singular): the completion
    # amplified the reduced solve's error, and the previous version returned ‖Φ‖₂ = 1.0001 flagged converged
    # (9×7, seed 11) or ‖Φ‖₂ = 1054 (7×5, seed 8), or stalled (9×7 seed 6, 8×6 seed 2). Now: float64 completion, ΦᵀΦ checked whole, a
    # tight second reduced solve, tangent projection, and ‖Φ‖₂ <= 1 by scaling. Answer key: the SDP.
    rng = np.random.default_rng(seed)
    W = ss_Stiefel().project(rng.standard_normal((m, n)))  # the polar factor, as in the search
    G = rng.standard_normal((m, r)) @ rng.standard_normal((r, n))
    sol = stiefel_direction(W, G, solver="newton", tol=1e-6)
    _, value = _sdp(W, G)
    assert sol.converged and float(sol.residual) <= 1e-6
    assert np.linalg.norm(sol.Phi, 2) <= 1 + 1e-8
    assert float(np.sum(G * sol.Phi)) == pytest.approx(value, rel=1e-6)


@pytest.mark.slow  # 3.8 s of CPU (one thread, the shared 2-core machine): 60 SDPs
def test_random_instances_against_the_sdp():
    # a random sweep like the one that found the cases above: shapes up to 12 rows, a random rank (30 %), sizes
    # over 16 orders of magnitude. On each: the value within 1e-6 of the SDP's (relative) and ‖Φ‖₂ <= 1 + 1e-8,
    # as the hard targets; the residual within 5e-8 rather than 1e-8, because at a singular optimum
    # the assembly of Φ divides by ε = 1e-6 σ̄ and so amplifies rounding (measured: 1.3e-8 on a square 3×3, whose
    # [WᵀG]_skew is singular, against <= 5e-9 elsewhere). The sweep also holds a square rank-1 G, where a
    # version of the completion returned a direction 26 % below the optimum.
    rng = np.random.default_rng(20261201)
    St = ss_Stiefel()
    for _ in range(60):
        m = int(rng.integers(2, 13))
        n = int(rng.integers(1, m + 1))
        W = St.project(rng.standard_normal((m, n)))
        r = int(rng.integers(1, n + 1)) if rng.random() < 0.3 else n
        G = (rng.standard_normal((m, r)) @ rng.standard_normal((r, n))) * 10.0 ** rng.uniform(-8, 8)
        sol = stiefel_direction(W, G, solver="newton", tol=1e-9, max_iter=200)
        Gn = G / np.abs(G).max()
        _, value = _sdp(W, Gn)
        label = f"{m}x{n}, rank {r}"
        assert float(np.sum(Gn * sol.Phi)) == pytest.approx(value, rel=1e-6), label
        # the amplified floor measured above (1.3e-8) with margin; ‖Φ‖₂ <= 1 holds by construction, 1e-8 is rounding
        assert float(sol.residual) <= 5e-8 and np.linalg.norm(sol.Phi, 2) <= 1 + 1e-8, label


@pytest.mark.parametrize("m,n,seed", [(3, 2, 0), (7, 5, 1), (9, 6, 2), (13, 12, 3), (15, 14, 4)])
def test_float32_near_singular_optimum(m, n, seed):
    # odd m with n > m/2: a singular optimum. In float32 the iteration stalled (residual up to 0.7, values 20 %
    # off, ‖Φ‖₂ up to 1.3 on a random sweep); it now runs in float64 on a Björck-corrected W and returns float32
    rng = np.random.default_rng(seed)
    W64 = ss_Stiefel().project(rng.standard_normal((m, n)))
    W, G = W64.astype(np.float32), rng.standard_normal((m, n)).astype(np.float32)
    sol = stiefel_direction(torch.from_numpy(W), torch.from_numpy(G), solver="newton", tol=1e-5)
    assert sol.Phi.dtype == torch.float32 and sol.converged
    Phi = sol.Phi.double().numpy()
    _, value = _sdp(ss_Stiefel().project(W.astype(np.float64)), G.astype(np.float64))
    assert float(np.sum(G * Phi)) == pytest.approx(value, rel=1e-5)
    assert np.linalg.norm(Phi, 2) <= 1 + 1e-6


def test_rank_precheck_and_batched_mixture():
    rng = np.random.default_rng(13)
    W = np.stack([_point(rng, 10, 4) for _ in range(2)])
    G = rng.standard_normal((2, 10, 4))
    G[1] = rng.standard_normal((10, 2)) @ rng.standard_normal((2, 4))  # rank 2
    from svmuon.orthogonal.stiefel.rank import deficient_rank

    grams = torch.from_numpy(np.einsum("bij,bik->bjk", G, G))
    assert not deficient_rank(torch.from_numpy(G[0]), grams[0])
    assert deficient_rank(torch.from_numpy(G[1]), grams[1])
    batch = stiefel_direction(W, G, solver="newton", tol=1e-10)
    for i in range(2):
        one = stiefel_direction(W[i], G[i], solver="newton", tol=1e-10)
        # both stop at tol = 1e-10; the rank-2 matrix goes through the row-space reduction, κ larger: 1e-8
        np.testing.assert_allclose(batch.Phi[i], one.Phi, rtol=0, atol=1e-8)
