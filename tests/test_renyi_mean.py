"""Tests of the exact mean Rényi entropy, svmuon.expected_entropy(n, q) (module svmuon.spectral.renyi_mean).

Independent routes for the expected values, none of which uses the library's Frullani quadrature:

* n = 2: E[H_q] = ∫_0^1 log(t^q + (1-t)^q) dt / (1 - q) by mpmath (p_1 is uniform on [0, 1]); closed forms
  2 - π/2 (q = 2), π/2 - 1 (q = 1/2), 1 - log 2 (q = ∞).
* n = 3: a two-dimensional mpmath quadrature over the triangle (density 2).
* large n, q = 2 and q = 1/2: Frullani's identity evaluated in mpmath with the closed-form Laplace transforms
  E[e^{-t x²}] = √π z erfcx(z), z = 1/(2√t), and E[e^{-t √x}] = 1 - E[e^{-x²/t²}] (a different inner
  computation, a different outer quadrature, 25 digits).
* large n, q = ∞: E[H_∞] = ψ(n) - E[log max_i x_i] with E[log max] integrated against the density
  n (1 - e^{-m})^{n-1} e^{-m} of the largest of n Exp(1) draws.
* Monte Carlo (entropy_statistics) within four standard errors.

The issue's target is 1e-10 relative for n up to 10⁶; the library's steps give ~1e-14 (measured), so 1e-10 is
the tolerance throughout: a regression that costs four digits fails.
"""

from __future__ import annotations

import math
import warnings

import mpmath as mp
import numpy as np
import pytest
import torch

from svmuon.spectral import entropy_statistics, expected_entropy, mean_field_entropy
from svmuon.spectral.theory import entropy_asymptotics

REL = 1e-10  # the accuracy the issue asks for (achieved: ~1e-14)


def _mp_n2(q) -> float:
    with mp.workdps(25):
        if q == math.inf:
            return float(2 * mp.quad(lambda t: -mp.log(t), [0.5, 1]))
        q = mp.mpf(q)
        if q == 1:
            return float(mp.quad(lambda t: -t * mp.log(t) - (1 - t) * mp.log(1 - t), [0, 0.5, 1]))
        return float(mp.quad(lambda t: mp.log(t**q + (1 - t) ** q), [0, 0.5, 1]) / (1 - q))


def _mp_n3(q) -> float:
    with mp.workdps(15):
        q = mp.mpf(q)
        f = lambda a, b: mp.log(a**q + b**q + (1 - a - b) ** q) / (1 - q)
        inner = lambda a: mp.quad(lambda b: f(a, b), [0, (1 - a) / 2, 1 - a])
        return float(mp.re(2 * mp.quad(inner, [0, mp.mpf(1) / 3, 1])))


def _phi2(t):
    """E[exp(-t x²)], x ~ Exp(1): √π z e^{z²} erfc(z) with z = 1/(2√t); its Taylor series for tiny t."""
    if t < mp.mpf("1e-8"):
        return mp.fsum(mp.factorial(2 * k) / mp.factorial(k) * (-t) ** k for k in range(6))
    z = 1 / (2 * mp.sqrt(t))
    return mp.sqrt(mp.pi) * z * mp.exp(z * z) * mp.erfc(z)


def _mp_frullani_closed_form(n: int, q: float) -> float:
    """(q ψ(n) - E log Σ x^q)/(q - 1), E log T = ∫ (e^{-t} - φ(t)^n) dt/t in u = log t, closed-form φ."""
    phi = _phi2 if q == 2 else (lambda t: 1 - _phi2(1 / (t * t)))  # E e^{-t√x} = P(E' > t√x) = 1 - E e^{-E'²/t²}
    with mp.workdps(25):
        c = -mp.log(n)
        pts = sorted({-90, c - 10, c - 4, c - 2, c, c + 2, c + 4, 0, 2, 5, 10, 20, 40, 60, 80})
        e_log_t = mp.quad(lambda u: mp.exp(-mp.exp(u)) - phi(mp.exp(u)) ** n, pts)
        return float((q * mp.digamma(n) - e_log_t) / (q - 1))


def _mp_min_entropy(n: int) -> float:
    with mp.workdps(25):
        dens = lambda m: n * (-mp.expm1(-m)) ** (n - 1) * mp.exp(-m)
        e_log_max = mp.quad(lambda m: mp.log(m) * dens(m), [0, 1, mp.log(n), mp.log(n) + 10, mp.inf])
        return float(mp.digamma(n) - e_log_max)


@pytest.mark.parametrize("q", [1e-6, 0.01, 0.3, 0.5, 0.9, 1 - 1e-9, 1 + 1e-9, 1.2, 1.5, 1.5000001, 1.6, 2.0, 3.0,
                               7.0, 50.0, 1e4, math.inf])
def test_n2_against_mpmath(q):
    assert expected_entropy(2, q) == pytest.approx(_mp_n2(q), rel=REL)


def test_n2_closed_forms():
    # closed forms against the quadrature route: REL's ~1e-14 achieved, 1e-13 catches a lost term
    assert expected_entropy(2, 2.0) == pytest.approx(2 - math.pi / 2, rel=1e-13)
    assert expected_entropy(2, 0.5) == pytest.approx(math.pi / 2 - 1, rel=1e-13)
    assert expected_entropy(2, math.inf) == pytest.approx(1 - math.log(2), rel=1e-13)


@pytest.mark.slow
@pytest.mark.parametrize("q", [0.4, 2.0, 5.0])
def test_n3_against_a_two_dimensional_quadrature(q):
    assert expected_entropy(3, q) == pytest.approx(_mp_n3(q), rel=REL)


@pytest.mark.parametrize("n", [10, 1000, 10**6])
@pytest.mark.parametrize("q", [0.5, 2.0])
def test_large_n_against_closed_form_laplace_transforms(n, q):
    assert expected_entropy(n, q) == pytest.approx(_mp_frullani_closed_form(n, q), rel=REL)


@pytest.mark.parametrize("n", [10, 1000, 10**6])
def test_min_entropy_against_the_largest_exponential(n):
    assert expected_entropy(n, math.inf) == pytest.approx(_mp_min_entropy(n), rel=REL)


def test_special_orders_and_n_equal_one():
    n = np.array([1, 2, 17, 4096])
    np.testing.assert_array_equal(expected_entropy(n, 0.0), np.log(n))
    harmonic = np.array([sum(1 / k for k in range(1, m + 1)) for m in n]) - 1  # E[H] = H_n - 1
    np.testing.assert_allclose(expected_entropy(n, 1.0), harmonic, rtol=1e-14)
    assert expected_entropy(1, 2.5) == 0.0 and expected_entropy(1, math.inf) == 0.0


def test_continuous_in_q_through_one_and_zero():
    # |E H_q - E H_1| <= |q - 1| · max |dE H/dq|; the slope is below log n here, so a jump would show at once
    for n in (2, 50, 10**5):
        h1 = expected_entropy(n)
        for d in (1e-13, -1e-10, 1e-7, -1e-4):
            assert abs(expected_entropy(n, 1 + d) - h1) <= abs(d) * math.log(n) + 1e-14
        assert abs(expected_entropy(n, 1e-9) - math.log(n)) < 1e-8 * math.log(n)
    # either side of the switch between the two integral forms at q = 3/2
    assert expected_entropy(1000, 1.5) == pytest.approx(expected_entropy(1000, 1.5000000001), abs=1e-9)


def test_non_increasing_in_q_and_bounded():
    qs = np.array([0.0, 0.2, 0.5, 0.8, 1.0, 1.3, 1.5, 2.0, 4.0, 10.0, 100.0, 1e6, math.inf])
    for n in (2, 5, 300, 10**6):
        h = expected_entropy(n, qs)
        assert np.all(np.diff(h) < 0) and h[0] == pytest.approx(math.log(n)) and h[-1] > 0
        # Jensen with E[max p] = H_n / n: E[H_inf] >= log n - log H_n
        assert h[-1] >= math.log(n) - math.log(sum(1 / k for k in range(1, n + 1))) if n < 1000 else True


def test_vectorised_and_broadcast():
    n = np.array([[2], [40], [10**6]])
    q = np.array([0.5, 1.0, 2.0, math.inf])
    out = expected_entropy(n, q)
    assert out.shape == (3, 4) and out.dtype == np.float64
    for i in range(3):
        for j in range(4):
            # the quadrature grid adapts to the range of n in the call: equal to ~1e-15, not bit for bit
            assert out[i, j] == pytest.approx(expected_entropy(int(n[i, 0]), float(q[j])), rel=1e-13)
    assert isinstance(expected_entropy(5, 2), float)
    many = expected_entropy(np.arange(1, 3001), 2.5)  # one quadrature for every n
    assert many.shape == (3000,) and np.all(np.diff(many) > 0)


def test_no_warnings_and_bad_input():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        expected_entropy(np.array([[2], [10**6]]), [1e-300, 1e-6, 0.5, 1.4, 1.6, 1e300, math.inf])
    with pytest.raises(ValueError, match="q"):
        expected_entropy(10, -1.0)
    with pytest.raises(ValueError, match="n"):
        expected_entropy(0, 2.0)
    with pytest.raises(TypeError, match="q"):
        expected_entropy(10, "2")


# Monte Carlo: 4 standard errors; the float32 kernel's per-sample error (< 1e-6 nats) is far below them.
@pytest.mark.parametrize("n,q", [(7, 0.5), (7, 3.0), (60, 2.0), (60, math.inf)])
def test_against_monte_carlo(n, q):
    st = entropy_statistics(n, q, samples=40_000, generator=torch.Generator().manual_seed(n))
    assert abs(st.mean - expected_entropy(n, q)) < 4 * st.mean_stderr


# The 1/n constants c(q) (derived by the second-order delta method, svmuon.entropy_asymptotics) against the exact
# mean: a(n) = n (E H_q - mean field) = c + d/n + e/n² + O(n^-3). The three-point Richardson value
# (8 a(4n) - 6 a(2n) + a(n)) / 3 at n = 1e5 removes d and e (e reaches ~1e4 at q = 3) and leaves O(n^-3); the
# exact mean's rounding (~1e-14 nats) contributes n · 1e-14 ~ 1e-8, so 1e-6 is a safe tolerance.
@pytest.mark.parametrize("q", [0.25, 0.5, 1.0, 1.7, 2.0, 3.0])
def test_mean_correction_constant_matches_the_exact_mean(q):
    n = 10**5
    a = lambda m: m * (expected_entropy(m, q) - mean_field_entropy(m, q))
    assert (8 * a(4 * n) - 6 * a(2 * n) + a(n)) / 3 == pytest.approx(entropy_asymptotics(q).mean_correction, abs=1e-6)


@pytest.mark.slow
def test_discretisation_converged_over_a_grid_of_orders(monkeypatch):
    # Not an independent route, a convergence check of the quadrature everywhere in (n, q): halving every step and
    # widening the cut-offs changes the mean by < 1e-12 relative (the trapezoid rule converges geometrically).
    import svmuon.spectral.renyi_mean as R

    n = np.array([2, 37, 10**4, 10**6], dtype=float)
    qs = [0.05, 0.3, 0.8, 0.999, 1.001, 1.4, 1.6, 2.5, 6.0, 40.0, 1e3, 1e5]
    base = {q: R.mean_renyi_entropy(n, q) for q in qs}
    monkeypatch.setattr(R, "_H_V", R._H_V / 2)
    monkeypatch.setattr(R, "_H_U", R._H_U / 2)
    monkeypatch.setattr(R, "_H_W", R._H_W / 2)
    monkeypatch.setattr(R, "_H_W_LOG", R._H_W_LOG / 2)
    monkeypatch.setattr(R, "_TAIL", R._TAIL + 10)
    for q in qs:
        # halved quadrature steps and a longer tail change the result by the discretisation error, ~1e-14
        np.testing.assert_allclose(base[q], R.mean_renyi_entropy(n, q), rtol=1e-12, err_msg=f"q={q}")


# Review fixes. Beyond n ~ 1e7 the large-q form (q > 3/2) used to cut its integrals where n (1 - Φ) still matters:
# E[H_2] was off by 1.7e-8 relative at n = 1e12, by 1 nat at 1e20 and by 600 nats at 1e300. Independent routes: the
# mpmath Frullani integral with closed-form Laplace transforms (as above), and for astronomically large n the
# delta-method expansion log n - log Γ(q+1)/(q-1) + c(q)/n with c(2) = 3/2, c(3) = 4 (Γ(2q+1)/Γ(q+1)² = 6, 20),
# whose O(n^-2) remainder is below 1e-40 there; 1e-13 relative is a few roundings of the ~700-nat result.
@pytest.mark.parametrize("n", [10**9, 10**12])
def test_large_q_form_beyond_a_million_against_mpmath(n):
    assert expected_entropy(n, 2.0) == pytest.approx(_mp_frullani_closed_form(n, 2.0), rel=REL)


@pytest.mark.parametrize("n,q", [(1e20, 2.0), (1e20, 17.5), (1e300, 17.5)] + [
    pytest.param(1e300, 3.0, marks=pytest.mark.slow)])
def test_large_q_form_for_astronomical_n(n, q):
    if q == 17.5:  # c(q) from its closed form, in mpmath; here the left cut-off needs the log Γ(q+1)/q term
        g = mp.gamma(mp.mpf(q) + 1)
        c = float((mp.gamma(2 * mp.mpf(q) + 1) / g**2 - 1 - q) / (2 * (q - 1)))
        expected = math.log(n) - float(mp.loggamma(q + 1)) / (q - 1) + c / n
    else:
        c = {2.0: 1.5, 3.0: 4.0}[q]
        expected = math.log(n) - math.lgamma(q + 1) / (q - 1) + c / n
    assert expected_entropy(np.array([n]), q)[0] == pytest.approx(expected, rel=1e-13)


def test_huge_finite_orders_match_the_min_entropy():
    # q = 1e308 used to overflow q (ψ(n) - J) to inf; for such q, H_q = H_∞ to rounding (x^q is dominated by the max)
    n = np.array([2, 10**6])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(expected_entropy(n, 1e308), [_mp_n2(math.inf), _mp_min_entropy(10**6)], rtol=REL)


def test_mean_field_error_at_n_1000_exceeds_the_monte_carlo_noise():
    # Issue 20 erratum 4, from exact quantities (no Monte Carlo): at n = 1000 and q = 1 the mean-field error
    # E[H] - mean field = 1/(2n) + O(n^-2) is (E[H] - mf) / sqrt(Var[H] / N) standard errors of a Monte Carlo mean
    # of N = 15000 draws (the chapter's grid), with the exact Var[H] (eq-exact-variance): 3.6, not "about the size
    # of the noise"; the delta variance (π²/3 - 3)/n is 2.8 % above the exact one at n = 100.
    from svmuon.spectral import delta_method_variance, entropy_variance

    n, draws = 1000, 15_000
    z = (expected_entropy(n) - mean_field_entropy(n)) / math.sqrt(entropy_variance(n) / draws)
    # leading orders: gap 1/(2n), variance (π²/3 - 3)/n; their O(1/n) relative corrections are ~1e-3 at n = 1000
    leading = math.sqrt(draws) / (2 * n) / math.sqrt((math.pi**2 / 3 - 3) / n)
    assert z == pytest.approx(leading, rel=3e-3) and 3.5 < z < 3.7
    # the delta variance against the exact one at n = 100: (π²/3 - 5/2)/((π²/3 - 3) n) to first order (the
    # chapter's ratio expansion), 2.7 %, with an O(1/n) relative correction; the exact value is 2.8 %
    over = delta_method_variance(100) / entropy_variance(100) - 1
    assert over == pytest.approx((math.pi**2 / 3 - 5 / 2) / ((math.pi**2 / 3 - 3) * 100), rel=0.03)
    assert round(100 * over, 1) == 2.8
