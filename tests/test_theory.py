"""Tests of svmuon.spectral.theory against independent routes: exact rationals, mpmath quadrature of the
Beta/Dirichlet marginals, high-precision mpmath evaluation of the source's formulas, and Monte Carlo."""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath as mp
import numpy as np
import pytest
from scipy import integrate

from svmuon.spectral import theory as T


def _beta_expect(f, n, dps=30):
    """E[f(p)] for p ~ Beta(1, n-1) by mpmath quadrature (density (n-1)(1-p)^(n-2))."""
    with mp.workdps(dps):
        return mp.quad(lambda p: f(p) * (n - 1) * (1 - p) ** (n - 2), [0, mp.mpf(1) / n, 1])


@pytest.mark.parametrize("n", [1, 2, 3, 7, 50])
def test_expected_entropy_is_harmonic_minus_one(n):
    # H_n - 1 from exact rationals; float64 rounding of digamma differences is ~1e-15.
    exact = float(sum(Fraction(1, k) for k in range(1, n + 1)) - 1)
    assert T.expected_entropy(n) == pytest.approx(exact, rel=1e-13, abs=1e-14)


@pytest.mark.parametrize("n", [2, 5, 40])
def test_expected_entropy_matches_beta_quadrature(n):
    # n · E[-p log p] under the Beta(1, n-1) marginal; mpmath at 30 digits, compared to float64 (1e-12).
    quad = n * _beta_expect(lambda p: -p * mp.log(p), n)
    assert T.expected_entropy(n) == pytest.approx(float(quad), rel=1e-12)


@pytest.mark.parametrize("n", [2, 3, 4, 9])
def test_entropy_variance_matches_quadrature(n):
    # E[H²] = n E[p² log² p] + n(n-1) E[p1 log p1 p2 log p2]: 1-D mpmath quadrature for the first term,
    # scipy dblquad over the Dirichlet(1, 1, n-2) pair marginal for the second (its default tolerance
    # 1.5e-8 bounds the agreement, so rel 1e-6 on the variance, which is ~25x smaller than E[H²]).
    sq = float(n * _beta_expect(lambda p: (p * mp.log(p)) ** 2, n))
    if n >= 3:
        dens = lambda y, x: (n - 1) * (n - 2) * (1 - x - y) ** (n - 3)  # noqa: E731
        f = lambda y, x: x * math.log(x) * y * math.log(y) * dens(y, x)  # noqa: E731
        pair = integrate.dblquad(f, 0, 1, 0, lambda x: 1 - x, epsabs=1e-13, epsrel=1e-11)[0]
    else:  # n = 2: p2 = 1 - p1
        pair = float(_beta_expect(lambda p: p * mp.log(p) * (1 - p) * mp.log(1 - p), n))
    mean = T.expected_entropy(n)
    assert T.entropy_variance(n) == pytest.approx(sq + n * (n - 1) * pair - mean**2, rel=1e-6)


def test_entropy_variance_limits():
    assert T.entropy_variance(1) == 0.0  # H ≡ 0 on Δ^0
    n = np.array([1e4, 1e6])
    # (π²/3 - 3)/n + (5/2 - π²/3)/n² + O(1/n³) (SymPy series in the symbolic tests): next term < 1/n³.
    lead = (math.pi**2 / 3 - 3) / n + (2.5 - math.pi**2 / 3) / n**2
    np.testing.assert_allclose(T.entropy_variance(n), lead, rtol=1e-7)


def test_mean_field_error_is_one_over_2n():
    # E[H] - (log n - 1 + γ) = ψ(n+1) - log n - γ... = 1/(2n) - 1/(12 n²) + O(n^-4): O(1/n) error of eq-mean-field.
    n = np.array([10, 100, 1000, 10_000])
    gap = T.expected_entropy(n) - T.mean_field_entropy(n)
    # next term is +1/(120 n^4); float64 rounding of ψ(n+1) - log n (values ~10) adds ~1e-14.
    assert np.all(np.abs(gap - (1 / (2 * n) - 1 / (12 * n**2))) <= 1 / (100 * n**4) + 1e-14)


@pytest.mark.parametrize("q", [0.0, 0.5, 0.999, 1.0 - 1e-9, 1.0 + 1e-5, 1.5, 2.0, 7.0])
def test_mean_field_matches_mpmath(q):
    # log n - log Γ(q+1)/(q-1) at 40 digits (the q = 1 removable singularity resolved by high precision).
    with mp.workdps(40):
        qq = mp.mpf(q)
        ref = mp.log(100) - (mp.loggamma(qq + 1) / (qq - 1) if q != 1 else mp.digamma(2))
    assert T.mean_field_entropy(100, q) == pytest.approx(float(ref), rel=1e-12)


def test_mean_field_special_values():
    assert T.mean_field_entropy(10) == pytest.approx(math.log(10) - 1 + np.euler_gamma, rel=1e-15)
    assert T.mean_field_entropy(10, 2) == pytest.approx(math.log(5), rel=1e-15)  # log(n/2)
    assert T.mean_field_entropy(10, 0) == pytest.approx(math.log(10), rel=1e-15)
    assert T.mean_field_entropy(10, math.inf) == -math.inf  # the approximation fails at q = inf


@pytest.mark.parametrize("q", [0.3, 0.9, 0.95 - 1e-12, 0.95 + 1e-12, 0.99999, 1.0, 1.0 + 1e-7, 1.04, 1.06, 2.0, 3.5, 20.0])
def test_delta_method_variance_matches_mpmath(q):
    # The source's formula at 50 digits (limit value π²/3 - 3 at q = 1); the series branch |q-1| < 0.05
    # and the direct branch must both agree to 1e-12 relative, including at the switch-over 0.95.
    with mp.workdps(50):
        qq = mp.mpf(q)
        f = mp.pi**2 / 3 - 3 if q == 1 else (mp.gamma(2 * qq + 1) / mp.gamma(qq + 1) ** 2 - qq**2 - 1) / (qq - 1) ** 2
    assert T.delta_method_variance(10, q) == pytest.approx(float(f) / 10, rel=1e-12)


def test_delta_method_variance_special_values():
    assert T.delta_method_variance(7, 2.0) == pytest.approx(1 / 7, rel=1e-14)
    assert T.delta_method_variance(7, 0.0) == 0.0
    assert T.delta_method_variance(7, math.inf) == math.inf


@pytest.mark.parametrize("n,q", [(1, 2.0), (3, 0.5), (10, 2.0), (25, 3.7)])
def test_expected_power_sum_matches_quadrature(n, q):
    ref = 1.0 if n == 1 else float(n * _beta_expect(lambda p: p**q, n))
    # mpmath quadrature at 30 digits vs the float64 closed form (gamma functions): ~1e-15
    assert T.expected_power_sum(n, q) == pytest.approx(ref, rel=1e-12)
    assert T.expected_power_sum(10, 2) == pytest.approx(2 / 11, rel=1e-14)  # 2/(n+1)


def test_broadcasting_and_return_types():
    out = T.delta_method_variance(np.array([[10], [100], [1000]]), [0.5, 1.0, 2.0, 3.0])
    assert out.shape == (3, 4) and out.dtype == np.float64
    assert isinstance(T.expected_entropy(5), float) and isinstance(T.mean_field_entropy(np.int64(5), 2), float)
    np.testing.assert_allclose(out[:, 2], 1 / np.array([10, 100, 1000]), rtol=1e-14)


@pytest.mark.parametrize(
    "call,exc",
    [
        (lambda: T.expected_entropy(0), ValueError),
        (lambda: T.expected_entropy(2.5), ValueError),
        (lambda: T.expected_entropy(np.array([2.5])), ValueError),
        (lambda: T.entropy_variance(np.array([3, -1])), ValueError),
        (lambda: T.entropy_variance("10"), TypeError),
        (lambda: T.expected_entropy(True), TypeError),
        (lambda: T.mean_field_entropy(10, -0.5), ValueError),
        (lambda: T.mean_field_entropy(10, math.nan), ValueError),
        (lambda: T.delta_method_variance(10, [1.0, math.nan]), ValueError),
        (lambda: T.expected_power_sum(10, "2"), TypeError),
        (lambda: T.expected_power_sum(np.array([np.inf]), 2), ValueError),
    ],
)
def test_bad_input_raises(call, exc):
    with pytest.raises(exc, match="n|q"):
        call()


def test_huge_q_and_n_regressions():
    # reviewer probe: q = 1e308 gave nan plus RuntimeWarnings; 10**400 raised OverflowError
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert T.delta_method_variance(5, 1e308) == math.inf  # the factor's limit (as at q = inf)
        assert T.delta_method_variance(5, [550.0, 1e20]).tolist() == [math.inf, math.inf]
        assert T.expected_power_sum(5, 1e308) == 0.0
        assert T.expected_power_sum(5, 1e20) == pytest.approx(120 / 1e80, rel=1e-12)  # n!/q^(n-1) asymptotically
        assert T.expected_power_sum(1e300, 1e308) == 0.0
        assert T.expected_power_sum(1, 1e308) == 1.0
        assert T.expected_power_sum(5, 0) == 5.0
    with pytest.raises(ValueError, match="n must"):
        T.mean_field_entropy(10**400)


def test_mean_field_huge_q_is_finite():
    # regression: gammaln(q + 1) overflowed to inf for q ~ 1e308, giving -inf instead of log n - (log q - 1)
    assert T.mean_field_entropy(5, 1e308) == pytest.approx(math.log(5) - (math.log(1e308) - 1), rel=1e-12)
    assert T.mean_field_entropy(5, 1e20) == pytest.approx(math.log(5) - 1e20 * (math.log(1e20) - 1) / (1e20 - 1), rel=1e-12)


# ---------------------------------------------------------------- large-n constants (entropy_asymptotics)


def test_asymptotic_constants_shannon_and_q2_closed_forms():
    # Shannon: derived in SymPy with the variables (mean x, mean x log x) (symbolic.shannon_large_n_constants);
    # the library's general-q formula in (mean x, mean x^q) must reach the same numbers as q -> 1.
    zeta3 = float(mp.zeta(3))
    V, K = math.pi**2 / 3 - 3, 12 * zeta3 - 10 - math.pi**2 / 2
    for q in (1.0, 1 + 1e-9, 1 - 1e-12):
        a = T.entropy_asymptotics(q)
        assert a.mean_correction == pytest.approx(0.5, abs=1e-8)
        assert a.variance == pytest.approx(V, abs=1e-8) and a.third_cumulant == pytest.approx(K, abs=1e-8)
        assert a.skewness == pytest.approx(-3.2686701490126823, abs=1e-8)  # the issue's -3.2687
        assert a.mode_offset == pytest.approx(0.8799162504074007, abs=1e-8)  # ≈ 0.880 / n
    # q = 2 (exact rationals by hand: g = 2 log u - log v, κ from E x^k = k!): c = 3/2, V = 1, K = -7
    assert tuple(T.entropy_asymptotics(2.0))[:3] == pytest.approx((1.5, 1.0, -7.0), abs=1e-12)
    assert T.entropy_asymptotics(2.0).mode_offset == pytest.approx(3.5, abs=1e-12)


def test_asymptotic_variance_is_the_delta_method_and_broadcasts():
    qs = np.array([[0.3], [0.7], [1.0], [2.5]])
    a = T.entropy_asymptotics(qs)
    assert a.variance.shape == (4, 1)
    # the same formula through two entry points: a few float64 roundings
    np.testing.assert_allclose(a.variance, T.delta_method_variance(1, qs), rtol=1e-12)
    # c(q) = [Γ(2q+1)/Γ(q+1)² - 1 - q] / (2(q-1)) away from q = 1, in mpmath
    for q in (0.3, 0.7, 2.5):
        with mp.workdps(30):
            c = (mp.gamma(2 * q + 1) / mp.gamma(q + 1) ** 2 - 1 - q) / (2 * (q - 1))
        assert T.entropy_asymptotics(q).mean_correction == pytest.approx(float(c), rel=1e-13)
    zero = T.entropy_asymptotics(0.0)
    assert tuple(zero) == (0.0, 0.0, 0.0, 0.0, 0.0)  # H_0 = log n is constant
    with pytest.raises(ValueError, match="q must be finite"):
        T.entropy_asymptotics([1.0, math.inf])


@pytest.mark.slow
def test_asymptotic_skewness_matches_monte_carlo():
    # √n · skewness -> K / V^{3/2}. At n = 200 the O(1/n) relative correction is ~ 2 % of the skewness
    # (-0.231), below the 4 SE (0.018) of 3e5 samples; the skewness SE is the delta-method one of the sample.
    import torch

    from svmuon.spectral import entropy_statistics

    n = 200
    st = entropy_statistics(n, 1.0, samples=300_000, generator=torch.Generator().manual_seed(11))
    assert abs(st.skewness - T.entropy_asymptotics(1.0).skewness / math.sqrt(n)) < 4 * st.skewness_stderr


def test_mode_above_mean_field_constant_erratum():
    # Erratum (chapter "The typical entropy"): the mode lies (c + mode offset)/n = 1.380/n above the mean field,
    # so "log n - 0.4228 is accurate to 1e-3" holds only for n >= 1380, not for "hundreds" of singular values.
    # Expected value from the closed forms 1/2 and (10 + π²/2 - 12ζ(3)) / (2(π²/3 - 3)) in mpmath.
    with mp.workdps(30):
        expected = float(mp.mpf(1) / 2 + (10 + mp.pi**2 / 2 - 12 * mp.zeta(3)) / (2 * (mp.pi**2 / 3 - 3)))
    a = T.entropy_asymptotics(1.0)
    assert a.mean_correction + a.mode_offset == pytest.approx(expected, abs=1e-12)
    assert 1379 < expected / 1e-3 < 1381


# Review fix: as q -> 0 the terms of V and K are O(1) and cancel to O(q²), O(q³); at 40 digits the skewness came out
# as +44330 at q = 1e-15 and a TypeError (complex mpmath value) below ~1e-25. Independent route for the limit: for
# small q, H_q - log n = q (mean log x - log mean x) + O(q²), a smooth function of the means of (x, log x) whose
# gradient (-1, 1) is orthogonal in covariance to x (Cov(log x - x, x) = 1 - 1 = 0), so the second-order term drops
# out and V/q² -> Var(log x - x) = π²/6 - 1, K/q³ -> κ₃(log x - x), integrated here against the Exp(1) density.
# The next order is a relative O(q) <= 1e-12; 1e-10 leaves room for the quadrature's 30 digits rounded to float.
@pytest.mark.parametrize("q", [1e-12, 1e-15, 1e-20, 1e-40, 1e-200, 5e-324])
def test_asymptotics_small_order_limit(q):
    with mp.workdps(30):
        ey = -mp.euler - 1
        k2 = mp.quad(lambda x: (mp.log(x) - x - ey) ** 2 * mp.exp(-x), [0, 1, mp.inf])
        k3 = mp.quad(lambda x: (mp.log(x) - x - ey) ** 3 * mp.exp(-x), [0, 1, mp.inf])
        skew, offset = float(k3 / k2**1.5), float(-k3 / (2 * k2))
    a = T.entropy_asymptotics(q)
    assert a.skewness == pytest.approx(skew, rel=1e-10)
    assert a.mode_offset == pytest.approx(offset * q, rel=1e-10)
    assert a.mean_correction == pytest.approx(q / 2, rel=1e-10)  # c(q) = q/2 + O(q²): Γ(2q+1)/Γ(q+1)² - 1 - q = O(q²)
    if q > 1e-150:  # q² underflows below
        assert a.variance == pytest.approx((math.pi**2 / 6 - 1) * q * q, rel=1e-10)
