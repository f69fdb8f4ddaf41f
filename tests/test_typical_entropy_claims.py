"""Claims of chapters/part1/typical_entropy.md, checked by routes independent of the chapter's cells.

* The small-n fit (cubic to log density within 0.15 sd of the peak, 1000 bins over (0, log n)) has a bias
  below its Monte Carlo standard error (6 runs of 10^6) at n = 5 and n = 6, against the exact rho_5 and rho_6
  from the recursion eq-density-recursion (rho_3 exact -> rho_4 -> rho_5 -> rho_6); the standard error is
  from the chapter's own runs (seeds 100 n + r). At n = 5 a window of 0.2 sd has a bias above the standard
  error of the 0.15 sd fit, and one of 0.3 sd has a bias larger than its own standard error; at n = 6 the bias
  is below 1/100 of it.
* The singular points log(n - 1) relative to the fit's window: log 3 outside it at n = 4, log 4 inside it
  and above the mode at n = 5, log 5 outside it at n = 6.
* The cubic fit of the "Where is the mode?" section (60 bins within 1.5 sd of the mean, runs of 100 000)
  recovers the mode shift of a negated gamma law of the skewness of n = 100 with a bias below the standard
  error of a four-run fit, is about 16 % low at the skewness of n = 10, and a parabola recovers about half.
* The constants of the prose: mode - mean field ~ 1.380 / n (0.014 at n = 100, 0.005 at n = 300, below
  1e-3 from n = 1380 on), the spread 0.053 at n = 100, from mpmath.
* The recorded Monte Carlo benchmark: 2 cores, under load, our kernel on about one core, wall and CPU
  ratios within the spread of the repeats, read with plain json.
* Exercise ex-typical-tail: log n - 0.52 is three standard deviations below the mean at n = 256, and the
  Monte Carlo tail is well above the normal one (NumPy draws, binomial standard error).
"""

import functools
import json
import math
import statistics
from pathlib import Path

import mpmath as mp
import numpy as np
import pytest
import torch
from scipy import optimize, stats

from svmuon import entropy_asymptotics, entropy_density, entropy_statistics, entropy_variance

ROOT = Path(__file__).resolve().parents[1]


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


@functools.lru_cache(maxsize=None)
def _exact_densities():
    """rho_4, rho_5 and rho_6 (vectorised functions) from eq-density-recursion."""
    u3 = np.linspace(0, math.log(3), 2001)
    r3 = entropy_density(u3, 3)
    x, w = np.polynomial.legendre.leggauss(96)

    def rho4(h):  # Gauss-Legendre on each side of c = 1/4, split at the roots of beta_c = log 3
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
    cm = (np.arange(40_000) + 0.5) / 40_000  # midpoint rule in c
    hbm = _hb(cm)

    def step(u, r, n):  # rho_n from a table of rho_(n-1)
        def rho(h):
            h = np.atleast_1d(h)
            out = np.empty(h.size)
            for i in range(0, h.size, 64):
                beta = (h[i:i + 64, None] - hbm) / (1 - cm)
                out[i:i + 64] = (n - 1) * ((1 - cm) ** (n - 3) * np.interp(beta, u, r, 0.0, 0.0)).mean(axis=1)
            return out
        return rho

    rho5 = step(u4, r4, 5)
    u5 = np.linspace(0, math.log(5), 2001)
    rho6 = step(u5, rho5(u5), 6)
    return np.vectorize(rho4), rho5, rho6


def _exact_mode(n):
    rho = _exact_densities()[n - 4]
    grid = np.linspace(0.75 * math.log(n), math.log(n) * (1 - 1e-9), 200)
    top = grid[np.argmax(rho(grid))]
    return optimize.minimize_scalar(lambda h: -rho(np.atleast_1d(h))[0], bounds=(top - 0.01, top + 0.01),
                                    method="bounded", options={"xatol": 1e-8}).x


@functools.lru_cache(maxsize=None)
def _bias_and_runs(n, windows=(0.15,)):
    """The fit's bias on exact bin averages of rho_n, and its modes on the chapter's six runs, per window."""
    rho = _exact_densities()[n - 4]
    exact = _exact_mode(n)
    s = math.sqrt(entropy_variance(n))
    edges = np.linspace(0, math.log(n), 1001)
    cen = (edges[:-1] + edges[1:]) / 2
    near = np.abs(cen - exact) < 0.35 * s
    xg, wg = np.polynomial.legendre.leggauss(4)
    pts = (edges[np.flatnonzero(near)][:, None] + (xg + 1) / 2 * (edges[1] - edges[0])).ravel()
    avg = 0.5 * (rho(pts).reshape(-1, 4) * wg).sum(axis=1)
    bias = {wd: _window_mode(cen[near], avg, exact, wd * s) - exact for wd in windows}
    modes = {wd: [] for wd in windows}
    for r in range(6):  # the chapter's runs for n
        st = entropy_statistics(n, samples=1_000_000, bins=1000, hist_range=(0.0, math.log(n)),
                                generator=torch.Generator().manual_seed(100 * n + r))
        c, d = st.density()
        for wd in windows:
            modes[wd].append(_window_mode(c, d, exact, wd * s))
    se = {wd: np.std(modes[wd], ddof=1) / math.sqrt(6) for wd in windows}
    return exact, bias, {wd: np.mean(m) for wd, m in modes.items()}, se


@pytest.mark.parametrize("n", [5, 6])
def test_small_n_fit_bias_below_its_stderr(n):
    exact, bias, mean, se = _bias_and_runs(n, (0.15, 0.2, 0.3))
    assert abs(bias[0.15]) < se[0.15], (bias, se)
    assert abs(mean[0.15] - exact) < 3 * se[0.15]  # 3 standard errors
    if n == 5:  # the window is narrow on purpose
        assert abs(bias[0.2]) > se[0.15], (bias, se)
        assert abs(bias[0.3]) > se[0.3], (bias, se)
    else:  # measured: |bias| ~ 1e-5 (the accuracy of the exact mode), se ~ 3e-3
        assert abs(bias[0.15]) < se[0.15] / 100, (bias, se)


def test_singular_points_against_the_fit_window():
    half = {n: 0.15 * math.sqrt(entropy_variance(n)) for n in (4, 5, 6)}
    near4 = _exact_mode(4) - math.log(3)
    near5 = math.log(4) - _exact_mode(5)
    near6 = math.log(5) - _exact_mode(6)
    assert near4 > half[4] and near6 > half[6]  # outside the window
    assert 0 < near5 < half[5]  # inside it, above the mode (log 5 is above it too)
    assert f"{near4:.2f}" == "0.05"  # the chapter's exact value, to its 2 digits


def _gamma_fit(n, deg, runs=40):
    rng = np.random.default_rng(0)
    g1 = entropy_asymptotics(1.0).skewness / math.sqrt(n)
    k = (2 / g1) ** 2
    m, s, shift = -k, math.sqrt(k), 1.0  # negated Gamma(k, 1): mode - mean = +1
    est = []
    for _ in range(runs):
        cnt, e = np.histogram(-rng.gamma(k, 1.0, 100_000), bins=60, range=(m - 1.5 * s, m + 1.5 * s))
        c, d = (e[:-1] + e[1:]) / 2, cnt / (100_000 * np.diff(e))
        z = np.roots(np.polyder(np.polyfit((c - m) / s, np.log(d), deg)))
        z = z[np.isreal(z)].real
        est.append(m + s * z[np.argmin(np.abs(z))])
    est = (np.array(est) - m) / shift  # fraction of the shift recovered
    return est.mean(), est.std(ddof=1)


def test_large_n_cubic_fit_on_a_gamma_of_the_same_skewness():
    rec, sd = _gamma_fit(100, 3)
    se4 = sd / 2  # standard error of a mean of 4 runs, as in the chapter
    assert abs(rec - 1) < se4  # measured: 1.7 % low, standard error of this 40-run mean 1.0 %
    assert abs(rec - 1) < 3 * sd / math.sqrt(40)


def test_cubic_fit_low_at_n10_and_parabola_half():
    rec10, sd10 = _gamma_fit(10, 3)
    # the chapter's 16 % (other draws): within 3 combined standard errors plus its rounding
    assert abs((1 - rec10) - 0.163) < 3 * math.sqrt(2) * sd10 / math.sqrt(40) + 0.005
    for n in (100, 10):  # "only about half": between 40 % and 60 % (measured 55 % and 52 %)
        rec, _ = _gamma_fit(n, 2)
        assert 0.4 < rec < 0.6, (n, rec)


def test_mode_minus_mean_field_constants():
    mp.mp.dps = 30
    offset = mp.mpf(1) / 2 + (10 + mp.pi**2 / 2 - 12 * mp.zeta(3)) / (2 * (mp.pi**2 / 3 - 3))
    assert abs(0.5 + entropy_asymptotics(1.0).mode_offset - float(offset)) < 1e-12
    assert f"{float(offset):.3f}" == "1.380" and f"{float(offset):.2f}" == "1.38"
    assert f"{float(offset / 100):.3f}" == "0.014" and f"{float(offset / 300):.3f}" == "0.005"
    n_acc = next(n for n in range(1, 10**5) if offset / n <= mp.mpf("1e-3"))
    assert n_acc == 1380
    # the same threshold with the exact mean H_n - 1 in place of its expansion
    def err(n):
        return mp.harmonic(n) - 1 - (mp.log(n) - 1 + mp.euler) + (offset - mp.mpf(1) / 2) / n
    assert err(1379) > 1e-3 > err(1380)
    # the spread at n = 100: eq-exact-variance by mpmath's polygamma
    var = (mp.pi**2 / 3 - 2) / 101 - mp.mpf(1) / 101**2 - mp.psi(1, 102)
    assert f"{float(mp.sqrt(var)):.3f}" == "0.053"


def test_recorded_monte_carlo_benchmark():
    path = sorted((ROOT / "benchmarks" / "results").glob("monte-carlo-cpu-*.json"))[-1]
    rec = json.loads(path.read_text())
    assert rec["hardware"]["cpu_count"] == 2
    assert rec["load_average"]["before"][0] >= 1  # under load: at least one core busy
    per_core = [c / w for r in rec["results"] for c, w in zip(r["ours_cpu_s"], r["ours_s"])]
    assert 0.5 <= statistics.median(per_core) < 1.5  # about one core
    for r in rec["results"]:  # wall and CPU ratios of medians, recomputed from the repeats
        wall = statistics.median(r["numpy_s"]) / statistics.median(r["ours_s"])
        cpu = statistics.median(r["numpy_cpu_s"]) / statistics.median(r["ours_cpu_s"])
        assert abs(wall - r["ratio_median"]) < 1e-9 and abs(cpu - r["cpu_ratio_median"]) < 1e-9
        assert abs(wall / cpu - 1) < max(r["ours_s"]) / min(r["ours_s"]) - 1


def test_exercise_tail_three_sd_and_heavier_than_normal():
    mp.mp.dps = 30
    n = 256
    mean = mp.harmonic(n) - 1
    var = (mp.pi**2 / 3 - 2) / (n + 1) - mp.mpf(1) / (n + 1) ** 2 - mp.psi(1, n + 2)
    cut = mp.log(n) - mp.mpf("0.52")
    z = float((cut - mean) / mp.sqrt(var))
    assert round(-z) == 3
    x = np.random.default_rng(1).exponential(size=(50_000, n))
    p = x / x.sum(axis=1, keepdims=True)
    h = -(p * np.log(p)).sum(axis=1)
    frac = np.mean(h < float(cut))
    se = math.sqrt(frac * (1 - frac) / h.size)
    assert frac - stats.norm.cdf(z) > 3 * se
