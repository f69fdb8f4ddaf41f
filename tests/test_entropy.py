"""Tests of svmuon.spectral.entropy: Shannon and Rényi entropies, singular-value entropy, effective ranks.

Independent routes: scipy.stats.entropy (Shannon), mpmath at 50 digits (Rényi for every q), spectra built
as U diag(s) Vᵀ (singular-value entropy), torch.linalg norms and matrix_rank (the classical ranks).
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import scipy.stats
import torch
from conftest import TOL
from helpers import orthonormal, with_spectrum
from hypothesis import given
from hypothesis import strategies as st

from svmuon.spectral.entropy import (
    effective_rank,
    renyi_entropy,
    shannon_entropy,
    singular_value_entropy,
    stable_rank,
)

mpmath.mp.dps = 50


def mp_renyi(p, q) -> float:
    """Rényi entropy of p at 50 significant digits with mpmath (q = 1: Shannon; q = inf: min-entropy)."""
    p = [mpmath.mpf(float(x)) for x in p]
    s = mpmath.fsum(p)
    p = [x / s for x in p if x > 0]
    if q == 1:
        return float(-mpmath.fsum(x * mpmath.log(x) for x in p))
    if q == math.inf:
        return float(-mpmath.log(max(p)))
    if q == 0:
        return float(mpmath.log(len(p)))
    q = mpmath.mpf(q)
    return float(mpmath.log(mpmath.fsum(x**q for x in p)) / (1 - q))


def dirichlet(k: int, rng: np.random.Generator, zeros: int = 0) -> np.ndarray:
    p = rng.exponential(size=k)
    p[:zeros] = 0.0
    return p / p.sum()


# ---------------------------------------------------------------- Shannon and Rényi against references


@pytest.mark.parametrize("zeros", [0, 3])
def test_shannon_matches_scipy(zeros):
    rng = np.random.default_rng(1)
    p = np.stack([dirichlet(10, rng, zeros) for _ in range(4)])
    got = shannon_entropy(p)
    assert isinstance(got, np.ndarray) and got.shape == (4,)
    # both are float64 sums of 10 terms: agreement to ~1e3 ulps.
    np.testing.assert_allclose(got, scipy.stats.entropy(p, axis=1), rtol=1e-12)
    np.testing.assert_allclose(shannon_entropy(p.T, dim=0), got, rtol=1e-14)


@pytest.mark.parametrize("q", [0.0, 1e-3, 0.3, 0.5, 0.75, 1 - 1e-9, 1.0, 1 + 1e-9, 1.3, 1.5, 2.0, 3.7, 50.0, 1e6, math.inf])
def test_renyi_matches_mpmath(q):
    rng = np.random.default_rng(2)
    for zeros in (0, 2):
        p = dirichlet(12, rng, zeros)
        got = float(renyi_entropy(torch.from_numpy(p), q))
        # float64 with no cancellation in either branch: relative error a few eps * log k; 1e-12 is ~5000 eps.
        assert got == pytest.approx(mp_renyi(p, q), rel=1e-12, abs=1e-14), (q, zeros)


def test_renyi_special_orders():
    p = torch.tensor([0.5, 0.25, 0.25, 0.0, 0.0], dtype=torch.float64)
    # q = 0 and q = ∞: one log of an exact value (support size, max p): ~1 ulp; 1e-15 is 4.5 ulp
    assert float(renyi_entropy(p, 0)) == pytest.approx(math.log(3), rel=1e-15)
    assert float(renyi_entropy(p, math.inf)) == pytest.approx(math.log(2), rel=1e-15)
    assert float(renyi_entropy(p, 2)) == pytest.approx(-math.log(0.375), rel=1e-15)  # Σp² = 3/8
    assert float(renyi_entropy(p, 1)) == pytest.approx(1.5 * math.log(2), rel=1e-15)
    # q = 1e300 must not overflow; it equals the min-entropy to ~q^-1.
    assert float(renyi_entropy(p, 1e300)) == pytest.approx(math.log(2), rel=1e-15)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_continuity_at_q_equal_one(dtype):
    p = torch.from_numpy(dirichlet(20, np.random.default_rng(3))).to(dtype)
    h1 = float(renyi_entropy(p, 1.0))
    # dH_q/dq at q = 1 is -Var_p(log p) / 2 (the derivative of the cumulant generating function).
    lp = np.log(p.double().numpy())
    slope = -0.5 * (np.sum(p.double().numpy() * lp**2) - np.sum(p.double().numpy() * lp) ** 2)
    eps = torch.finfo(dtype).eps
    for delta in (1e-2, 1e-4, 1e-6, 1e-8, 1e-10, 1e-12, 1e-14):
        for sign in (1, -1):
            hq = float(renyi_entropy(p, 1 + sign * delta))
            # |H_q - H_1 - slope*(q-1)| <= O(δ²) (second derivative of size ~1 here) + rounding (~50 eps).
            assert abs(hq - h1 - slope * sign * delta) <= 2 * delta**2 + 50 * eps, (delta, sign)


def test_near_one_matches_exactly_renormalised_mpmath():
    # Erratum (chapter "Singular values and their entropy", "Evaluating near q = 1"): the float64 p below sums to
    # 1 - 1.39e-17 exactly, the library returns H_q of p / Σp, so the reference must renormalise exactly; then the
    # error stays at rounding level (< 1e-14 relative) for every q - 1 down to 1e-14, while the naive formula's
    # error is ε/|q-1|, about 2e-3 at q - 1 = 1e-14 (not "order one").
    p = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
    x = [mpmath.mpf(float(v)) for v in p]
    assert abs(float(mpmath.fsum(x) - 1) + 1.3878e-17) < 1e-20
    for delta in (1e-2, 1e-5, 1e-8, 1e-11, 1e-14):
        q = mpmath.mpf(1 + delta)
        exact = mpmath.log(mpmath.fsum((v / mpmath.fsum(x)) ** q for v in x)) / (1 - q)
        assert abs(float(renyi_entropy(p, 1 + delta)) - exact) / exact < 1e-14
        naive = math.log(float((p ** (1 + delta)).sum())) / (-delta)
        assert float(abs(naive - exact) / exact) < (3e-3 if delta == 1e-14 else 1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dtype_and_batch(dtype):
    p = torch.from_numpy(np.stack([dirichlet(7, np.random.default_rng(s)) for s in range(6)])).to(dtype).reshape(2, 3, 7)
    for q in (0.5, 1.0, 2.0, math.inf):
        got = renyi_entropy(p, q)
        assert got.shape == (2, 3) and got.dtype == dtype
        for i in range(2):
            for j in range(3):
                torch.testing.assert_close(got[i, j], renyi_entropy(p[i, j], q), **TOL[dtype])


def test_half_precision_distribution():
    p = torch.tensor([0.5, 0.25, 0.25], dtype=torch.bfloat16)
    h = renyi_entropy(p, 2)
    assert h.dtype == torch.bfloat16
    # computed in float32, then rounded to bfloat16 (relative 2^-8).
    assert float(h) == pytest.approx(-math.log(0.375), rel=2**-8)


# ---------------------------------------------------------------- properties


distributions = st.integers(1, 12).flatmap(
    lambda k: st.lists(st.floats(0.0, 1.0), min_size=k, max_size=k).filter(lambda w: sum(w) > 1e-3)
)


@given(distributions, st.floats(0.0, 20.0))
def test_bounds_zero_to_log_k(w, q):
    p = torch.tensor(w, dtype=torch.float64)
    p = p / p.sum()
    h = float(renyi_entropy(p, q))
    # bounds hold exactly in exact arithmetic; 1e-12 covers float64 rounding of log and the sums.
    assert -1e-12 <= h <= math.log(len(w)) + 1e-12


@given(distributions)
def test_non_increasing_in_q(w):
    p = torch.tensor(w, dtype=torch.float64)
    p = p / p.sum()
    qs = [0.0, 0.25, 0.5, 0.9, 1 - 1e-7, 1.0, 1 + 1e-7, 1.1, 2.0, 3.0, 10.0, 100.0, math.inf]
    hs = [float(renyi_entropy(p, q)) for q in qs]
    for a, b in zip(hs, hs[1:]):
        assert b <= a + 1e-12  # monotone up to float64 rounding


@pytest.mark.parametrize("q", [0.0, 0.5, 1.0, 2.0, math.inf])
@pytest.mark.parametrize("k", [1, 2, 7])
def test_equality_cases(q, k):
    uniform = torch.full((k,), 1.0 / k, dtype=torch.float64)
    one_hot = torch.zeros(k, dtype=torch.float64)
    one_hot[-1] = 1.0
    # k <= 7 roundings of 1/k in a sum, then a log: a few ulps of log 7 = 1.9
    assert float(renyi_entropy(uniform, q)) == pytest.approx(math.log(k), abs=1e-14)
    # log 1 = 0 exactly: only 0 · log 0 terms, which are 0
    assert float(renyi_entropy(one_hot, q)) == pytest.approx(0.0, abs=1e-15)


spectra = st.lists(st.floats(0.05, 20.0), min_size=3, max_size=3)


@given(spectra, st.sampled_from([0.0, 0.5, 1.0, 2.0, math.inf]), st.sampled_from([1, 2]), st.floats(1e-3, 1e3),
       st.integers(0, 2**31 - 1))
def test_singular_value_entropy_invariances(s, q, power, c, seed):
    gen = torch.Generator().manual_seed(seed)
    W = with_spectrum(s, 4, 3, gen)
    h = singular_value_entropy(W, q, power)
    p = np.array(s) ** power
    assert float(h) == pytest.approx(mp_renyi(p, q), rel=1e-10, abs=1e-12)  # hand-computed spectrum
    for V in (orthonormal(4, 4, gen) @ W @ orthonormal(3, 3, gen), c * W, W.T):
        # orthogonal transforms, positive scaling and transposition keep the spectrum up to rounding.
        torch.testing.assert_close(singular_value_entropy(V, q, power), h, rtol=1e-10, atol=1e-12)


def test_singular_value_entropy_batched_equals_per_matrix(gen):
    W = torch.randn(3, 2, 6, 4, generator=gen, dtype=torch.float64)
    for q, power in [(1.0, 1), (2.0, 2), (math.inf, 1)]:
        h = singular_value_entropy(W, q, power)
        assert h.shape == (3, 2)
        for i in range(3):
            for j in range(2):
                torch.testing.assert_close(h[i, j], singular_value_entropy(W[i, j], q, power), **TOL[torch.float64])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_singular_value_entropy_normalize(dtype, gen):
    W = with_spectrum([2.0, 2.0, 2.0, 2.0], 5, 4, gen, dtype)  # 2 x (orthonormal columns): maximum entropy
    out = singular_value_entropy(W, normalize=True)
    assert out.dtype == dtype
    torch.testing.assert_close(out, torch.tensor(1.0, dtype=dtype), **TOL[dtype])
    R = with_spectrum([1.0, 0.0, 0.0, 0.0], 5, 4, gen, dtype)  # rank one: minimum entropy
    torch.testing.assert_close(singular_value_entropy(R, normalize=True), torch.tensor(0.0, dtype=dtype), **TOL[dtype])
    with pytest.raises(ValueError, match="normalize=True needs min"):
        singular_value_entropy(torch.ones(1, 5), normalize=True)
    assert float(singular_value_entropy(torch.ones(1, 5))) == 0.0  # without normalize k = 1 is fine


# ---------------------------------------------------------------- effective ranks


def test_effective_rank_relatives(gen):
    W = torch.randn(7, 5, generator=gen, dtype=torch.float64)
    s = torch.linalg.svdvals(W)
    fro2 = torch.linalg.matrix_norm(W, "fro") ** 2
    spec = torch.linalg.matrix_norm(W, 2)
    nuc = torch.linalg.matrix_norm(W, "nuc")
    rtol = dict(rtol=1e-12, atol=0)  # each side is a few float64 operations on the same SVD
    torch.testing.assert_close(effective_rank(W, 2, 2), (s**2).sum() ** 2 / (s**4).sum(), **rtol)
    torch.testing.assert_close(effective_rank(W, math.inf, 2), fro2 / spec**2, **rtol)
    torch.testing.assert_close(stable_rank(W), fro2 / spec**2, **rtol)
    torch.testing.assert_close(effective_rank(W, math.inf, 1), nuc / spec, **rtol)
    p = (s / s.sum()).numpy()
    assert float(effective_rank(W)) == pytest.approx(math.exp(scipy.stats.entropy(p)), rel=1e-12)  # erank
    R = with_spectrum([3.0, 2.0, 1.0, 0.0, 0.0], 7, 5, gen)
    assert float(effective_rank(R, 0)) == pytest.approx(float(torch.linalg.matrix_rank(R)), abs=1e-12) == 3.0


def test_stable_rank_batched_and_numpy(gen):
    W = torch.randn(4, 3, 6, generator=gen, dtype=torch.float32)
    sr = stable_rank(W)
    assert sr.shape == (4,) and sr.dtype == torch.float32
    # float32 SVD: ~1e-6 relative; TOL[float32] has 100x headroom.
    torch.testing.assert_close(sr, effective_rank(W, math.inf, 2), **TOL[torch.float32])
    out = stable_rank(W.double().numpy())
    assert isinstance(out, np.ndarray)
    with pytest.raises(ValueError, match="zero matrix"):
        stable_rank(torch.zeros(2, 2))


# ---------------------------------------------------------------- bad input


BAD_P = [
    ([0.5, 0.5], TypeError, "p must be a torch.Tensor"),
    (torch.tensor([1, 0]), TypeError, "p must have a floating dtype"),
    (torch.tensor([True, False]), TypeError, "p must have a floating dtype"),
    (torch.tensor([0.5, 0.5], dtype=torch.complex128), TypeError, "complex"),
    (torch.tensor(1.0), ValueError, "at least one dimension"),
    (torch.ones(3, 0), ValueError, "at least one outcome"),
    (torch.tensor([0.5, float("nan"), 0.5]), ValueError, "NaN"),
    (torch.tensor([0.5, float("inf")]), ValueError, "finite"),
    (torch.tensor([1.2, -0.2]), ValueError, "negative"),
    (torch.tensor([0.5, 0.4]), ValueError, "sum to 1"),
    (torch.tensor([[0.5, 0.5], [0.5, 0.6]]), ValueError, "sum to 1"),
]


@pytest.mark.parametrize("p, error, words", BAD_P)
def test_bad_distributions_raise(p, error, words):
    with pytest.raises(error, match=words):
        shannon_entropy(p)
    with pytest.raises(error, match=words):
        renyi_entropy(p, 2.0)


def test_float32_sum_tolerance():
    # sqrt(eps) tolerance: 1 + 1e-5 passes in float32 (eps 1.2e-7 -> tol 3.5e-4) but not in float64 (1.5e-8).
    p = torch.tensor([0.5, 0.5 + 1e-5])
    shannon_entropy(p)
    with pytest.raises(ValueError, match="sum to 1"):
        shannon_entropy(p.double())


@pytest.mark.parametrize("dim, error", [(2, ValueError), (-3, ValueError), (1.0, TypeError), (True, TypeError)])
def test_bad_dim_raises(dim, error):
    with pytest.raises(error, match="dim"):
        renyi_entropy(torch.full((2, 2), 0.5), 1.0, dim=dim)


@pytest.mark.parametrize("q, error", [(-0.5, ValueError), (float("nan"), ValueError), (-math.inf, ValueError),
                                      ("2", TypeError), (None, TypeError), (True, TypeError), (torch.tensor(2.0), TypeError)])
def test_bad_order_raises(q, error):
    p = torch.tensor([0.5, 0.5])
    for call in (lambda: renyi_entropy(p, q), lambda: singular_value_entropy(torch.eye(2), q),
                 lambda: effective_rank(torch.eye(2), q)):
        with pytest.raises(error, match="q"):
            call()


@pytest.mark.parametrize("W, error, words", [
    (torch.zeros(3, 3), ValueError, "undefined"),
    (torch.ones(3), ValueError, "W must have shape"),
    (torch.ones(2, 2, dtype=torch.int32), TypeError, "W must have a floating dtype"),
    (torch.full((2, 2), float("nan")), ValueError, "W must be finite"),
])
def test_bad_matrices_raise(W, error, words):
    for fn in (singular_value_entropy, effective_rank, stable_rank):
        with pytest.raises(error, match=words):
            fn(W)


def test_bad_normalize_and_power():
    with pytest.raises(TypeError, match="normalize"):
        singular_value_entropy(torch.eye(2), normalize="yes")
    with pytest.raises(ValueError, match="power"):
        singular_value_entropy(torch.eye(2), power=0)


def test_inputs_not_mutated(gen):
    W = torch.randn(4, 3, generator=gen)
    p = torch.tensor([0.25, 0.75, 0.0])
    W0, p0 = W.clone(), p.clone()
    singular_value_entropy(W, 0.5, 2, True)
    renyi_entropy(p, 0.5)
    assert torch.equal(W, W0) and torch.equal(p, p0)


@pytest.mark.cuda
def test_cuda_matches_cpu(gen):
    W = torch.randn(3, 16, 8, generator=gen, dtype=torch.float64)
    for dtype in (torch.float32, torch.float64):
        for q, power in [(0.5, 1), (1.0, 1), (1 + 1e-9, 2), (2.0, 2), (math.inf, 1)]:
            got = singular_value_entropy(W.to("cuda", dtype), q, power)
            assert got.device.type == "cuda" and got.dtype == dtype
            torch.testing.assert_close(got.cpu(), singular_value_entropy(W.to(dtype), q, power), **TOL[dtype])
        torch.testing.assert_close(stable_rank(W.to("cuda", dtype)).cpu(), stable_rank(W.to(dtype)), **TOL[dtype])


# ---------------------------------------------------------------- gradients
#
# Reference: the gradient of a spectral function f(σ) is U diag(∂f/∂σ) Vᵀ (Lewis 1995, for absolutely symmetric
# f differentiable at σ). ∂H_q/∂σ_i is written out by hand below from p_i = σ_i^P / Σσ^P, in float64 on the
# SVD of the same matrix; singular values the library counts as zeros get ∂f/∂σ_i = 0 (the function does not
# depend on them near W). Finite differences (torch.autograd.gradcheck) check both the formula and the code.

ORDERS = [0.0, 0.3, 0.5, 1.0, 1.7, 2.0, 3.5, math.inf]


def analytic_gradient(W64: torch.Tensor, q: float, power: float, rtol: float) -> torch.Tensor:
    """∇_W H_q(p(σ(W))) in float64 by the chain rule through the SVD; σ_i <= rtol σ_1 contribute nothing."""
    U, s, Vh = torch.linalg.svd(W64, full_matrices=False)
    keep = s > rtol * s[0]
    sk = s[keep]
    p = sk**power / (sk**power).sum()
    if q == 0.0:
        dH_dp = torch.zeros_like(p)
    elif q == 1.0:
        dH_dp = -(torch.log(p) + 1)
    elif q == math.inf:
        dH_dp = torch.zeros_like(p)
        dH_dp[0] = -1 / p[0]
    else:
        dH_dp = q * p ** (q - 1) / ((1 - q) * (p**q).sum())
    g = torch.zeros_like(s)
    g[keep] = power * p / sk * (dH_dp - (p * dH_dp).sum())  # ∂p_j/∂σ_i = (P/σ_i) p_i (δ_ij - p_j)
    return U @ torch.diag(g) @ Vh


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.linalg.matrix_norm(a.double() - b.double()) / torch.linalg.matrix_norm(b.double()).clamp_min(1e-300))


@pytest.mark.parametrize("q", ORDERS)
@pytest.mark.parametrize("power", [1, 2])
def test_gradient_matches_finite_differences(q, power, gen):
    # float64, singular values well apart (simple σ_1 for q = inf): gradcheck's central differences with
    # step 1e-6 have error ~1e-10, far inside its rtol 1e-3 / atol 1e-5.
    W = with_spectrum([3.0, 2.2, 1.5, 0.9, 0.4], 7, 5, gen).requires_grad_()
    assert torch.autograd.gradcheck(lambda X: singular_value_entropy(X, q, power), (W,))
    assert torch.autograd.gradcheck(lambda X: effective_rank(X, q, power, rtol=0.0), (W,))
    got = torch.autograd.grad(singular_value_entropy(W, q, power), W)[0]
    # two float64 SVDs of W: rounding amplified by 1/gap (gaps >= 0.5 here): ~1e-14; 1e-10 catches a wrong term
    # float64, same SVD: rounding amplified by 1/gap (gaps >= 0.5 here): ~1e-14; 1e-10 catches a wrong term (O(1))
    assert relative_error(got, analytic_gradient(W.detach(), q, power, 0.0)) < 1e-10 or q == 0.0
    if q == 0.0:
        assert float(got.abs().max()) == 0.0  # the numerical rank is piecewise constant


def test_stable_rank_and_normalized_gradients_match_finite_differences(gen):
    W = with_spectrum([3.0, 2.2, 1.5, 0.9, 0.4], 5, 7, gen).requires_grad_()
    assert torch.autograd.gradcheck(stable_rank, (W,))
    assert torch.autograd.gradcheck(lambda X: singular_value_entropy(X, 1.5, 2, normalize=True), (W,))
    batch = torch.stack([W.detach(), 2 * W.detach().flip(0)]).requires_grad_()
    assert torch.autograd.gradcheck(lambda X: singular_value_entropy(X, 0.7, 1).sum(), (batch,))


# A float32 matrix with condition number 1e7. Its smallest singular value lies below the default float32
# threshold max(m, n) eps = 8 · 1.2e-7, so by default it counts as a zero: the library's function is the
# entropy of the other five, differentiable here, and its gradient is computed to float32 accuracy
# (kept singular values >= 0.2 are separated by >= 0.2: vectors and values to ~1e-6; tolerance 1e-4).
COND_1E7 = [1.0, 0.8, 0.6, 0.4, 0.2, 1e-7]


@pytest.mark.parametrize("q", ORDERS)
@pytest.mark.parametrize("power", [1, 2])
def test_float32_condition_1e7_default_threshold(q, power, gen):
    W = with_spectrum(COND_1E7, 8, 6, gen, dtype=torch.float32).requires_grad_()  # regression: all NaN before
    got = torch.autograd.grad(singular_value_entropy(W, q, power), W)[0]
    assert got.dtype == torch.float32 and bool(torch.isfinite(got).all())
    rtol32 = 8 * torch.finfo(torch.float32).eps
    expected = analytic_gradient(W.detach().double(), q, power, rtol32)
    if q == 0.0 or (q == 2.0 and power == 2):  # rank: gradient 0; participation ratio: no threshold, see below
        expected = torch.zeros_like(expected) if q == 0.0 else analytic_gradient(W.detach().double(), q, power, 0.0)
    assert relative_error(got, expected) < 1e-4 if q != 0.0 else float(got.abs().max()) == 0.0
    for fn in (lambda X: effective_rank(X, q, power), stable_rank):
        assert bool(torch.isfinite(torch.autograd.grad(fn(W), W)[0]).all())


# With rtol=0.0 the smallest singular value counts, and the function is smooth (full rank). Its gradient is
# then as well conditioned as float32 allows. For a square matrix: σ_6 = 1e-7 is computed with an absolute
# error ~ eps σ_1 (up to ~100 % relative) while u_6, v_6 are fixed by the gap 0.2 to σ_5; ∂H/∂σ_6 depends on
# log σ_6 (q = 1), σ_6^{q-1} (power 1) or σ_6^{2q-1} (power 2). Where that dependence is at most logarithmic
# (q >= 1, or power 2 with q >= 1/2) the gradient is right to ~1 % (measured over three seeds: <= 1.1 %;
# tolerance 5 %). Below that, and for a tall matrix (whose u_6 mixes with the left null space: its "gap" is
# σ_6 itself), no float32 computation can be accurate and the test asks only for a finite gradient; the
# default threshold, above, is the remedy.
@pytest.mark.parametrize("q", ORDERS)
@pytest.mark.parametrize("power", [1, 2])
def test_float32_condition_1e7_untruncated(q, power, gen):
    square = with_spectrum(COND_1E7, 6, 6, gen, dtype=torch.float32).requires_grad_()
    got = torch.autograd.grad(singular_value_entropy(square, q, power, rtol=0.0), square)[0]
    assert bool(torch.isfinite(got).all())
    if q >= 1.0 or (power == 2 and q >= 0.5):
        assert relative_error(got, analytic_gradient(square.detach().double(), q, power, 0.0)) < 0.05
    tall = with_spectrum(COND_1E7, 8, 6, gen, dtype=torch.float32).requires_grad_()
    assert bool(torch.isfinite(torch.autograd.grad(singular_value_entropy(tall, q, power, rtol=0.0), tall)[0]).all())


@pytest.mark.parametrize("q", [0.5, 1.0, 2.0, 3.0, math.inf])
@pytest.mark.parametrize("power", [1, 2])
def test_rank_deficient_gradient_is_finite_and_along_the_support(q, power, gen):
    # Rank 3 in float64: σ_4, σ_5 ~ 1e-16 fall below the threshold. The gradient is that of the entropy of the
    # three non-zero singular values (the value does not depend on the others near W): finite, never NaN.
    W = with_spectrum([2.0, 1.3, 0.5, 0.0, 0.0], 6, 5, gen).requires_grad_()
    got = torch.autograd.grad(singular_value_entropy(W, q, power), W)[0]
    rtol = 6 * torch.finfo(torch.float64).eps
    expected = analytic_gradient(W.detach(), q, power, 0.0 if (q == 2.0 and power == 2) else rtol)
    # float64 autograd vs the closed form on the same SVD, singular gaps >= 0.5: ~1e-14 (see above)
    assert relative_error(got, expected) < 1e-10


def test_participation_ratio_is_smooth_on_rank_deficient_matrices(gen):
    # H_2 with p ∝ σ² = 2 log tr G - log tr G², G = WᵀW: a smooth function of W != 0, whatever its rank
    # (regression: all NaN before). Finite differences through the rank-deficient point, and the closed form
    # ∇ = 4W/‖W‖_F² - 4 W G / tr G² as an independent expected value.
    A = torch.randn(6, 2, generator=gen, dtype=torch.float64)
    B = torch.randn(2, 5, generator=gen, dtype=torch.float64)
    W = (A @ B).requires_grad_()  # rank 2
    assert torch.autograd.gradcheck(lambda X: singular_value_entropy(X, 2, 2), (W,))
    assert torch.autograd.gradcheck(lambda X: effective_rank(X, 2, 2), (W,))
    G = W.detach().T @ W.detach()
    expected = 4 * W.detach() / torch.trace(G) - 4 * W.detach() @ G / torch.trace(G @ G)
    got = torch.autograd.grad(singular_value_entropy(W, 2, 2), W)[0]
    assert relative_error(got, expected) < 1e-12  # closed form in WᵀW (no SVD): a few float64 roundings of O(1) terms
    # the value equals the SVD route (Σσ²)² / Σσ⁴ to rounding, for tall, wide and batched input
    for X in (W.detach(), W.detach().T, torch.stack([W.detach(), torch.randn(6, 5, generator=gen, dtype=torch.float64)])):
        s = torch.linalg.svdvals(X)
        torch.testing.assert_close(effective_rank(X, 2, 2), (s**2).sum(-1) ** 2 / (s**4).sum(-1), rtol=1e-13, atol=0)
    # rank one: exactly the minimum 0 (clamped, never a negative rounding artefact), gradient 0 there
    R = torch.outer(torch.randn(4, generator=gen, dtype=torch.float64), torch.randn(3, generator=gen, dtype=torch.float64))
    assert 0.0 <= float(singular_value_entropy(R, 2, 2)) < 1e-15
    with pytest.raises(ValueError, match="zero matrix"):
        singular_value_entropy(torch.zeros(3, 2), 2, 2)


@pytest.mark.parametrize("dtype,scales", [(torch.float32, (1e-30, 1e-20, 1e20, 1e30, 3e38)),
                                          (torch.float64, (1e-300, 1e-160, 1e160, 1e300, 1.7e308))])
def test_participation_ratio_at_extreme_scales(dtype, scales, gen):
    # Review fix: the trace route took ‖W‖_F² directly, which overflowed for entries above ~1e19 (float32; ~1e154 in
    # float64) -- the value silently became log k, 0.5 nats off here, with NaN gradients -- and underflowed below
    # ~1e-19, a false "zero matrix" error at 1e-30. Expected: (Σσ²)²/Σσ⁴ from float64 singular values of the
    # unscaled matrix; H is scale invariant and ∇H(cW) = ∇H(W)/c (closed form as above). Tolerances: one rounding of
    # the scaled input, 1e-6 (float32) and 1e-13 (float64) relative.
    W0 = torch.randn(6, 4, generator=gen, dtype=torch.float64)
    W0 = W0 / W0.abs().max()
    s = torch.linalg.svdvals(W0)
    expected = math.log(float((s**2).sum() ** 2 / (s**4).sum()))
    G = W0.T @ W0
    grad0 = 4 * W0 / torch.trace(G) - 4 * W0 @ G / torch.trace(G @ G)
    rel = 1e-6 if dtype == torch.float32 else 1e-13
    for c in scales:
        W = (W0 * c).to(dtype).requires_grad_()
        h = singular_value_entropy(W, 2, 2)
        assert float(h.detach()) == pytest.approx(expected, rel=rel)
        (g,) = torch.autograd.grad(h, W)
        assert relative_error(g.double() * c, grad0) < (1e-5 if dtype == torch.float32 else 1e-12)


@pytest.mark.parametrize("power, q, smooth", [(1, 2.0, False), (1, 1.0, False), (2, 0.5, False),
                                           (2, 1.0, True), (2, 2.0, True)])
def test_differentiability_at_a_rank_deficient_matrix(power, q, smooth, gen):
    """What the entropy chapter states, with rtol=0.0: along a null direction u_n v_nᵀ a zero singular value becomes
    |t|, so the value has a kink (one-sided slopes ±s, s > 0) for power 1 and any q, and for power 2 when qP <= 1;
    else it is differentiable (both slopes -> 0, as O(t) for power 2, q >= 1). Slopes by one-sided differences at
    t = 1e-6 in float64 (rounding ~1e-10 on the slope); thresholds 1e-2 and 1e-4 sit far from both cases."""
    W = (torch.randn(5, 3, generator=gen, dtype=torch.float64) @ torch.randn(3, 4, generator=gen, dtype=torch.float64))
    U, _, Vh = torch.linalg.svd(W)
    D = torch.outer(U[:, 3], Vh[3])  # the null direction of the rank-3 W

    def h(t):
        return float(singular_value_entropy(W + t * D, q=q, power=power, rtol=0.0))

    right, left = (h(1e-6) - h(0.0)) / 1e-6, (h(-1e-6) - h(0.0)) / -1e-6
    if smooth:
        assert abs(right) < 1e-4 and abs(left) < 1e-4
    else:
        assert right > 1e-2 and left < -1e-2


def test_stable_rank_gradient_condition_1e7_and_rank_deficient(gen):
    # ∇ (‖W‖_F² / σ_1²) = 2W/σ_1² - 2 ‖W‖_F² u_1 v_1ᵀ / σ_1³, smooth wherever σ_1 is simple.
    for W in (with_spectrum(COND_1E7, 8, 6, gen, dtype=torch.float32), with_spectrum([2.0, 1.0, 0.0], 5, 3, gen)):
        W = W.requires_grad_()
        got = torch.autograd.grad(stable_rank(W), W)[0]
        W64 = W.detach().double()
        U, s, Vh = torch.linalg.svd(W64, full_matrices=False)
        expected = 2 * W64 / s[0] ** 2 - 2 * (s**2).sum() / s[0] ** 3 * torch.outer(U[:, 0], Vh[0])
        assert relative_error(got, expected) < (1e-5 if W.dtype == torch.float32 else 1e-12)


def test_distribution_entropies_have_zero_gradient_at_zero_entries():
    # renyi_entropy / shannon_entropy on a distribution with zeros: the gradient along the support, 0 on the zeros
    for q in (0.5, 1.0, 2.0, 3.0):
        p = torch.tensor([0.5, 0.3, 0.2, 0.0], dtype=torch.float64, requires_grad=True)
        g = torch.autograd.grad(renyi_entropy(p, q), p)[0]
        assert bool(torch.isfinite(g).all()) and float(g[3]) == 0.0
        # on the support: finite differences of the scale-free function y -> H_q(y / Σy)
        x = p.detach()[:3].clone().requires_grad_()
        assert torch.autograd.gradcheck(lambda y: renyi_entropy(y / y.sum(), q), (x,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_huge_finite_orders_approach_the_min_entropy(dtype, gen):
    # Review fix: q (ℓ_max - log s) overflowed for q near 1e308 and the result was NaN (float32 already at q > 3.4e38,
    # where q itself rounds to inf and inf · 0 = NaN). Independent bound: H_∞ <= H_q <= H_∞ + log k / (q - 1),
    # H_∞ = -log max p, so at these q the two agree to the dtype's rounding of H_∞ (4 ulp of ~1).
    p = torch.rand(6, generator=gen, dtype=torch.float64)
    p = p / p.sum()
    W = torch.randn(5, 3, generator=gen, dtype=torch.float64)
    s = torch.linalg.svdvals(W)
    tol = 4 * torch.finfo(dtype).eps
    for q in (1e30, 3.5e38, 1e300, 1e308):
        assert float(renyi_entropy(p.to(dtype), q)) == pytest.approx(-math.log(float(p.max())), abs=tol)
        assert float(singular_value_entropy(W.to(dtype), q)) == pytest.approx(-math.log(float(s[0] / s.sum())), abs=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ranks_and_entropies_for_entries_near_the_largest_float(dtype, gen):
    # Review fix: σ_1 of a finite matrix can overflow (3e38 · ones(3, 3) has σ_1 = 9e38 in float32): stable_rank,
    # the spectral distribution and every SVD-based entropy were NaN. Expected: float64 singular values of the
    # unscaled matrix (all these are scale invariant), and for the rank-one matrix the exact 1, (1, 0, 0), 0.
    from svmuon.spectral import spectral_distribution

    big = torch.finfo(dtype).max
    ones = torch.full((3, 3), big / 1.2, dtype=dtype)
    # exact answer 1; float32 rounding of a 3x3 SVD, 8 ulps = 1e-6
    assert float(stable_rank(ones)) == pytest.approx(1.0, rel=1e-6)
    assert torch.equal(spectral_distribution(ones), torch.tensor([1.0, 0.0, 0.0], dtype=dtype))
    assert float(singular_value_entropy(ones)) == 0.0
    W0 = torch.randn(6, 4, generator=gen, dtype=torch.float64)
    W0 = W0 / W0.abs().max()
    s = torch.linalg.svdvals(W0)
    W = (W0 * big / 1.01).to(dtype)  # entries up to 0.99 max: finite, σ_1 beyond the range
    rel = 1e-5 if dtype == torch.float32 else 1e-12  # one rounding of each entry, amplified by the SVD
    assert float(stable_rank(W)) == pytest.approx(float((s**2).sum() / s[0] ** 2), rel=rel)
    for q, power in ((1.0, 1), (0.5, 2), (3.0, 1)):
        p = s**power / (s**power).sum()
        expected = mp_renyi(p.numpy(), q)
        assert float(singular_value_entropy(W, q, power)) == pytest.approx(expected, rel=rel)


# ------------------------------------------------------------------ issue 19: orders at the ends of the range

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("q", [1e-46, 1e-300, 5e-324])
def test_a_tiny_order_gives_the_log_of_the_support_size(dtype, q):
    """q below float32's smallest subnormal (1.4e-45) rounded to 0 in the kernel and 0 · log 0 gave NaN.
    Expected (mpmath, 50 digits): H_q = log #support + O(q), here log 2 exactly for the uniform support and
    log 3 to ~q for the other."""
    p = torch.tensor([0.5, 0.5, 0.0], dtype=dtype)
    assert float(renyi_entropy(p, q)) == pytest.approx(math.log(2), abs=4 * torch.finfo(dtype).eps)
    p = torch.tensor([0.7, 0.2, 0.1, 0.0], dtype=dtype)
    assert float(renyi_entropy(p, q)) == pytest.approx(mp_renyi(p.double().numpy(), q), abs=4 * torch.finfo(dtype).eps)
    rank1 = torch.zeros(4, 3, dtype=dtype)
    rank1[0, 0] = 2.0
    assert float(singular_value_entropy(rank1, q=q)) == 0.0  # one singular value: log 1
    s = torch.tensor([3.0, 1.0], dtype=torch.float64)
    W = torch.diag(s).to(dtype)
    assert float(singular_value_entropy(W, q=q)) == pytest.approx(mp_renyi((s / s.sum()).numpy(), q),
                                                                  abs=4 * torch.finfo(dtype).eps)


def test_an_order_beyond_the_float_range_is_infinity_and_a_negative_one_is_named():
    """q = 10**400 (an int float() cannot hold) raised "int too large to convert to float", not naming q.
    H_q - H_inf is below log k / (q - 1) < 1e-399 there: the min-entropy -log max p (analysis)."""
    p = torch.tensor([0.7, 0.3], dtype=torch.float64)
    assert float(renyi_entropy(p, 10**400)) == pytest.approx(-math.log(0.7), abs=1e-15)
    with pytest.raises(ValueError, match="q must be"):
        renyi_entropy(p, -10**400)
    with pytest.raises(ValueError, match="q must be"):
        singular_value_entropy(torch.eye(2), q=-10**400)


def test_a_meta_tensor_is_refused_by_name():
    with pytest.raises(ValueError, match="p is a meta tensor .no values.; expected a tensor on a real device"):
        shannon_entropy(torch.empty(4, device="meta"))
    with pytest.raises(ValueError, match="W is a meta tensor .no values."):
        singular_value_entropy(torch.empty(4, 3, device="meta"))


def test_effective_rank_at_q0_is_the_integer_rank():
    """q = 0 is the numerical rank (the docstring): the count itself, equal to torch.linalg.matrix_rank, not
    exp(log r) one rounding away from it (30.000000000000004 before)."""
    from svmuon import effective_rank

    gen = torch.Generator().manual_seed(5)
    for n, r in ((40, 30), (10, 5), (64, 64)):
        W = torch.randn(n, r, generator=gen, dtype=torch.float64) @ torch.randn(r, n, generator=gen, dtype=torch.float64)
        assert float(effective_rank(W, 0)) == int(torch.linalg.matrix_rank(W))
