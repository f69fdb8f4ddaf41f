"""Claims of chapters/part1/typical_entropy.md about its mode fits, checked where the answer is known.

* The small-n fit (cubic to log density within 0.15 sd of the peak, 1000 bins over (0, log n)) has a bias
  below its Monte Carlo standard error (6 runs of 10^6) at n = 5, against the exact rho_5 from the recursion
  eq-density-recursion (rho_3 exact -> rho_4 -> rho_5); the standard error is from the chapter's own runs.
* The cubic fit of the "Where is the mode?" section (60 bins within 1.5 sd of the mean, 4 runs of 100 000)
  recovers the mode shift of a negated gamma law of the skewness of n = 100 to within 2 %, below its standard
  error (the mode of Gamma(k, theta) is (k - 1) theta, one theta below its mean).
"""

import math

import numpy as np
import torch
from scipy import optimize

from svmuon import entropy_asymptotics, entropy_density, entropy_statistics, entropy_variance


def _hb(c):
    return -(c * np.log(c) + (1 - c) * np.log1p(-c))


def _window_mode(c, d, center, half_width):  # as in the chapter
    for _ in range(3):
        sel = np.abs(c - center) <= half_width
        der = np.polyder(np.polyfit(c[sel] - center, np.log(d[sel]), 3))
        roots = np.roots(der)
        roots = roots[np.isreal(roots)].real
        center += roots[np.argmin(np.abs(roots))] if roots.size else -der[1] / (2 * der[0])
    return center


def test_small_n_fit_bias_below_its_stderr_at_n5():
    u3 = np.linspace(0, math.log(3), 2001)
    r3 = entropy_density(u3, 3)
    x, w = np.polynomial.legendre.leggauss(96)

    def rho4(h):
        f3 = lambda c: _hb(c) + (1 - c) * math.log(3) - h  # noqa: E731
        c1 = optimize.brentq(f3, 1e-300, 0.25) if h > math.log(3) else 0.0
        c2 = optimize.brentq(f3, 0.25, 1 - 1e-16)
        tot = 0.0
        for a, b in ((c1, 0.25), (0.25, c2)):
            c = (a + b) / 2 + (b - a) / 2 * x
            tot += (b - a) / 2 * np.sum(w * 3 * (1 - c) * np.interp((h - _hb(c)) / (1 - c), u3, r3, 0.0, 0.0))
        return tot

    u4 = np.linspace(0, math.log(4), 2001)
    u4[-1] *= 1 - 1e-12
    r4 = np.array([rho4(t) if t > 1e-9 else 0.0 for t in u4])
    cm = (np.arange(40_000) + 0.5) / 40_000

    def rho5(h):
        beta = (np.atleast_1d(h)[:, None] - _hb(cm)) / (1 - cm)
        return 4 * ((1 - cm) ** 2 * np.interp(beta, u4, r4, left=0.0, right=0.0)).mean(axis=1)

    exact = optimize.minimize_scalar(lambda h: -rho5(h)[0], bounds=(1.33, 1.385), method="bounded",
                                     options={"xatol": 1e-8}).x
    s = math.sqrt(entropy_variance(5))
    edges = np.linspace(0, math.log(5), 1001)
    cen = (edges[:-1] + edges[1:]) / 2
    near = np.abs(cen - exact) < 0.3 * s
    xg, wg = np.polynomial.legendre.leggauss(4)
    avg = np.array([0.5 * np.sum(wg * rho5(edges[j] + (xg + 1) / 2 * (edges[j + 1] - edges[j])))
                    for j in np.flatnonzero(near)])
    bias = _window_mode(cen[near], avg, exact, 0.15 * s) - exact
    modes = []
    for r in range(6):  # the chapter's runs for n = 5
        st = entropy_statistics(5, samples=1_000_000, bins=1000, hist_range=(0.0, math.log(5)),
                                generator=torch.Generator().manual_seed(500 + r))
        c, d = st.density()
        modes.append(_window_mode(c, d, exact, 0.15 * s))
    se = np.std(modes, ddof=1) / math.sqrt(6)
    assert abs(bias) < se, (bias, se)
    assert abs(np.mean(modes) - exact) < 3 * se  # 3 standard errors


def test_large_n_cubic_fit_on_a_gamma_of_the_same_skewness():
    rng = np.random.default_rng(0)
    g1 = entropy_asymptotics(1.0).skewness / math.sqrt(100)
    k = (2 / g1) ** 2
    m, s, shift = -k, math.sqrt(k), 1.0  # negated Gamma(k, 1): mode - mean = +1
    est = []
    for _ in range(40):
        cnt, e = np.histogram(-rng.gamma(k, 1.0, 100_000), bins=60, range=(m - 1.5 * s, m + 1.5 * s))
        c, d = (e[:-1] + e[1:]) / 2, cnt / (100_000 * np.diff(e))
        a3, a2, a1, _ = np.polyfit((c - m) / s, np.log(d), 3)
        z = np.roots([3 * a3, 2 * a2, a1])
        z = z[np.isreal(z)].real
        est.append(m + s * z[np.argmin(np.abs(z))])
    est = np.array(est)
    bias = (est.mean() - (m + shift)) / shift
    se4 = est.std(ddof=1) / 2 / shift  # standard error of a mean of 4 runs, as in the chapter
    assert abs(bias) < 0.03  # 2 % measured, 0.9 % standard error of this 40-run mean
    assert abs(bias) < se4
