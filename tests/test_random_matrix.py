"""Tests of svmuon.spectral.random_matrix: the Marchenko–Pastur limits of H_q - log k for Gaussian matrices.

Independent routes: classical closed forms (E[x²] = 1 + λ for Marchenko–Pastur; the quarter-circle mean
E[σ] = 8/(3π) at λ = 1), mpmath's tanh-sinh quadrature in the original variable x (the library integrates in
an angle with scipy), and Monte Carlo over Gaussian matrices with a Richardson step that removes the O(1/k)
finite-size bias.
"""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
import torch

from svmuon.spectral.random_matrix import (
    gaussian_entropy_limit,
    gaussian_entropy_samples,
    marchenko_pastur_moment,
    marchenko_pastur_pdf,
)

# Quadrature tolerance: scipy.quad is asked for 1e-12 relative; 1e-9 leaves room for the log/sqrt endpoints.
QUAD_TOL = 1e-9


def _mp_expectation(f, lam):
    """E[f(x)] for Marchenko–Pastur(λ) by mpmath in x itself (tanh-sinh copes with the edge singularities)."""
    a, b = (1 - mp.sqrt(lam)) ** 2, (1 + mp.sqrt(lam)) ** 2
    dens = lambda x: mp.sqrt((b - x) * (x - a)) / (2 * mp.pi * lam * x)
    return float(mp.quad(lambda x: f(x) * dens(x), [a, 1, b]))


def _limit_by_mpmath(lam, q, power):
    a = power / 2
    Ey = _mp_expectation(lambda x: x**a, lam)
    if q == 1:
        return math.log(Ey) - _mp_expectation(lambda x: a * x**a * mp.log(x), lam) / Ey
    return (q * math.log(Ey) - math.log(_mp_expectation(lambda x: x ** (a * q), lam))) / (q - 1)


@pytest.mark.parametrize("lam", [1.0, 0.5, 0.25, 0.1])
def test_density_is_normalised_with_mean_one_and_second_moment(lam):
    assert marchenko_pastur_moment(lambda x: 1.0, lam) == pytest.approx(1.0, abs=QUAD_TOL)
    assert marchenko_pastur_moment(lambda x: x, lam) == pytest.approx(1.0, abs=QUAD_TOL)
    assert marchenko_pastur_moment(lambda x: x * x, lam) == pytest.approx(1 + lam, abs=QUAD_TOL)


@pytest.mark.parametrize("lam", [1.0, 0.3])
@pytest.mark.parametrize("q", [1, 2, 0.5])
@pytest.mark.parametrize("power", [1, 2])
def test_limit_matches_mpmath_in_the_original_variable(lam, q, power):
    # scipy.quad at 1e-12 relative (QUAD_TOL's margin) through a log and a ratio of integrals of size ~1: 1e-8
    assert gaussian_entropy_limit(lam, q=q, power=power) == pytest.approx(_limit_by_mpmath(lam, q, power), abs=1e-8)


@pytest.mark.parametrize("lam", [1.0, 0.5, 0.2])
def test_closed_forms(lam):
    # power 2, q 2: 2 log E[x] - log E[x²] = -log(1 + λ) (Marchenko–Pastur moments).
    assert gaussian_entropy_limit(lam, q=2, power=2) == pytest.approx(-math.log1p(lam), abs=QUAD_TOL)
    # power 2, q 1: the quadrature gives -λ/2, i.e. E[x log x] = λ/2 (checked in the chapter with SymPy at λ = 1).
    assert gaussian_entropy_limit(lam, q=1, power=2) == pytest.approx(-lam / 2, abs=QUAD_TOL)


def test_quarter_circle_square_case():
    # λ = 1, power 1, q 2: σ has the quarter-circle density sqrt(4 - s²)/π on [0, 2]: E[σ] = 8/(3π), E[σ²] = 1.
    assert gaussian_entropy_limit(1.0, q=2, power=1) == pytest.approx(2 * math.log(8 / (3 * math.pi)), abs=QUAD_TOL)
    qc = lambda f: float(mp.quad(lambda s: f(s) * mp.sqrt(4 - s * s) / mp.pi, [0, 2]))
    Es = qc(lambda s: s)
    expected = math.log(Es) - qc(lambda s: s * mp.log(s) if s > 0 else 0) / Es
    assert gaussian_entropy_limit(1.0, q=1, power=1) == pytest.approx(expected, abs=1e-8)


def test_limits_ordered_and_vanish_for_flat_matrices():
    # Jensen: every limit is <= 0 (log k is the maximum); as λ -> 0 the spectrum concentrates at 1.
    for lam in (1.0, 0.5, 0.1, 1e-3):
        for q in (0.5, 1, 2, 3):
            for power in (1, 2):
                assert gaussian_entropy_limit(lam, q=q, power=power) <= 1e-12
    assert abs(gaussian_entropy_limit(1e-4, power=1)) < 1e-4
    assert gaussian_entropy_limit(0.7, q=0) == 0.0


@pytest.fixture
def single_thread():
    """Batched SVDs of small matrices: one thread is faster than two fighting for a busy 2-core CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# Monte Carlo. H - log k = L + c/k + O(1/k²) with c of order -0.4 (measured), so E_k alone is biased by more
# than its standard error; the Richardson combination 2 E_{2k} - E_k cancels c/k and leaves O(1/k²) ~ 2e-4 at
# k = 64, several times below the standard error of the combination (~1e-3), which sets the 4 SE tolerance.
# (Checked over 15 seeds x 16 cases: z-scores have mean -0.2, sd 0.9, max |z| 2.2.)
@pytest.mark.parametrize("shape,draws", [((64, 64), 320), ((256, 64), 120)])
def test_limit_against_sampling(shape, draws, single_thread):
    gen = torch.Generator().manual_seed(7)
    m, n = shape
    qs, powers = (1, 2), (1, 2)
    # float32 spectra: entropy rounding ~1e-6 nats, far below the ~1e-3 standard error.
    small = gaussian_entropy_samples(m, n, draws=draws, q=qs, power=powers, generator=gen, dtype=torch.float32)
    large = gaussian_entropy_samples(2 * m, 2 * n, draws=draws // 2, q=qs, power=powers, generator=gen,
                                     dtype=torch.float32)
    for i, q in enumerate(qs):
        for j, power in enumerate(powers):
            s, b = small[i, j], large[i, j]
            estimate = 2 * b.mean() - s.mean()
            se = math.sqrt(4 * b.var(ddof=1) / b.size + s.var(ddof=1) / s.size)
            limit = gaussian_entropy_limit(min(m, n) / max(m, n), q=q, power=power)
            assert abs(estimate - limit) < 4 * se, (q, power, estimate, limit, se)


def test_samples_shape_and_reproducibility():
    a = gaussian_entropy_samples(8, 5, draws=3, generator=torch.Generator().manual_seed(0))
    b = gaussian_entropy_samples(8, 5, draws=3, generator=torch.Generator().manual_seed(0))
    # H <= log k exactly; the gap to log k is computed, so rounding of log k (~1e-15) may make it slightly positive
    assert a.shape == (3,) and np.array_equal(a, b) and (a <= 1e-12).all()
    c = gaussian_entropy_samples(8, 5, draws=3, q=(1, 2), power=(1,), generator=torch.Generator().manual_seed(0))
    # the same draws through a second code path (several orders at once): float64 rounding of sums of <= 5 terms
    assert c.shape == (2, 1, 3) and np.allclose(c[0, 0], a, rtol=0, atol=1e-12)


def test_pdf_values():
    x = np.array([-1.0, 0.0, 1.0, 5.0])
    f = marchenko_pastur_pdf(x, 1.0)
    # default rel 1e-6: a closed form evaluated once
    assert f[0] == 0 and f[1] == 0 and f[3] == 0 and f[2] == pytest.approx(math.sqrt(3) / (2 * math.pi))


@pytest.mark.parametrize("bad", [0.0, 1.5, -0.2, float("nan")])
def test_bad_aspect_ratio(bad):
    with pytest.raises(ValueError, match="aspect_ratio"):
        gaussian_entropy_limit(bad)


def test_bad_arguments():
    with pytest.raises(TypeError, match="aspect_ratio"):
        gaussian_entropy_limit("1")
    with pytest.raises(ValueError, match="q"):
        gaussian_entropy_limit(0.5, q=-1)
    with pytest.raises(ValueError, match="power"):
        gaussian_entropy_limit(0.5, power=0)
    with pytest.raises(TypeError, match="g must be a callable"):
        marchenko_pastur_moment(3.0, 0.5)
    with pytest.raises(ValueError, match="draws"):
        gaussian_entropy_samples(4, 4, draws=0)


# Near q = 1 the formula is 0/0; the library's expm1/log1p form must be continuous. Expected values: mpmath at
# 40 digits in the original variable x (independent of the library's angle substitution and scipy), so the
# tolerance 1e-9 is the quadrature accuracy, not a bound on a jump (the old code jumped by 6e-2 at |q-1| ~ 1e-14).
@pytest.mark.parametrize("power", [1, 2])
@pytest.mark.parametrize("delta", [1e-15, -1e-14, 1e-13, 1e-9, -3e-6, 0.2])
def test_limit_is_continuous_through_q_equal_one(power, delta):
    q = 1 + delta  # the float the library receives; mpmath works with exactly this q
    with mp.workdps(40):
        a = mp.mpf(power) / 2
        dens = lambda x: mp.sqrt((4 - x) * x) / (2 * mp.pi * x)
        Ey = mp.quad(lambda x: x**a * dens(x), [0, 1, 4])
        Eyq = mp.quad(lambda x: x ** (a * mp.mpf(q)) * dens(x), [0, 1, 4])
        expected = float((mp.mpf(q) * mp.log(Ey) - mp.log(Eyq)) / (mp.mpf(q) - 1))
    assert gaussian_entropy_limit(1.0, q=q, power=power) == pytest.approx(expected, abs=1e-9)
    # and the Shannon value itself is within the slope |dL/dq| <= 1 times |q - 1| of it
    assert abs(gaussian_entropy_limit(1.0, q=1 + delta, power=power) - gaussian_entropy_limit(1.0, power=power)) \
        <= abs(delta) + 1e-12


@pytest.mark.parametrize("lam", [1.0, 0.25])
@pytest.mark.parametrize("power", [1, 2])
def test_q_infinity_is_the_edge_of_the_spectrum(lam, power):
    # H_inf - log k = log mean(y) - log max(y), and max x -> b = (1 + sqrt λ)² (Yin, Bai and Krishnaiah).
    a = power / 2
    expected = math.log(_mp_expectation(lambda x: x**a, lam)) - a * 2 * math.log(1 + math.sqrt(lam))
    assert gaussian_entropy_limit(lam, q=math.inf, power=power) == pytest.approx(expected, abs=1e-9)
    # large finite q approaches it from above (H_q is non-increasing in q), like log q / q
    values = [gaussian_entropy_limit(lam, q=q, power=power) for q in (10, 100, 400)]
    assert values[0] > values[1] > values[2] > gaussian_entropy_limit(lam, q=math.inf, power=power)


def test_large_q_does_not_overflow():
    # E[x^(q)] at λ = 1 reaches 4^q / q^(3/2): beyond q ~ 512 it overflows float64 unless scaled by the edge.
    # Closed form for power 2, λ = 1: E[x^s] = Γ(2s+1)/(Γ(s+1)Γ(s+2)), the Catalan numbers
    # at integer s (moments of MP(1), the free Poisson law).
    q = 700.0
    log_moment = math.lgamma(2 * q + 1) - math.lgamma(q + 1) - math.lgamma(q + 2)
    assert gaussian_entropy_limit(1.0, q=q, power=2) == pytest.approx(-log_moment / (q - 1), rel=1e-9)


@pytest.mark.parametrize("power", [1, 2])
@pytest.mark.parametrize("q", [3.0, 700.0, 1e6, 1e10, 1e15, 1e100, 1e300])
def test_every_large_q_is_accurate(q, power):
    """Issue 19: q = 1e10 or 1e300 gave "math domain error" (E[(x/b)^q] underflowed in the quadrature).
    Independent route at λ = 1: the moments of MP(1) are Γ(2s+1)/(Γ(s+1)Γ(s+2)) (Catalan numbers at integer s),
    s = q·power/2, evaluated with mpmath at 50 digits; E[y] = E[x^(power/2)] likewise. The library's moment is
    accurate to 1e-9 relative (its quadrature check), so H to 1e-9/(q - 1), plus float64 rounding of H."""
    mp.mp.dps = 50
    a, qm = mp.mpf(power) / 2, mp.mpf(q)

    def log_moment(t):
        return mp.loggamma(2 * t + 1) - mp.loggamma(t + 1) - mp.loggamma(t + 2)

    expected = float((qm * log_moment(a) - log_moment(a * qm)) / (qm - 1))
    value = gaussian_entropy_limit(1.0, q=q, power=power)
    assert value == pytest.approx(expected, abs=1e-9 / (q - 1) + 4e-16)
    assert value >= gaussian_entropy_limit(1.0, q=math.inf, power=power)  # non-increasing in q


def test_large_q_agrees_with_the_direct_quadrature_for_every_aspect_ratio():
    """Beyond λ = 1 there is no closed form at large q: against mpmath's quadrature of E[x^q] in x (q = 40,
    where the direct integral is still well resolved) for λ = 0.25 and 0.04."""
    for lam in (0.25, 0.04):
        q = 40.0
        expected = (q * math.log(_mp_expectation(lambda x: x**0.5, lam))
                    - math.log(_mp_expectation(lambda x: x ** (q / 2), lam))) / (q - 1)
        assert gaussian_entropy_limit(lam, q=q, power=1) == pytest.approx(expected, abs=QUAD_TOL)


@pytest.mark.parametrize("g", [lambda x: 1 / x, lambda x: x**-0.5, lambda x: math.log(x) / x])
def test_divergent_moment_is_an_error_not_a_number(g):
    # At λ = 1 the density is ~ 1/(π sqrt x) near 0, so these integrals are infinite; the old code returned
    # -0.5 for E[1/x]. For λ < 1 the support stays away from 0 and E[1/x] = 1/(1-λ) is finite.
    with pytest.raises(ValueError, match="does not converge"):
        marchenko_pastur_moment(g, 1.0)
    assert marchenko_pastur_moment(lambda x: 1 / x, 0.25) == pytest.approx(1 / 0.75, rel=1e-10)


def test_convergent_singular_moment_still_computed():
    # E[x^s] at λ = 1 for s = -1/4 > -1/2 is finite: Γ(2s+1)/(Γ(s+1)Γ(s+2)) (the same closed form as above).
    s = -0.25
    expected = math.exp(math.lgamma(2 * s + 1) - math.lgamma(s + 1) - math.lgamma(s + 2))
    assert marchenko_pastur_moment(lambda x: x**s, 1.0) == pytest.approx(expected, rel=1e-8)


def test_flat_matrix_limit_erratum():
    # Erratum (chapter "Is higher entropy better?", exercise ex-real-flat-limit): the table has λ = 1/8, where the
    # p ∝ σ limit is -0.0164 (mpmath in x), against the small-λ expansion -λ/8 = -0.0156; the difference is O(λ²).
    assert gaussian_entropy_limit(1 / 8, power=1) == pytest.approx(_limit_by_mpmath(1 / 8, 1, 1), abs=1e-9)
    assert round(gaussian_entropy_limit(1 / 8, power=1), 4) == -0.0164
    for lam in (1e-2, 1e-3):  # -λ/8 + O(λ²)
        assert abs(gaussian_entropy_limit(lam, power=1) + lam / 8) < lam**2
