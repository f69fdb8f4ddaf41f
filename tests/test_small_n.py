"""Tests of svmuon.spectral.small_n.entropy_density: the exact density of H(p), p uniform on Δ^{n-1}, n = 2, 3.

Independent routes: the closed-form distribution function for n = 2 (P(H <= h) = 2 t(h), t the smaller
preimage, found here with scipy's brentq), the exact moments (E[H] = H_n - 1 and the exact variance, theory
module), the top value 4π/(3√3) from the Hessian of H at the centre, and Monte Carlo histograms.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
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
    # near the top ρ_2 ~ 1/(2 sqrt((log 2 - h)/2)) (the binary entropy is ~ log 2 - 2ε² at t = 1/2 - ε)
    d = 1e-10
    assert entropy_density(L2 - d, 2) == pytest.approx(1 / (2 * math.sqrt(d / 2)), rel=1e-4)
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


def test_n3_top_value_and_largest_at_log3():
    # At the centre -H has Hessian 3[[2,1],[1,2]] in (p1, p2): the set {log 3 - H < ε} has area 2πε/sqrt(27) and the
    # uniform density is 2, so ρ_3 -> 4π/sqrt(27) = 4π/(3√3).
    top = 4 * math.pi / (3 * math.sqrt(3))
    assert entropy_density(L3, 3) == top
    # and near it ρ_3(log 3 - e) = top (1 - 5e/6 + O(e²)) (the fourth-order expansion of H at the centre)
    for e in (1e-3, 1e-5, 1e-7):
        assert entropy_density(L3 - e, 3) == pytest.approx(top * (1 - 5 * e / 6), rel=1e-8 + e * e)
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
