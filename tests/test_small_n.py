"""Tests of svmuon.spectral.small_n.entropy_density: the exact density of H(p), p uniform on Δ^{n-1}, n = 2, 3.

Independent routes: the closed-form distribution function for n = 2 (P(H <= h) = 2 t(h), t the smaller
preimage, found here with scipy's brentq), the exact moments (E[H] = H_n - 1 and the exact variance, theory
module), the top value 4π/(3√3) from the Hessian of H at the centre, its series in e = log 3 - h (SymPy), an
mpmath quadrature of eq-density-n3 in the variable c at 30 digits (the library integrates in another variable,
in float64), and Monte Carlo histograms.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import mpmath as mp
import sympy as sp
from scipy import integrate, optimize

from svmuon.spectral import entropy_density, entropy_statistics, entropy_variance, expected_entropy

L2, L3 = math.log(2), math.log(3)


def _binary(t):
    return -t * math.log(t) - (1 - t) * math.log(1 - t)


def test_n2_density_is_the_derivative_of_the_closed_form_cdf():
    # F(h) = P(H <= h) = 2 t(h) with H(t(h)) = h, t < 1/2; central differences of F vs ρ_2 (step 1e-6: error ~1e-10
    # away from the singular end; tolerance 1e-7).
    for h in (0.05, 0.2, 0.5, 0.68):
        F = lambda x: 2 * optimize.brentq(lambda t: _binary(t) - x, 1e-300, 0.5, xtol=1e-300, rtol=1e-15)
        fd = (F(h + 1e-6) - F(h - 1e-6)) / 2e-6
        assert entropy_density(h, 2) == pytest.approx(fd, rel=1e-7)


@pytest.mark.slow  # 1.4 s of CPU (one thread, the shared 2-core machine), 10 s of wall time under load
def test_n2_increases_to_infinity_and_moments():
    h = np.linspace(1e-3, L2 - 1e-9, 500)
    r = entropy_density(h, 2)
    assert np.all(np.diff(r) > 0) and entropy_density(L2, 2) == math.inf
    # near the top ρ_2 ~ 1/(2ε) with log 2 - h ~ 2ε², i.e. (2(log 2 - h))^{-1/2} (eq-density-n2); the next
    # term is relative O(log 2 - h), so rel=1e-6 at d = 1e-8 and 1e-10
    for d in (1e-8, 1e-10):
        assert entropy_density(L2 - d, 2) == pytest.approx((2 * d) ** -0.5, rel=1e-6)
    assert round(entropy_density(L2 - 1e-8, 2), 2) == 7071.07  # erratum 1 of issue 20: not half of it
    # quadrature tolerance 1e-9: scipy's quad on the (log 2 - h)^{-1/2} end point
    assert integrate.quad(lambda x: entropy_density(x, 2), 0, L2, limit=200)[0] == pytest.approx(1.0, abs=1e-9)
    assert integrate.quad(lambda x: x * entropy_density(x, 2), 0, L2, limit=200)[0] == pytest.approx(0.5, abs=1e-9)


@pytest.mark.slow
def test_n3_moments_match_the_exact_mean_and_variance():
    # ρ_3 is smooth on (0, log 2) and (log 2, log 3) (bounded, with a finite limit at log 3): 300-point
    # Gauss-Legendre on each piece; ρ_3 itself is accurate to ~1e-8, so the tolerance is 1e-7.
    x, w = np.polynomial.legendre.leggauss(300)
    nodes = np.concatenate([L2 / 2 * (x + 1), L2 + (L3 - L2) / 2 * (x + 1)])
    weights = np.concatenate([L2 / 2 * w, (L3 - L2) / 2 * w]) * entropy_density(nodes, 3)
    m0, m1, m2 = (float(np.sum(weights * nodes**k)) for k in range(3))
    assert m0 == pytest.approx(1.0, abs=1e-7)
    assert m1 == pytest.approx(expected_entropy(3), abs=1e-7)  # 5/6
    assert m2 - m1**2 == pytest.approx(entropy_variance(3), abs=1e-7)


mp.mp.dps = 30  # the reference: 30 digits, so its own rounding (1e-30 / gaps down to 1e-20) stays below 1e-10


def _mp_hb(c):
    return -c * mp.log(c) - (1 - c) * mp.log1p(-c) if 0 < c < 1 else mp.mpf(0)


def _mp_rho2_gap(g):
    """ρ_2 at log 2 - g: 1/atanh(2ε) with log 2 - H(1/2 - ε) = g; Newton from sqrt(g/2) (an upper bound; the gap
    is convex in ε, so the iterates decrease to the root)."""
    if not 0 < g < mp.log(2):
        return mp.mpf(0)
    gap = lambda x: (mp.mpf(1) / 2 + x) * mp.log1p(2 * x) + (mp.mpf(1) / 2 - x) * mp.log1p(-2 * x)
    eps = min(mp.sqrt(g / 2), mp.mpf(1) / 2 - mp.mpf(10) ** -25)
    for _ in range(200):
        new = eps - (gap(eps) - g) / (2 * mp.atanh(2 * eps))
        if not new < eps:
            break
        eps = new
    return 1 / mp.atanh(2 * eps)


def _mp_bisect(f, lo, hi):  # f increasing on [lo, hi]; 110 halvings: 1e-33
    lo, hi = mp.mpf(lo), mp.mpf(hi)
    for _ in range(110):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
    return (lo + hi) / 2


def _mp_rho3(h):
    """eq-density-n3, 2 ∫ ρ_2(β_c) dc in c by mpmath's tanh-sinh, split at the roots of G(c) = log 3 - h, at 1/3
    and 1/2, at the cuts h_b(c) = h, and geometrically towards c = 0 (where β_c varies on the scale of the root
    for h near log 2)."""
    h = mp.mpf(h)
    e = mp.log(3) - h
    G = lambda c: (c * mp.log(3 * c) if c > 0 else 0) + (1 - c) * mp.log(3 * (1 - c) / 2)
    f = lambda c: 2 * _mp_rho2_gap((e - G(c)) / (1 - c))
    c2 = _mp_bisect(lambda c: G(c) - e, mp.mpf(1) / 3, 1)
    if h > mp.log(2):
        c1 = _mp_bisect(lambda c: e - G(c), 0, mp.mpf(1) / 3)
        pts = [c1 * (1 + mp.mpf(10) ** k) for k in range(-3, 8)] + [mp.mpf(1) / 3, mp.mpf(1) / 2]
        return mp.quad(f, [c1] + sorted(p for p in pts if c1 < p < c2) + [c2])
    ca = _mp_bisect(lambda c: _mp_hb(c) - h, 0, mp.mpf(1) / 2)
    pts = [mp.mpf(10) ** -k for k in range(20, 0, -1)] + [mp.mpf(1) / 3]
    left = mp.quad(f, [mp.mpf(0)] + sorted(p for p in pts if p < ca) + [ca])
    w = c2 - (1 - ca)
    pts = [1 - ca, c2] + [c2 - w * mp.mpf(10) ** -k for k in range(1, 6)]
    pts += [1 - ca + w * mp.mpf(10) ** -k for k in range(1, 6)]
    return left + mp.quad(f, sorted(pts))


@pytest.mark.slow  # six 30-digit quadratures: about 30 s on a quiet 2-core machine, 2-3 min on a loaded one
def test_n3_against_mpmath_quadrature():
    # the docstring's accuracy: relative error below 1e-9 for 1e-6 <= h < log 3, including both sides of log 2
    # (erratum 2 of issue 20: up to 1.7e-4 there before) and log 2 itself, where ρ_3 is continuous
    for h in (1e-6, 0.3, L2 - 1e-9, L2, L2 + 1e-9, L3 - 1e-3):
        ref = _mp_rho3(h)
        assert entropy_density(h, 3) == pytest.approx(float(ref), rel=1e-9), h


def test_n3_increases_across_log2():
    # erratum 2 of issue 20: the values decreased across log 2 (1.2936947 -> 1.2936784). ρ_3 increases there; its
    # slope is at least ~0.3 per nat on this window (the mpmath values above), far above the 1e-9 accuracy.
    h = L2 + np.linspace(-1e-4, 1e-4, 401)
    assert np.all(np.diff(entropy_density(h, 3)) > 0)
    below, above = entropy_density(np.array([L2 - 1e-12, L2 + 1e-12]), 3)
    assert below < above < below + 1e-6  # continuous at log 2 (the mpmath values differ by 3e-7)


def _top_series(order):
    """The area A(e) of {log 3 - H < e} in the plane Σx = 0, as a series in s = sqrt(e) (SymPy): with x = r d(θ),
    log 3 - H = Σ_k c_k r^k P_k, c_k = (-1)^k 3^{k-1}/(k(k-1)) and P_k = Σ_i d_i^k a polynomial in w = cos 3θ
    (Newton's identities, e_1 = 0, e_2 = -1/2, e_3 = w/(3√6)); r = s t(s, w) solved order by order, and
    A = ½ ∫ r² dθ = π s² mean_θ(t²) (the mean of w^j over θ: binomial(j, j/2)/2^j for even j, 0 for odd)."""
    s, w = sp.symbols("s w")
    K = order + 2
    P = [sp.Integer(3), sp.Integer(0), sp.Integer(1), w / sp.sqrt(6)]
    for k in range(4, K + 1):
        P.append(sp.expand(P[k - 2] / 2 + w / (3 * sp.sqrt(6)) * P[k - 3]))
    tk = sp.symbols(f"t1:{K - 1}")
    t = sp.sqrt(sp.Rational(2, 3)) + sum(tk[i] * s ** (i + 1) for i in range(K - 2))
    eq = sp.expand(sum(sp.Rational((-1) ** k * 3 ** (k - 1), k * (k - 1)) * s ** (k - 2) * t**k * P[k]
                       for k in range(2, K + 1)))
    sol = {}
    for i in range(K - 2):
        sol[tk[i]] = sp.expand(sp.solve(eq.coeff(s, i + 1).subs(sol), tk[i])[0])
    t2 = sp.expand(t.subs(sol) ** 2)
    mean = lambda poly: sum(poly.coeff(w, j) * sp.binomial(j, j // 2) / 2**j for j in range(0, 3 * K, 2))
    return [sp.nsimplify(sp.pi * mean(t2.coeff(s, k))) for k in range(order + 1)]


@pytest.mark.slow  # about 6 s: the SymPy series
def test_n3_top_series_has_no_half_powers():
    # erratum 6 of issue 20: ρ_3(log 3 - e) = (4π/(3√3))(1 - 5e/6 + O(e²)), not only + O(e^{3/2}): the odd powers
    # of sqrt(e) in A(e)/e vanish, and A = (2π/3)e - (5π/18)e² - (19π/324)e³ + O(e⁴), so
    # ρ_3 = A'(e)/(√3/2) = top (1 - 5e/6 - 19e²/72 + O(e³))
    a = _top_series(4)
    assert a == [2 * sp.pi / 3, 0, -5 * sp.pi / 18, 0, -19 * sp.pi / 324]
    top = 4 * math.pi / (3 * math.sqrt(3))
    for e in (1e-2, 1e-3):  # the e³ coefficient is about -0.31 (a fit); |resid| < e³ plus 1e-9 accuracy
        resid = entropy_density(L3 - e, 3) / top - (1 - 5 * e / 6 - 19 * e * e / 72)
        assert abs(resid) < e**3 + 1e-9


def test_n3_top_value_and_largest_at_log3():
    # At the centre -H has Hessian 3[[2,1],[1,2]] in (p1, p2): the set {log 3 - H < ε} has area 2πε/sqrt(27) and the
    # uniform density is 2, so ρ_3 -> 4π/sqrt(27) = 4π/(3√3).
    top = 4 * math.pi / (3 * math.sqrt(3))
    assert entropy_density(L3, 3) == top
    # and near it ρ_3(log 3 - e) = top (1 - 5e/6 + O(e²)) (thm-small-n-density; the e² coefficient is -19/72,
    # test_n3_top_series_has_no_half_powers): tolerance e²/3 + 1e-9 (the docstring's accuracy); a remainder
    # C e^{3/2} with |C| > 0.011 would fail it at e = 1e-3.
    for e in (1e-3, 1e-5, 1e-7):
        assert entropy_density(L3 - e, 3) == pytest.approx(top * (1 - 5 * e / 6), rel=1e-9 + e * e / 3)
    h = np.linspace(1e-3, L3 - 1e-6, 500)
    r = entropy_density(h, 3)
    assert np.all(np.diff(r) > 0) and r.max() < top  # increasing: largest at log 3 (measured, fine grid)


@pytest.mark.parametrize("n", [2, 3])
def test_against_monte_carlo_histogram(n):
    # histogram bins of width w: the bin average of ρ (8-point Gauss-Legendre, exact to ~1e-9 on a smooth bin) vs the
    # count fraction / w, 5 binomial standard errors
    st = entropy_statistics(n, samples=400_000, bins=40, hist_range=(0.0, math.log(n)),
                            generator=torch.Generator().manual_seed(n))
    centers, dens = st.density()
    w = np.diff(st.edges)[0]
    x, gw = np.polynomial.legendre.leggauss(8)
    exact = (entropy_density(centers[:, None] + (w / 2) * x[None, :], n) @ gw) / 2
    se = np.sqrt(exact * w * (1 - exact * w) / st.samples) / w
    inner = slice(0, -1)  # the last bin holds the n = 2 singularity at log 2
    assert np.all(np.abs(dens[inner] - exact[inner]) < 5 * se[inner] + 1e-6)


def test_bad_input():
    with pytest.raises(ValueError, match="n must be 2 or 3"):
        entropy_density(0.5, 4)
    with pytest.raises(TypeError, match="n must be the integer"):
        entropy_density(0.5, 2.0)
    with pytest.raises(ValueError, match="NaN"):
        entropy_density(math.nan, 2)
    with pytest.raises(TypeError, match="h must be"):
        entropy_density("0.5", 2)
    assert entropy_density(np.array([-1.0, 5.0]), 3).tolist() == [0.0, 0.0]
    assert isinstance(entropy_density(0.3, 2), float) and entropy_density(np.array([[0.3]]), 3).shape == (1, 1)
