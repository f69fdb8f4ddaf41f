"""msign by SVD and by Newton–Schulz against matrices with chosen spectra, properties, bad inputs, and the SDP.

Every expected polar factor is built, not computed: G = U diag(s) Vᵀ with random orthogonal U, V (QR of a
Gaussian), so msign(G) = U_r V_rᵀ is known exactly; the Newton–Schulz iterates are compared with the scalar
maps applied to s (NumPy, float64), and the steepest-descent value with an SDP solved by cvxpy.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from helpers import orthonormal, with_spectrum
from hypothesis import strategies as st

from svmuon.orthogonal import msign
from svmuon.orthogonal.msign import power_of_two_scale
from svmuon.orthogonal.coefficients import scalar_map

F64 = torch.float64


def with_polar(s, m: int, n: int, gen: torch.Generator):
    """(G, U_r V_rᵀ) for G = U diag(s) Vᵀ of shape (m, n) (tests/helpers.py): the polar factor is known."""
    G, U, V = with_spectrum(s, m, n, gen, factors=True)
    keep = (torch.as_tensor(s, dtype=F64) > 0).to(F64)
    return G, (U * keep) @ V.T


SPECTRA = {
    "generic": [3.0, 2.0, 1.5, 1.0, 0.5],
    "clustered": [1.0 + 1e-6 * i for i in range(5)],
    "repeated": [2.0, 2.0, 2.0, 0.5, 0.5],
    "tiny": [1e-30 * v for v in (3.0, 2.0, 1.5, 1.0, 0.5)],
    "huge": [1e30 * v for v in (3.0, 2.0, 1.5, 1.0, 0.5)],
    "zeros": [2.0, 1.0, 0.7, 0.0, 0.0],
    "rank_one": [5.0, 0.0, 0.0, 0.0, 0.0],
}


@pytest.mark.parametrize("shape", [(9, 5), (5, 9), (5, 5)])
@pytest.mark.parametrize("name", sorted(SPECTRA))
def test_svd_matches_built_polar_factor(name, shape, gen):
    G, expected = with_polar(SPECTRA[name], *shape, gen)
    # float64: polar-factor perturbation <= ~eps * s_max / s_r (s_max / s_r <= 10 here, 6 for zeros) plus
    # the SVD's backward error ~ n eps; 1e-12 leaves ~500x headroom over eps = 2.2e-16.
    torch.testing.assert_close(msign(G), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("schedule,steps", [("polar_express", 10), ("cubic", 30), ("keller_jordan", 5)])
@pytest.mark.parametrize("shape", [(9, 5), (5, 9)])
def test_newton_schulz_acts_as_scalar_map_on_singular_values(schedule, steps, shape, gen):
    s = torch.tensor([3.0, 2.0, 1.5, 0.2, 0.01], dtype=F64)
    G, U, V = with_spectrum(s, *shape, gen, factors=True)
    x = (s / torch.linalg.vector_norm(s)).numpy()  # singular values of G / ‖G‖_F
    mapped = torch.from_numpy(scalar_map(x, schedule, steps)[-1])
    # float64 compute: the matrix iteration equals U diag(p(x)) Vᵀ up to ~steps * n * eps amplified by
    # the maps' slopes (<= 8.2 for polar express); 1e-10 is ~1e5 eps.
    out = msign(G, method="newton_schulz", ns_coefficients=schedule, ns_steps=steps, compute_dtype=F64)
    torch.testing.assert_close(out, (U * mapped) @ V.T, rtol=0, atol=1e-10)


@pytest.mark.parametrize("schedule", ["polar_express", "cubic"])
@pytest.mark.parametrize("name", ["generic", "clustered", "repeated", "tiny", "huge"])
def test_converging_schedules_reach_polar_factor(schedule, name, gen):
    G, expected = with_polar(SPECTRA[name], 9, 5, gen)
    out64 = msign(G, method="newton_schulz", ns_coefficients=schedule)  # float64 input -> float64 compute
    # these spectra have s_min / ‖G‖_F >= 0.1, well inside both schedules' convergence range: the iterates
    # sit at 1 to float64 rounding; 1e-12 as for the SVD.
    torch.testing.assert_close(out64, expected, rtol=0, atol=1e-12)
    out32 = msign(G.float(), method="newton_schulz", ns_coefficients=schedule)
    assert out32.dtype == torch.float32
    # float32 compute: ~ steps * eps32 * slope; 1e-5 is ~100 eps32 = 1.2e-7.
    torch.testing.assert_close(out32, expected.float(), rtol=0, atol=1e-5)


def test_newton_schulz_rank_deficient_keeps_zero_directions(gen):
    G, expected = with_polar(SPECTRA["zeros"], 9, 5, gen)
    out = msign(G, method="newton_schulz")
    # zero singular values stay (numerically) zero: odd polynomials map 0 to 0; rounding noise of size
    # eps * ‖G‖ in those directions grows by at most prod(a_t) ~ 1e4 for polar express: 1e-10.
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-10)


def test_keller_jordan_does_not_converge(gen):
    G, expected = with_polar([3.0, 2.0, 1.5, 0.2, 0.01], 9, 5, gen)
    out = msign(G, method="newton_schulz", ns_coefficients="keller_jordan", ns_steps=5, compute_dtype=F64)
    sv = torch.linalg.svdvals(out)
    assert 0.4 < float(sv.min()) and float(sv.max()) < 1.25  # measured band on (1e-3, 1]: [0.47, 1.20]
    assert float((out - expected).abs().max()) > 0.05  # it is not the polar factor


@pytest.mark.parametrize("method", ["svd", "newton_schulz"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_scale_invariance_whole_float_range(method, dtype, gen):
    G = torch.randn(6, 4, generator=gen, dtype=dtype)
    base = msign(G, method=method)
    fin = torch.finfo(dtype)
    # the smallest exponent keeping every entry normal (a subnormal G * 2**e is rounded, so not exact)
    lo_exp = int(np.log2(fin.tiny)) - int(np.floor(np.log2(float(G.abs().min())))) + 1
    hi_exp = int(np.log2(fin.max)) - int(np.ceil(np.log2(float(G.abs().max())))) - 1
    for e in (lo_exp, -20, 20, hi_exp):  # powers of two: G * 2**e is exact, so the results are bitwise equal
        assert torch.equal(msign(G * 2.0**e, method=method), base)
    tol = 1e-12 if dtype == F64 else 1e-5  # c not a power of two: c G is rounded once (one ulp per entry)
    for c in (1e-30, 3.7, 1e30):
        torch.testing.assert_close(msign(G * c, method=method), base, rtol=0, atol=tol)


@pytest.mark.parametrize("method", ["svd", "newton_schulz"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_entries_near_the_largest_float(method, dtype, gen):
    # Review fix: for max|G| >= 2^127 (float32; 2^1023 in float64) the power of two above max|G| overflows to inf,
    # and msign returned the zero matrix (so Muon took no step for a finite gradient of 3e38). Expected value: the
    # polar factor built from the SVD factors (with_spectrum); tolerance as the scale-invariance test above.
    G, expected = with_polar([3.0, 2.0, 1.0], 4, 3, gen)
    tol = 1e-12 if dtype == F64 else 1e-5
    big = torch.finfo(dtype).max
    for top in (big, big / 1.5, 2.0 ** (np.frexp(big)[1] - 1)):  # 2^127 (2^1023): the smallest affected maximum
        X = (G / G.abs().max() * top).to(dtype)
        assert float(X.abs().max()) == pytest.approx(top, rel=1e-6) and bool(torch.isfinite(X).all())
        torch.testing.assert_close(msign(X, method=method).double(), expected, rtol=0, atol=tol)


@pytest.mark.parametrize("method", ["svd", "newton_schulz"])
def test_tiny_float64_input_does_not_underflow(method, gen):
    G, expected = with_polar([3.0, 2.0, 1.0], 4, 3, gen)
    # ‖1e-300 G‖_F² underflows to 0 in float64: only the exact power-of-two prescaling keeps this finite.
    torch.testing.assert_close(msign(G * 1e-300, method=method), expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(msign(G * 1e300, method=method), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("method", ["svd", "newton_schulz"])
def test_zero_matrix_maps_to_zero(method):
    for shape in [(3, 4), (2, 5, 5), (4, 1)]:
        out = msign(torch.zeros(shape), method=method)
        assert torch.equal(out, torch.zeros(shape))


@pytest.mark.parametrize("method", ["svd", "newton_schulz"])
def test_batched_equals_per_matrix(method, gen):
    G = torch.randn(2, 3, 7, 4, generator=gen, dtype=F64)
    G[1, 2] = 0.0  # a zero matrix inside a batch must not disturb its neighbours
    G[0, 1] *= 1e-200
    out = msign(G, method=method)
    for i in range(2):
        for j in range(3):
            # batched kernels may sum in a different order: a few ulps.
            torch.testing.assert_close(out[i, j], msign(G[i, j], method=method), rtol=0, atol=1e-13)


@pytest.mark.parametrize("method", ["svd", "newton_schulz"])
def test_transpose_and_orthogonal_equivariance(method, gen):
    G = torch.randn(7, 4, generator=gen, dtype=F64)
    torch.testing.assert_close(msign(G.T, method=method), msign(G, method=method).T, rtol=0, atol=1e-13)
    P, Q = orthonormal(7, 7, gen), orthonormal(4, 4, gen)
    # msign(P G Q) = P msign(G) Q for orthogonal P, Q (polar factor is orthogonally equivariant)
    torch.testing.assert_close(msign(P @ G @ Q, method=method), P @ msign(G, method=method) @ Q, rtol=0, atol=1e-12)


def test_result_is_orthonormal_and_idempotent(gen):
    for shape in [(8, 3), (3, 8)]:
        Q = msign(torch.randn(*shape, generator=gen, dtype=F64))
        k = min(shape)
        gram = Q.T @ Q if shape[0] >= shape[1] else Q @ Q.T
        # LAPACK's singular vectors are orthonormal to ~m u: measured <= 2.2e-15 (200 draws)
        torch.testing.assert_close(gram, torch.eye(k, dtype=F64), rtol=0, atol=1e-13)
        # msign of a point: SVD of a matrix with all σ = 1 ± 1e-15, measured <= 1.2e-15
        torch.testing.assert_close(msign(Q), Q, rtol=0, atol=1e-13)


def test_dtypes_numpy_and_no_mutation(gen):
    G = torch.randn(5, 3, generator=gen)
    G_copy = G.clone()
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        for method in ("svd", "newton_schulz"):
            assert msign(G.to(dtype), method=method).dtype == dtype
    assert torch.equal(G, G_copy)
    A = G.double().numpy()
    out = msign(A)
    assert isinstance(out, np.ndarray) and out.dtype == np.float64
    # the NumPy path converts and calls the same kernel: equal to a few ulps at most
    np.testing.assert_allclose(out, msign(G.double()).numpy(), rtol=0, atol=1e-15)


def test_default_compute_dtype_cpu(gen):
    G = torch.randn(6, 6, generator=gen)
    default = msign(G, method="newton_schulz")
    assert torch.equal(default, msign(G, method="newton_schulz", compute_dtype=torch.float32))
    bf = msign(G, method="newton_schulz", compute_dtype=torch.bfloat16, ns_coefficients="keller_jordan")
    assert bf.dtype == torch.float32
    # bf16 compute: entries within ~10 bf16 ulps (2^-8) of the fp32 iteration after 5 steps
    torch.testing.assert_close(bf, msign(G, method="newton_schulz", ns_coefficients="keller_jordan"), rtol=0, atol=0.05)


def test_explicit_coefficients_and_rcond(gen):
    G = torch.randn(5, 3, generator=gen, dtype=F64)
    a = msign(G, method="newton_schulz", ns_coefficients=[(1.5, -0.5, 0.0)], ns_steps=30)
    torch.testing.assert_close(a, msign(G, method="newton_schulz", ns_coefficients="cubic", ns_steps=30), rtol=0, atol=0)
    s = torch.tensor([1.0, 1e-3, 1e-9], dtype=F64)
    Gs, U, V = with_spectrum(s, 5, 3, gen, factors=True)
    # rcond = 1e-6 drops the 1e-9 value, keeping the 1e-3 one; the default keeps both.
    expect = (U[:, :2]) @ V[:, :2].T
    torch.testing.assert_close(msign(Gs, rcond=1e-6), expect, rtol=0, atol=1e-8)
    torch.testing.assert_close(msign(Gs), U @ V.T, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "bad,kwargs,err",
    [
        (torch.tensor([[1.0, float("nan")], [0.0, 1.0]]), {}, ValueError),
        (torch.tensor([[1.0, float("inf")], [0.0, 1.0]]), {"method": "newton_schulz"}, ValueError),
        (torch.ones(2, 2, dtype=torch.complex64), {}, TypeError),
        (torch.ones(2, 2, dtype=torch.int64), {}, TypeError),
        ([[1.0, 0.0], [0.0, 1.0]], {}, TypeError),
        (torch.ones(3), {}, ValueError),
        (torch.ones(0, 3), {}, ValueError),
        (torch.ones(2, 2), {"method": "qr"}, ValueError),
        (torch.ones(2, 2), {"method": "newton_schulz", "ns_steps": -1}, ValueError),
        (torch.ones(2, 2), {"method": "newton_schulz", "ns_steps": 2.5}, TypeError),
        (torch.ones(2, 2), {"method": "newton_schulz", "ns_coefficients": "quartic"}, ValueError),
        (torch.ones(2, 2), {"method": "newton_schulz", "ns_coefficients": [(1.0, 2.0)]}, ValueError),
        (torch.ones(2, 2), {"method": "newton_schulz", "ns_coefficients": [(1.0, float("nan"), 0.0)]}, ValueError),
        (torch.ones(2, 2), {"method": "newton_schulz", "compute_dtype": torch.int32}, TypeError),
        (torch.ones(2, 2), {"rcond": -1.0}, ValueError),
        (torch.ones(2, 2), {"ns_steps": 3}, ValueError),
        (torch.ones(2, 2), {"method": "newton_schulz", "rcond": 1e-3}, ValueError),
    ],
)
def test_bad_inputs(bad, kwargs, err):
    with pytest.raises(err):
        msign(bad, **kwargs)


@pytest.mark.parametrize("rank", [3, 2])
def test_sdp_value_is_nuclear_norm_attained_by_msign(rank, gen):
    cp = pytest.importorskip("cvxpy")
    s = [2.0, 1.0, 0.5][:rank] + [0.0] * (3 - rank)
    G, _ = with_polar(s, 4, 3, gen)
    Gn = G.numpy()
    Phi = cp.Variable((4, 3))
    problem = cp.Problem(cp.Maximize(cp.trace(Gn.T @ Phi)), [cp.sigma_max(Phi) <= 1])
    problem.solve(solver="CLARABEL")
    nuclear = np.linalg.norm(Gn, "nuc")  # independent: LAPACK singular values summed by NumPy
    # interior-point solver with default tolerances ~1e-8 relative: 1e-6 is comfortable.
    assert problem.value == pytest.approx(nuclear, rel=1e-6)
    O = msign(G).numpy()
    assert np.trace(Gn.T @ O) == pytest.approx(nuclear, rel=1e-12)
    assert np.linalg.norm(O, 2) == pytest.approx(1.0, rel=1e-12)
    if rank < 3:  # non-unique: adding u_3 v_3ᵀ keeps the value and the spectral norm
        U, _, Vh = np.linalg.svd(Gn, full_matrices=False)
        O2 = O + np.outer(U[:, 2], Vh[2])
        assert np.trace(Gn.T @ O2) == pytest.approx(nuclear, rel=1e-12)
        assert np.linalg.norm(O2, 2) == pytest.approx(1.0, rel=1e-12)
        assert np.abs(O2 - O).max() > 0.1


@pytest.mark.cuda
def test_cuda_bf16_default_matches_svd(gen):
    G, expected = with_polar([3.0, 2.0, 1.5, 1.0, 0.5], 64, 5, gen)
    out = msign(G.float().cuda(), method="newton_schulz")
    assert out.device.type == "cuda" and out.dtype == torch.float32
    # bf16 iteration (default on CUDA): ~1% error (8 mantissa bits, 10 steps)
    torch.testing.assert_close(out.cpu(), expected.float(), rtol=0, atol=0.05)
    torch.testing.assert_close(msign(G.cuda()).cpu(), expected, rtol=0, atol=1e-12)


@given(m=st.integers(1, 6), n=st.integers(1, 6), seed=st.integers(0, 2**31 - 1), e=st.integers(-300, 300))
def test_property_scale_transpose_invariance(m, n, seed, e):
    G = torch.randn(m, n, generator=torch.Generator().manual_seed(seed), dtype=F64)
    c = 10.0**e
    for method in ("svd", "newton_schulz"):
        base = msign(G, method=method)
        # c G is rounded once (half an ulp per entry), and msign's sensitivity is ~1 / (s_min + s_next) of a
        # random 6x6 Gaussian, rarely above 1e3: 1e-9 leaves ample headroom over 1e3 * 1e-16.
        torch.testing.assert_close(msign(c * G, method=method), base, rtol=0, atol=1e-9)
        torch.testing.assert_close(msign(G.T, method=method), base.T, rtol=0, atol=1e-12)
    exact = msign(G)  # the SVD result is a partial isometry: Q Qᵀ Q = Q (its singular values are 0 or 1)
    torch.testing.assert_close(exact @ exact.T @ exact, exact, rtol=0, atol=1e-12)


def test_deprecated_spellings_warn_and_agree(gen):
    G = torch.randn(5, 3, generator=gen, dtype=F64)
    new = msign(G, method="newton_schulz", ns_coefficients="cubic", ns_steps=7)
    with pytest.warns(DeprecationWarning, match="is deprecated"):
        old = msign(G, method="newton_schulz", coefficients="cubic", steps=7)
    assert torch.equal(old, new)
    with pytest.raises(TypeError, match="not both"):
        msign(G, method="newton_schulz", steps=3, ns_steps=3)


def test_orthogonalizer_is_msign_resolved_once(gen):
    from svmuon.orthogonal import Orthogonalizer

    G = torch.randn(4, 7, 5, generator=gen, dtype=F64)
    for kw in (dict(ns_coefficients="keller_jordan", ns_steps=5), dict(ns_coefficients="polar_express"),
               dict(ns_coefficients=[(1.5, -0.5, 0.0)], ns_steps=30)):
        orth = Orthogonalizer("newton_schulz", **kw)
        assert torch.equal(orth(G), msign(G, method="newton_schulz", **kw))  # the same kernel: bitwise
    assert torch.equal(Orthogonalizer("svd")(G), msign(G))
    # sigma_range: the SVD's outputs are partial isometries; the Keller Jordan band's upper end for its 5
    # steps (KELLER_JORDAN_BAND, 1.2024) and 1 for a converged schedule, each with 0 as the lower end
    assert Orthogonalizer("svd").sigma_range == (1.0, 1.0)
    lo, hi = Orthogonalizer("newton_schulz", ns_coefficients="keller_jordan", ns_steps=5).sigma_range
    assert lo == 0.0 and 1.202369 <= hi <= 1.202369 * (1 + 2e-5)  # the measured max, raised by 1e-5 relative
    assert Orthogonalizer("newton_schulz").sigma_range[1] == pytest.approx(1.0, abs=1e-4)
    with pytest.raises(ValueError, match="method"):
        Orthogonalizer("qr")
    with pytest.raises(ValueError, match="newton_schulz"):
        Orthogonalizer("svd", ns_steps=3)
    with pytest.raises(TypeError, match="compute_dtype"):
        Orthogonalizer(compute_dtype=torch.int32)
    # the SVD route reads non-finite entries as zeros (it cannot fail); the optimizer checks its input
    bad = G.clone()
    bad[0, 0, 0] = float("nan")
    assert bool(torch.isfinite(Orthogonalizer("svd")(bad)).all())
    assert not bool(torch.isfinite(Orthogonalizer()(bad)[0]).all())  # Newton–Schulz propagates it


def test_diverging_schedules_raise_instead_of_returning_inf(gen):
    # Review fix: a user schedule whose polynomials grow on [0, 1] made the checked msign return ±inf (and NumPy
    # printed overflow warnings while bounding its output). Independent: p(x) = x + 10x³ + 10x⁵ >= 3.5x for
    # x >= 1/2 (the largest singular value of G/‖G‖_F for 4 x 4 G is >= 1/2), and p(x) >= 10x⁵ once x > 1: the
    # iterates pass 1 after two steps and then grow doubly exponentially, beyond float64 well within 20 steps.
    import warnings

    G = torch.randn(4, 4, generator=gen)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="ns_coefficients diverge"):
            msign(G, method="newton_schulz", ns_coefficients=[(1.0, 10.0, 10.0)], ns_steps=20)
        # 3^100 = 5e47: finite in float64 (accepted), beyond float32 (the compute dtype here): refused at the output
        with pytest.raises(ValueError, match="overflowed"):
            msign(G, method="newton_schulz", ns_coefficients=[(3.0, 0.0, 0.0)], ns_steps=100)
        assert bool(torch.isfinite(msign(G.double(), method="newton_schulz", ns_coefficients=[(3.0, 0.0, 0.0)],
                                         ns_steps=100)).all())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_power_of_two_scale_against_frexp(dtype):
    # Independent route: Python's math.frexp of each matrix's max |entry| (exact for every float). Expected: 2^e with
    # max = mantissa · 2^e, mantissa in [0.5, 1); 1 for a zero matrix; 2^(e-1) in the top binade, where 2^e overflows.
    fi = torch.finfo(dtype)
    top = math.frexp(fi.max)[1]
    values = [0.0, 3.0, 0.75, 1.0, fi.max, fi.max / 2, fi.tiny, fi.tiny / 8, fi.smallest_normal * 3]
    T = torch.tensor(values, dtype=dtype).reshape(-1, 1, 1).expand(-1, 2, 3).clone()
    T[:, 1, 2] *= -1  # the sign must not matter
    got = power_of_two_scale(T).flatten().tolist()
    for x, scale in zip(T[:, 0, 0].tolist(), got):
        if x == 0:
            assert scale == 1.0
            continue
        e = math.frexp(abs(x))[1]
        assert scale == 2.0 ** min(e, top - 1), (dtype, x, scale)
        assert 0.5 <= abs(x) / scale < 2.0  # [0.5, 1) but in the top binade, [1, 2)


def test_power_of_two_scale_keeps_nan_and_inf_visible():
    # a matrix holding NaN or ±Inf among finite entries gets a finite positive scale, so the quotient keeps the NaN
    # or Inf where it was (the caller's finiteness checks must still see it) and the finite entries stay finite
    T = torch.full((3, 2, 2), 3.0)
    T[0, 0, 1], T[1, 1, 0], T[2, 0, 0] = float("nan"), float("inf"), -float("inf")
    scale = power_of_two_scale(T)
    assert bool(torch.isfinite(scale).all()) and bool((scale > 0).all())
    X = T / scale
    assert bool(X[0, 0, 1].isnan()) and bool(X[1, 1, 0].isinf()) and bool(X[2, 0, 0].isinf())
    assert int(torch.isfinite(X).sum()) == 9


KJ_ROWS = [(3.4445, -4.7750, 2.0315)] * 5
TRIPLE_FORMS = {"list": [list(t) for t in KJ_ROWS], "tuple": tuple(KJ_ROWS), "ndarray": np.array(KJ_ROWS),
                "tensor": torch.tensor(KJ_ROWS, dtype=F64), "bare ndarray": np.array(KJ_ROWS[0]),
                "bare tensor": torch.tensor(KJ_ROWS[0], dtype=F64)}
BAD_TRIPLES = {"k x 2 ndarray": np.ones((4, 2)), "k x 2 tensor": torch.ones(4, 2),
               "nan ndarray": np.array([[1.5, np.nan, 0.0]]), "inf tensor": torch.tensor([[1.5, -0.5, float("inf")]]),
               "bool tensor": torch.ones(2, 3, dtype=torch.bool),
               "complex tensor": torch.ones(2, 3, dtype=torch.complex64), "empty ndarray": np.zeros((0, 3))}


@pytest.mark.parametrize("form", TRIPLE_FORMS)
def test_explicit_triples_in_any_container_equal_the_named_schedule(form, gen):
    G = torch.randn(6, 4, generator=gen, dtype=F64)
    expect = msign(G, method="newton_schulz", ns_coefficients="keller_jordan", ns_steps=5)
    got = msign(G, method="newton_schulz", ns_coefficients=TRIPLE_FORMS[form], ns_steps=5)
    torch.testing.assert_close(got, expect, rtol=0, atol=0)


@pytest.mark.parametrize("form", BAD_TRIPLES)
def test_explicit_triples_of_a_bad_shape_or_value_are_refused(form):
    with pytest.raises((ValueError, TypeError), match="ns_coefficients"):
        msign(torch.ones(3, 2), method="newton_schulz", ns_coefficients=BAD_TRIPLES[form])


UNSUPPORTED_DTYPES = [torch.float8_e4m3fn, torch.float8_e5m2, torch.int32, torch.complex64, "float32", float]


@pytest.mark.parametrize("dtype", UNSUPPORTED_DTYPES, ids=str)
def test_a_compute_dtype_outside_the_four_float_dtypes_is_refused(dtype):
    # float8 used to run: singular values of 0.95-1.03, or 2e3 and 1e-19 with Polar Express
    with pytest.raises(TypeError, match="compute_dtype must be one of torch.float16, torch.bfloat16"):
        msign(torch.ones(3, 2), method="newton_schulz", compute_dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_each_supported_compute_dtype_runs(dtype, gen):
    G, polar = with_polar([3.0, 2.0, 1.0, 0.5], 6, 4, gen)
    out = msign(G.float(), method="newton_schulz", compute_dtype=dtype)
    assert float((out.double() - polar).abs().max()) < 0.05  # Polar Express in bf16 is accurate to ~1e-2


def test_a_meta_tensor_is_refused_by_name():
    meta = torch.empty(4, 3, device="meta")
    for method in ("svd", "newton_schulz"):
        with pytest.raises(ValueError, match="G is a meta tensor .no values.; expected a tensor on a real device"):
            msign(meta, method=method)
    with pytest.raises(ValueError, match="ns_coefficients is a meta tensor"):
        msign(torch.ones(3, 2), method="newton_schulz", ns_coefficients=torch.empty(2, 3, device="meta"))
