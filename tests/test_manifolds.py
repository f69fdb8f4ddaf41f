"""Tests of svmuon.orthogonal.manifolds: sym/skew, tangent projection, the closed-form direction, retraction."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from conftest import TOL
from svmuon.orthogonal.manifolds import Orthogonal, skew, sym
from svmuon.orthogonal.msign import msign
from svmuon.orthogonal.symbolic import reference_direction_sdp

M = Orthogonal()


def _random_orthogonal(n, gen, dtype=torch.float64, batch=()):
    return M.random(*batch, n, n, generator=gen, dtype=dtype)


def test_sym_skew_split(gen):
    A = torch.randn(3, 5, 5, generator=gen, dtype=torch.float64)
    S, K = sym(A), skew(A)
    assert torch.equal(S, S.mT) and torch.equal(K, -K.mT)
    torch.testing.assert_close(S + K, A, **TOL[torch.float64])
    assert isinstance(skew(A.numpy()), np.ndarray)
    with pytest.raises(ValueError, match="M must be square"):
        sym(torch.zeros(2, 3))
    with pytest.raises(TypeError, match="M"):
        skew([[0.0]])


@pytest.mark.parametrize("n", [2, 3, 6])
def test_tangent_projection(n, gen):
    W = _random_orthogonal(n, gen, batch=(4,))
    Z = torch.randn(4, n, n, generator=gen, dtype=torch.float64)
    D = M.project_tangent(W, Z)
    # tangent: WᵀD is skew, i.e. WᵀD + DᵀW = 0 (float64 rounding of two matmuls: TOL atol 1e-12)
    torch.testing.assert_close(W.mT @ D + D.mT @ W, torch.zeros_like(D), **TOL[torch.float64])
    torch.testing.assert_close(M.project_tangent(W, D), D, **TOL[torch.float64])  # idempotent
    # orthogonal projection: the residual Z - D is orthogonal to every tangent vector (Frobenius)
    T = M.project_tangent(W, torch.randn(4, n, n, generator=gen, dtype=torch.float64))
    assert torch.allclose(((Z - D) * T).sum(dim=(-2, -1)), torch.zeros(4, dtype=torch.float64), atol=1e-12)


@pytest.mark.parametrize("n", [3, 4, 5])
def test_msign_maps_skew_to_skew(n, gen):
    # thm-skew-msign: for skew A, msign(A) is skew. Independent route: SVD msign with no re-projection.
    A = skew(torch.randn(6, n, n, generator=gen, dtype=torch.float64))
    O = msign(A, method="svd")
    torch.testing.assert_close(O, -O.mT, rtol=0, atol=1e-12)  # 1e-12: a few ulps of an SVD of unit scale
    rank = torch.linalg.matrix_rank(O)
    assert bool((rank == (n - n % 2)).all())  # odd n: one zero singular value stays zero
    P = O.mT @ O  # a projector
    torch.testing.assert_close(P @ P, P, rtol=0, atol=1e-12)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6])
def test_direction_matches_sdp(n):
    # eq-orth-direction against cvxpy's SDP optimum (CLARABEL, gap/feasibility tol 1e-9):
    # objectives within 1e-6 as the issue asks; the solver tolerance leaves three orders of headroom.
    rng = np.random.default_rng(n)
    W = M.project(rng.standard_normal((n, n)))
    G = rng.standard_normal((n, n))
    Phi_sdp, value = reference_direction_sdp(W, G)
    Phi = M.steepest_direction(W, G)
    assert abs(np.trace(G.T @ Phi) - value) <= 1e-6
    nuclear = np.linalg.svd(skew(W.T @ G), compute_uv=False).sum()  # value = ‖[WᵀG]_skew‖_*
    assert abs(value - nuclear) <= 1e-6
    # the closed form is feasible: spectral norm 1 and tangent
    assert np.linalg.norm(Phi, 2) <= 1 + 1e-12
    np.testing.assert_allclose(W.T @ Phi + Phi.T @ W, 0, atol=1e-12)


@pytest.mark.parametrize("n", [3, 4])
@pytest.mark.parametrize("eta", [1e-3, 0.3, 2.0])
def test_retraction_is_orthogonal_and_first_order(n, eta, gen):
    W = _random_orthogonal(n, gen, batch=(5,))
    G = torch.randn(5, n, n, generator=gen, dtype=torch.float64)
    O = M.skew_direction(W, G)
    W1 = M.retract_along(W, W @ O, eta)
    assert float(M.orthogonality_error(W1).max()) <= 1e-13  # float64: O(n) ulps of unit-size products
    # first order: W1 = W - ηWO + O(η²); compare with the uncorrected step W(I - ηO)
    step = W - eta * W @ O
    assert float((W1 - step).abs().max()) <= eta**2  # the correction is W((s-1)OᵀO - η(s-1)O) = O(η²)
    # against the polar factor route msign(W(I - ηO)) (the seed's first form of the update)
    torch.testing.assert_close(W1, msign(step, method="svd"), rtol=0, atol=1e-12)


def test_retract_rejects_bad_eta(gen):
    W = _random_orthogonal(3, gen)
    with pytest.raises(ValueError, match="eta"):
        M.retract_along(W, torch.zeros(3, 3, dtype=torch.float64), -0.1)
    with pytest.raises(ValueError, match="eta"):
        M.retract_along(W, torch.zeros(3, 3, dtype=torch.float64), float("nan"))


def test_check_point_project_and_polar_correction(gen):
    A = torch.randn(4, 5, 5, generator=gen, dtype=torch.float64)
    assert not M.check_point(A) and not M.check_point(torch.zeros(3, 4)) and not M.check_point(torch.zeros(2))
    Q = M.project(A)
    # U Vᵀ from LAPACK's SVD: orthonormal to ~n u per entry (measured 2.7e-15 over 200 draws)
    assert M.check_point(Q, atol=1e-13)
    # nearest orthogonal matrix = U Vᵀ of the SVD (schonemann1966procrustes), independent of msign
    U, _, Vh = torch.linalg.svd(A)
    torch.testing.assert_close(Q, U @ Vh, rtol=0, atol=1e-12)
    singular = torch.diag(torch.tensor([1.0, 1.0, 0.0], dtype=torch.float64))
    assert M.check_point(M.project(singular), atol=1e-13)  # still orthogonal for singular input
    # Björck: ε -> about 3ε²/4
    E = 1e-4 * sym(torch.randn(5, 5, generator=gen, dtype=torch.float64))
    Wp = Q[0] @ (torch.eye(5, dtype=torch.float64) + E)
    before, after = float(M.orthogonality_error(Wp)), float(M.orthogonality_error(M.polar_correction(Wp)))
    assert after <= 2 * before**2


def test_orthogonal_options():
    # the msign route belongs to the optimizer (one owner): a manifold refuses msign options, naming where they go
    for options in (dict(msign_method="newton_schulz"), dict(ns_steps=3)):
        with pytest.raises(TypeError, match="ManifoldMuon"):
            Orthogonal(**options)
    with pytest.raises(TypeError, match="unexpected options"):
        Orthogonal(solver="x")


def test_skew_direction_refuses_a_matrix_that_is_not_a_point(gen):
    """As steepest_direction: the formula Φ = W msign([WᵀG]_skew) holds at points only (it returned an answer for a
    Gaussian W before)."""
    W = torch.randn(4, 4, generator=gen, dtype=torch.float64)
    with pytest.raises(ValueError, match="not a point of Orthogonal.*project"):
        M.skew_direction(W, torch.randn(4, 4, generator=gen, dtype=torch.float64))


def test_bad_input_regressions(gen):
    # reviewer probe: NaN inputs, huge/str eta and mismatched shapes used to give NaN or raw torch errors
    W = _random_orthogonal(4, gen)
    O = M.skew_direction(W, torch.randn(4, 4, generator=gen, dtype=torch.float64))
    nan = torch.full((4, 4), float("nan"), dtype=torch.float64)
    W_before = W.clone()
    Phi = W @ O
    with pytest.raises(ValueError, match="W must be finite"):
        M.retract_along(nan, Phi, 0.1)
    with pytest.raises(ValueError, match="Phi must be finite"):
        M.retract_along(W, nan, 0.1)
    with pytest.raises(TypeError, match="eta"):
        M.retract_along(W, Phi, "a")
    for bad in (float("inf"), 10**400):
        with pytest.raises(ValueError, match="eta"):
            M.retract_along(W, Phi, bad)
    with pytest.raises(ValueError, match="same matrix shape"):
        M.retract_along(W, Phi[:3, :3], 0.1)
    with pytest.raises(ValueError, match="batch dimensions"):
        M.retract_along(W, Phi.expand(2, 4, 4), 0.1)
    with pytest.raises(ValueError, match="non-finite result"):
        M.retract_along(W, 1e200 * Phi, 1.0)
    assert torch.equal(W, W_before)
    # huge eta: finite and orthogonal, tending to -WO (O is a full-rank partial isometry for even n)
    W_big = M.retract_along(W, Phi, 1e200)
    assert float(M.orthogonality_error(W_big)) <= 1e-13
    torch.testing.assert_close(W_big, -W @ O, rtol=0, atol=1e-12)
    # a batched W with one shared O broadcasts
    torch.testing.assert_close(M.retract_along(torch.stack([W, W]), Phi, 0.3)[1], M.retract_along(W, Phi, 0.3))
    with pytest.raises(ValueError, match="Z must be finite"):
        M.project_tangent(W, nan)
    with pytest.raises(ValueError, match="W must be finite"):
        M.polar_correction(nan)
    with pytest.raises(ValueError, match="W must be finite"):
        M.skew_direction(nan, O)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_public_functions_refuse_non_finite_input(bad, gen):
    W = _random_orthogonal(4, gen)
    Wbad = W.clone()
    Wbad[1, 2] = bad
    for fn in (sym, skew, M.polar_correction, M.orthogonality_error, M.defect):
        with pytest.raises(ValueError, match="must be finite.*NaN|must be finite"):
            fn(Wbad)
    with pytest.raises(ValueError, match="W must be finite"):
        M.retract(Wbad, torch.zeros(4, 4, dtype=torch.float64))
    assert not M.check_point(Wbad)  # a predicate: False, not an error


def test_check_point_atol_is_checked(gen):
    W = _random_orthogonal(3, gen)
    with pytest.raises(TypeError, match="atol must be None or a real number"):
        M.check_point(W, atol="x")
    with pytest.raises(TypeError, match="atol"):
        M.check_point(W, atol=True)
    with pytest.raises(ValueError, match="atol"):
        M.check_point(W, atol=float("nan"))
    with pytest.raises(ValueError, match="atol"):
        M.check_point(W, atol=-1e-3)
    assert M.check_point(W, atol=None) and M.check_point(W, atol=np.float32(1e-6))


def test_polar_retraction_is_the_nearest_point(gen):
    # retract(W, Ξ) = msign(W + Ξ): against the SVD polar factor U Vᵀ of W + Ξ, computed here
    W = _random_orthogonal(5, gen, batch=(3,))
    Xi = M.project_tangent(W, 0.7 * torch.randn(3, 5, 5, generator=gen, dtype=torch.float64))
    U, _, Vh = torch.linalg.svd(W + Xi)
    torch.testing.assert_close(M.retract(W, Xi), U @ Vh, rtol=0, atol=1e-13)  # float64, well conditioned
    assert float(M.orthogonality_error(M.retract(W, Xi)).max()) <= 1e-14


def test_drift_factor_of_the_bands():
    from svmuon.orthogonal.coefficients import KELLER_JORDAN_BAND
    from svmuon.orthogonal.manifolds import drift_factor

    hi = KELLER_JORDAN_BAND[1]
    assert drift_factor(KELLER_JORDAN_BAND) == pytest.approx(hi**2 * (hi**2 - 1))  # the upper end wins
    assert round(drift_factor(KELLER_JORDAN_BAND), 3) == 0.644  # the number the chapter quotes
    assert drift_factor((1.0, 1.0)) == 0.0  # an exact msign: σ ∈ {0, 1}
    assert drift_factor((0.0, 1.0)) == 0.25  # max σ²(1 - σ²) at σ² = 1/2
    grid = np.linspace(0.0, 0.9, 9001)  # independent: a grid maximum of σ²|σ² - 1| on [0, 0.9]
    assert drift_factor((0.0, 0.9)) == pytest.approx(np.max(grid**2 * np.abs(grid**2 - 1)), rel=1e-6)
    # review fix: a NaN end gave nan, a reversed or negative range a made-up number
    for bad in ((float("nan"), 1.0), (2.0, 1.0), (-1.0, 0.5), (0.0, float("inf"))):
        with pytest.raises(ValueError, match="sigma_range"):
            drift_factor(bad)
    for bad in (5, (1.0,), ("a", 1.0), (True, 1.0)):
        with pytest.raises(TypeError, match="sigma_range"):
            drift_factor(bad)


def test_one_step_defect_of_an_inexact_msign_is_the_predicted_one(gen):
    """eq-orth-drift, as the chapter shows it: the optimizer's retraction kernel along a skew O whose singular values
    σ are not 0 or 1 (the 5-step quintic) leaves ‖QᵀQ - I‖₂ = max σ²(1 - s)²|σ² - 1|, s = 1/√(1 + η²), from W = I.
    Independent route: the singular values of O by svdvals, and the formula derived in SymPy in the chapter.
    Tolerance: the float64 rounding of QᵀQ, a few n eps ≈ 1e-15, against a defect of ~5e-6. The public
    retract_along would return the exact polar factor here (its fallback), so the kernel is called."""
    from svmuon.orthogonal.coefficients import KELLER_JORDAN_BAND
    from svmuon.orthogonal.manifolds import drift_factor
    from svmuon.orthogonal.msign import Orthogonalizer

    quintic = Orthogonalizer("newton_schulz", ns_coefficients="keller_jordan", ns_steps=5)
    eye = torch.eye(6, dtype=torch.float64)
    for eta in (0.05, 0.1, 0.3):
        W = _random_orthogonal(6, gen)
        O = M.skew_direction(W, torch.randn(6, 6, generator=gen, dtype=torch.float64), orthogonalize=quintic)
        sv = torch.linalg.svdvals(O)
        assert float((sv - 1).abs().min()) > 1e-3  # not a partial isometry: the case the formula is about
        s = 1 / math.sqrt(1 + eta**2)
        Q = M.retract_direction(eye[None], O[None], torch.full((1, 1, 1), eta, dtype=torch.float64), eta)[0]
        measured = float(torch.linalg.matrix_norm(Q.T @ Q - eye, 2))
        predicted = float((sv**2 * (s - 1) ** 2 * (sv**2 - 1)).abs().max())
        assert abs(measured - predicted) <= 1e-12
        assert measured <= drift_factor(KELLER_JORDAN_BAND) * (s - 1) ** 2
        assert float(M.orthogonality_error(M.retract_along(eye, O, eta))) <= 1e-14  # the public method repairs it


def test_steepest_direction_and_retract_along_numpy_and_batches(gen):
    W = _random_orthogonal(4, gen, batch=(2,))
    G = torch.randn(4, 4, generator=gen, dtype=torch.float64)  # one gradient broadcast over the batch
    Phi = M.steepest_direction(W, G)
    assert Phi.shape == (2, 4, 4)
    torch.testing.assert_close(Phi[1], M.steepest_direction(W[1], G), rtol=0, atol=1e-14)
    out = M.retract_along(W.numpy(), Phi.numpy(), 0.2)
    assert isinstance(out, np.ndarray) and out.shape == (2, 4, 4)
    with pytest.raises(ValueError, match="square"):
        M.steepest_direction(torch.zeros(4, 3, dtype=torch.float64), torch.zeros(4, 3, dtype=torch.float64))


def test_gradients_near_the_largest_float(gen):
    # Review fix: with entries near float32's maximum, WᵀG overflowed: steepest_direction and skew_direction returned
    # a wrong direction (an exactly zero column: the SVD route reads the inf/NaN as 0) and project_tangent returned
    # NaN, silently. Expected: the float64 results for the unscaled G (Φ and O are scale invariant); 1e-6 is a few
    # float32 roundings of an orthonormal result.
    W = _random_orthogonal(5, gen)
    G = torch.randn(5, 5, generator=gen, dtype=torch.float64)
    G = G / G.abs().max()
    for c in (3e38, 1e38):
        Gc = (G * c).float()
        torch.testing.assert_close(M.steepest_direction(W.float(), Gc).double(), M.steepest_direction(W, G),
                                   rtol=0, atol=1e-6)
        torch.testing.assert_close(M.skew_direction(W.float(), Gc).double(), M.skew_direction(W, G), rtol=0, atol=1e-6)
    # P_W is linear: P_W(cG) / c for c = 1e37 is representable and equals P_W(G). P_W is self-adjoint, so
    # P_W(Z)_00 = <P_W(E_00), Z>, which for Z = 3e38 sign(P_W(E_00)) is 3e38 ‖P_W(E_00)‖_1 > 3.4e38 (checked): that
    # result leaves the float32 range, and is refused instead of returned as NaN
    torch.testing.assert_close(M.project_tangent(W.float(), (G * 1e37).float()).double() / 1e37,
                               M.project_tangent(W, G), rtol=0, atol=1e-6)
    E = torch.zeros(5, 5, dtype=torch.float64)
    E[0, 0] = 1.0
    A = M.project_tangent(W, E)
    assert 3e38 * float(A.abs().sum()) > 3.5e38
    with pytest.raises(ValueError, match="beyond the range"):
        M.project_tangent(W.float(), (3e38 * A.sign()).float())


def test_results_out_of_range_are_refused(gen):
    # Review fix: polar_correction of a matrix far from orthogonal returned -inf; retract_along with an eta beyond
    # float32 raised torch's "value cannot be converted to type float without overflow"; retract of an enormous
    # non-tangent Xi returned a rank-one matrix (msign of the singular W + Xi), not a point.
    W = _random_orthogonal(4, gen, dtype=torch.float32)
    with pytest.raises(ValueError, match="polar_correction.*overflows"):
        M.polar_correction(torch.full((3, 3), 3e38))
    Phi = M.steepest_direction(W, torch.randn(4, 4, generator=gen))
    with pytest.raises(ValueError, match="eta.*float32"):
        M.retract_along(W, Phi, 1e300)
    assert M.check_point(M.retract_along(W, Phi, 1e30))  # large but representable: the limit point, fine
    with pytest.raises(ValueError, match="singular"):
        M.retract(W, torch.full((4, 4), 3e38))
