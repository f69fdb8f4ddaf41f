"""Tests of svmuon.spectral.symbolic: each SymPy derivation is compared with the closed form it should
reach (symbolic difference simplifying to 0) and, by an independent route, with numbers (mpmath
quadrature, or the numeric svmuon.spectral.theory)."""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
import sympy as sp

from svmuon.spectral import symbolic as S
from svmuon.spectral import theory as T

n, q = S.n, S.q


def test_exp1_moments():
    assert sp.simplify(S.exp_moment() - sp.gamma(q + 1)) == 0
    assert S.exp_mean_x_log_x() == 1 - sp.EulerGamma
    assert sp.simplify(S.exp_cov_x_xq() - q * sp.gamma(q + 1)) == 0
    # independent numeric route: mpmath quadrature of x log x e^{-x} and x^0.7 e^{-x} (30 digits; 1e-20).
    with mp.workdps(30):
        assert abs(mp.quad(lambda x: x * mp.log(x) * mp.exp(-x), [0, 1, mp.inf]) - mp.mpf(str(sp.N(S.exp_mean_x_log_x(), 30)))) < 1e-20
        val = mp.quad(lambda x: x ** mp.mpf("0.7") * mp.exp(-x), [0, 1, mp.inf])
        assert abs(val - mp.mpf(str(sp.N(S.exp_moment().subs(q, sp.Rational(7, 10)), 30)))) < 1e-20


def test_mean_field_formulas():
    assert sp.simplify(S.mean_field_renyi() - (sp.log(n) - sp.log(sp.gamma(q + 1)) / (q - 1))) == 0
    assert sp.simplify(S.mean_field_shannon() - (sp.log(n) - 1 + sp.EulerGamma)) == 0
    assert sp.simplify(S.mean_field_renyi().subs(q, 2) - sp.log(n / 2)) == 0  # log(n/2)
    f = sp.lambdify((n, q), S.mean_field_renyi(), "mpmath")
    assert float(f(100, 3.5)) == pytest.approx(T.mean_field_entropy(100, 3.5), rel=1e-13)


def test_delta_method_variance_derivation():
    source = (sp.gamma(2 * q + 1) / (sp.gamma(q + 1) ** 2 * (q - 1) ** 2) - (q**2 + 1) / (q - 1) ** 2) / n
    assert sp.simplify(S.delta_method_variance() - source) == 0
    assert sp.simplify(S.delta_method_variance_at(2) - 1 / n) == 0
    assert sp.simplify(S.delta_method_variance_at(1) - (sp.pi**2 / 3 - 3) / n) == 0
    f = sp.lambdify((n, q), S.delta_method_variance(), "mpmath")
    for order in (0.5, 3.0):
        # SymPy's expression in mpmath vs the float64 library formula (gammas of O(1) arguments): ~1e-15
        assert float(f(10, order)) == pytest.approx(T.delta_method_variance(10, order), rel=1e-12)


def test_exact_mean():
    expr = S.exact_expected_entropy()
    assert sp.simplify(expr - (sp.polygamma(0, n + 1) - sp.polygamma(0, 2))) == 0
    for k in range(1, 8):  # H_k - 1 as an exact rational
        assert sp.nsimplify(sp.expand_func(expr.subs(n, k))) == sp.harmonic(k) - 1
    assert float(expr.subs(n, 4096).evalf(30)) == pytest.approx(T.expected_entropy(4096), rel=1e-14)


def test_exact_variance():
    expr = S.exact_entropy_variance()
    # independent route at n = 2: H = -p log p - (1-p) log(1-p) with p ~ U(0, 1), by mpmath quadrature.
    with mp.workdps(30):
        h = lambda p: -p * mp.log(p) - (1 - p) * mp.log(1 - p)  # noqa: E731
        var2 = mp.quad(lambda p: h(p) ** 2, [0, 1]) - mp.quad(h, [0, 1]) ** 2
    assert float(expr.subs(n, 2).evalf(30)) == pytest.approx(float(var2), rel=1e-20 + 1e-15)
    assert sp.simplify(sp.expand_func(expr.subs(n, 1))) == 0
    for k in (3, 10, 1000):
        assert float(expr.subs(n, k).evalf(30)) == pytest.approx(T.entropy_variance(k), rel=1e-11)


def test_power_sum_and_series():
    assert sp.simplify(S.exact_expected_power_sum().subs(q, 2) - 2 / (n + 1)) == 0
    series = S.large_n_series(S.exact_expected_entropy(), 3).removeO()
    target = sp.log(n) - 1 + sp.EulerGamma + 1 / (2 * n) - 1 / (12 * n**2)
    assert sp.simplify(series - target) == 0
    var_series = S.large_n_series(S.exact_entropy_variance(), 3).removeO()
    assert sp.simplify(var_series - ((sp.pi**2 / 3 - 3) / n + (sp.Rational(5, 2) - sp.pi**2 / 3) / n**2)) == 0
    assert math.isclose(float((sp.pi**2 / 3 - 3).evalf()), T.delta_method_variance(1, 1.0), rel_tol=1e-14)
    assert np.isfinite(float(S.exact_expected_power_sum().subs({n: 5, q: 0.5})))


@pytest.mark.slow
def test_large_n_constants_shannon_and_q2():
    # the Shannon constants from the (mean x, mean x log x) expansion, and q = 2 from (mean x, mean x²)
    c, V, K = S.shannon_large_n_constants()
    assert c == sp.Rational(1, 2)
    assert sp.simplify(V - (sp.pi**2 / 3 - 3)) == 0
    assert sp.simplify(K - (12 * sp.zeta(3) - 10 - sp.pi**2 / 2)) == 0
    assert float(K / V**sp.Rational(3, 2)) == pytest.approx(-3.26867014901268, abs=1e-12)
    assert S.renyi_large_n_constants(2) == (sp.Rational(3, 2), 1, -7)
    assert S.renyi_large_n_constants(3) == (4, sp.Rational(5, 2), sp.Rational(-283, 4))


def test_mean_correction_general_q():
    c = S.renyi_mean_correction()
    assert sp.limit(c, S.q, 1) == sp.Rational(1, 2)
    assert sp.simplify(c.subs(S.q, 2)) == sp.Rational(3, 2)
    # an exact symbolic value evaluated once: 1e-14 relative of 0.23 is ~100 ulps
    assert float(c.subs(S.q, sp.Rational(1, 2))) == pytest.approx(1.5 - 4 / math.pi, rel=1e-14)
