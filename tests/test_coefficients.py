"""Newton–Schulz schedules: the minimax solve against a linear program, the published Polar Express table,
and the convergence / non-convergence of each schedule on its scalar map."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog

from svmuon.orthogonal.coefficients import (
    default_steps,
    get_schedule,
    optimal_quintic,
    polar_express_schedule,
    resolve_coefficients,
    scalar_map,
)

# Published Polar Express coefficients for l = 1e-3, u = 1 before the safety factor (amsel2025polar,
# arXiv:2505.16932, code listing accompanying Algorithm 1), carried here as an independent check.
PUBLISHED = [
    (8.28721201814563, -23.595886519098837, 17.300387312530933),
    (4.107059111542203, -2.9478499167379106, 0.5448431082926601),
    (3.948690853482295, -2.908902115962949, 0.5518191394370137),
    (3.318419657370602, -2.488488024314874, 0.51004894012372),
    (2.300652019954817, -1.6689039845747493, 0.4188073119525673),
    (1.891301407787398, -1.2679958271945868, 0.37680408948524835),
    (1.8750014808534479, -1.2500016453999487, 0.3750001645474248),
]


def minimax_lp(lo, hi, n_grid=4001):
    """min E s.t. |1 - (a x + b x³ + c x⁵)| <= E on a grid of [lo, hi]: a linear program (scipy HiGHS)."""
    x = np.geomspace(lo, hi, n_grid)
    P = np.stack([x, x**3, x**5], axis=1)
    ones = np.ones((n_grid, 1))
    A = np.vstack([np.hstack([P, -ones]), np.hstack([-P, -ones])])  # p - E <= 1 and -p - E <= -1
    b = np.concatenate([np.ones(n_grid), -np.ones(n_grid)])
    res = linprog([0, 0, 0, 1], A_ub=A, b_ub=b, bounds=[(None, None)] * 4, method="highs")
    return res.x[:3], res.x[3]


@pytest.mark.parametrize("lo,hi", [(0.02407, 1.0), (0.1, 1.0), (0.5, 1.3), (0.9, 1.1)])
def test_optimal_quintic_matches_linear_program(lo, hi):
    t = optimal_quintic(lo, hi)
    x = np.linspace(lo, hi, 200001)
    err = np.abs(1 - scalar_map(x, [t], 1)[-1]).max()
    coef, E_lp = minimax_lp(lo, hi)
    # the grid LP under-estimates the true minimax error by O(grid spacing²); the Remez value is exact up
    # to its 1e-15 stopping rule: agree within 1e-6 relative, and the Remez error is never larger.
    assert err == pytest.approx(E_lp, rel=1e-6)
    np.testing.assert_allclose(t, coef, rtol=1e-4)


def test_optimal_quintic_equioscillates():
    lo, hi = 0.05, 1.0
    a, b, c = optimal_quintic(lo, hi)
    disc = np.sqrt(9 * b * b - 20 * a * c)
    q, r = np.sqrt((-3 * b - disc) / (10 * c)), np.sqrt((-3 * b + disc) / (10 * c))
    e = 1 - scalar_map([lo, q, r, hi], [(a, b, c)], 1)[-1]
    # Remez stops once E settles to rounding: measured 1.7e-15 relative; 1e-10 fails a non-optimal quintic
    np.testing.assert_allclose(e, e[0] * np.array([1, -1, 1, -1]), rtol=1e-10)


def test_polar_express_reproduces_published_table():
    ours = polar_express_schedule()
    s = 1.01  # the safety factor: our triples are p(x / 1.01) for every step but the last
    for k, (pub, mine) in enumerate(zip(PUBLISHED, ours)):
        unsafe = (mine[0] * s, mine[1] * s**3, mine[2] * s**5)
        np.testing.assert_allclose(unsafe, pub, rtol=1e-9, err_msg=f"step {k}")
    # the degenerate-interval limit, exact rationals: a few ulps
    np.testing.assert_allclose(ours[-1], (15 / 8, -10 / 8, 3 / 8), rtol=1e-12)


def test_converging_schedules():
    x = np.geomspace(1e-3, 1.0, 5001)
    pe = scalar_map(x, "polar_express", 10)[-1]
    assert np.abs(pe - 1).max() < 1e-12  # float64 scalar iteration: converged to rounding
    cubic = scalar_map(np.geomspace(1e-4, 1.0, 5001), "cubic", 30)[-1]
    assert np.abs(cubic - 1).max() < 1e-12
    assert np.abs(scalar_map(x, "polar_express", 5)[-1] - 1).max() > 0.05  # 5 steps are not enough


def test_keller_jordan_oscillates_and_never_converges():
    x = np.geomspace(1e-3, 1.0, 20001)
    it = scalar_map(x, "keller_jordan", 60)
    for k in (8, 20, 59, 60):
        # measured band after >= 8 steps: [0.6818, 1.1344]; it does not shrink with more steps
        assert 0.67 < it[k].min() < 0.70 and 1.12 < it[k].max() < 1.15
    five = it[5]
    assert 0.45 < five.min() < 0.5 and 1.18 < five.max() < 1.22  # Muon's 5 steps, x in [1e-3, 1]
    # 1 is not even a fixed point: p(1) = a + b + c = 0.701
    assert scalar_map([1.0], "keller_jordan", 1)[-1][0] == pytest.approx(0.701, abs=1e-12)


def test_resolve_and_defaults():
    assert resolve_coefficients((1.0, 2.0, 3.0), 3) == [(1.0, 2.0, 3.0)] * 3  # a bare triple is repeated
    sched = resolve_coefficients("polar_express", 12)
    assert sched[:10] == list(get_schedule("polar_express")) and sched[10] == sched[11] == sched[9]
    assert default_steps("keller_jordan") == 5 and default_steps([(1, 0, 0)] * 4) == 4
    assert scalar_map(np.zeros((2, 3)), "cubic", 4).shape == (5, 2, 3)
    with pytest.raises(ValueError):
        get_schedule("quartic")
    with pytest.raises(TypeError):
        resolve_coefficients(3.0, 2)
    with pytest.raises(ValueError):
        resolve_coefficients([], 2)
    with pytest.raises(ValueError):
        optimal_quintic(0.0, 1.0)


def test_keller_jordan_band_from_mpmath():
    # Independent route: the 5-fold composition evaluated in mpmath (50 digits); its minimum over
    # [1e-3, 1] sits at the left end (checked on a grid in mpmath) and its maximum at the root of the
    # derivative near x = 0.0041 (mpmath.findroot). The stored band is both ends rounded outward to 4 digits.
    import mpmath as mp

    from svmuon.orthogonal.coefficients import KELLER_JORDAN_BAND, output_max

    mp.mp.dps = 50
    a, b, c = (mp.mpf(v) for v in ("3.4445", "-4.7750", "2.0315"))

    def p5(x):
        for _ in range(5):
            x = a * x + b * x**3 + c * x**5
        return x

    lo = p5(mp.mpf("1e-3"))
    xs = [mp.mpf(10) ** (mp.mpf(-3) + 3 * mp.mpf(k) / 2000) for k in range(2001)]  # log grid on [1e-3, 1]
    grid = [p5(x) for x in xs]
    assert min(grid) == lo  # the minimum is at the left end
    # every local maximum of the grid, refined to the root of p5' in its bracket (Illinois solver)
    peaks = [k for k in range(1, 2000) if grid[k - 1] <= grid[k] >= grid[k + 1]]
    roots = [mp.findroot(lambda x: mp.diff(p5, x), (xs[k - 1], xs[k + 1]), solver="illinois") for k in peaks]
    hi = max([p5(x) for x in roots] + [grid[-1]])
    assert max(grid) <= hi  # no larger value anywhere on the grid
    assert KELLER_JORDAN_BAND[0] <= lo < KELLER_JORDAN_BAND[0] + 1e-4
    assert KELLER_JORDAN_BAND[1] - 1e-4 < hi <= KELLER_JORDAN_BAND[1]
    # output_max (grid + 1e-5 margin) bounds the true maximum from above, by at most ~2e-5 relative
    sigma_max = output_max(resolve_coefficients("keller_jordan", 5))
    assert float(hi) <= sigma_max <= float(hi) * (1 + 2e-5)


@pytest.mark.parametrize("name", ["polar_express", "keller_jordan", "cubic"])
def test_a_long_run_of_one_triple_stops_at_its_cycle_with_the_same_grid(name):
    # _output_max used to apply every step of ns_steps=10000 to its 40,001-point grid (~5 s); a run of one
    # triple now stops once the grid repeats exactly. Against the plain loop, bitwise, on both sides of
    # where that happens (period 1 after ~50-80 steps, Keller Jordan's period 8 after ~160) and at each phase
    from svmuon.orthogonal import coefficients as coef

    t = get_schedule(name)[-1]
    x0 = np.geomspace(1e-12, 1.0, 40001)
    plain = [x0]
    for _ in range(200):
        plain.append(coef._p(plain[-1], t))
    for times in [0, 1, 2, 7, 49, 50, 51, 76, 77, 150, 161, 162, 163, 164, 165, 166, 167, 168, 169, 170, 199, 200]:
        np.testing.assert_array_equal(coef._repeat(x0, t, times), plain[times], err_msg=f"{name}, {times} steps")
    steps = resolve_coefficients(name, 10000)
    assert len(steps) == 10000 and steps[-1] == t  # the schedule itself: its last triple repeated


def test_output_max_of_a_long_schedule_equals_the_plain_loop():
    from svmuon.orthogonal import coefficients as coef

    for name, n in [("polar_express", 300), ("keller_jordan", 300), ("cubic", 300)]:
        schedule = resolve_coefficients(name, n)
        x = np.geomspace(1e-12, 1.0, 40001)
        for t in schedule:
            x = coef._p(x, t)
        assert coef.output_max(schedule) == float(np.max(np.abs(x))) * (1 + 1e-5)
