"""The exact density ρ(h) of the Shannon entropy of a uniform point of the simplex, for n = 2 and n = 3.

Book chapter "The typical entropy", section "Small n: where is the density largest?"
(``thm-small-n-density``). For n = 2 the point is (t, 1 - t) with t uniform on [0, 1], and (book eq.
``eq-density-n2``)::

    ρ_2(h) = 2 / |H'(t)| = 1 / atanh(2ε),   h = H(1/2 - ε),   0 < h < log 2,

which increases to +∞ at h = log 2, like (2(log 2 - h))^{-1/2}. For n = 3, condition on c = p_3 ~ Beta(1, 2):
the grouping rule H(p) = h_b(c) + (1 - c) H(p_1/(1-c), p_2/(1-c)) with an independent uniform point of Δ^1 gives
(book eq. ``eq-density-n3``)::

    ρ_3(h) = 2 ∫_0^1 ρ_2((h - h_b(c)) / (1 - c)) dc,

h_b the binary entropy (ρ_2 = 0 outside (0, log 2)). Its value at the top is ρ_3(log 3) = 4π/(3√3)
(the area of the ellipse {log 3 - H <= ε} grows like that multiple of ε).

Numerics. ρ_2: the inverse of the gap log 2 - H(1/2 - ε) by Newton's method (the gap is convex in ε), and for
h <= 1/2 the smaller preimage t by bisection on log t; relative error ~1e-15. ρ_3: the integral is taken in
g = F(c) - h = (1 - c)(log 2 - β_c), F(c) = H(c, (1-c)/2, (1-c)/2), on each branch of c (below and above
1/3) where g is monotone: dc = dg / abs(F'(c)). The g^{-1/2} singularity of ρ_2 then sits at the end g = 0 exactly,
whereas in c it would sit at a root of F(c) = h known only to float64 rounding, which would cost ~1e-8 (the
integral of a (·)^{-1/2} singularity over a misplaced end), more where the root is next to c = 0. The
pieces end at the roots, at c = 1/3, at the cuts h_b(c) = h (h < log 2) and at c = 1/2 (h > log 2, where
ρ_2 dips like 1/log(1/β)); tanh-sinh with 129 nodes per piece; c from g by Newton's method (F is concave);
log 2 - h and log 3 - h formed with the low parts of log 2 and log 3. Relative error below 1e-9 for
10^{-6} <= h < log n, measured against an mpmath quadrature of the c-integral (tests/test_small_n.py). Below
h = 1e-6 the float64 rounding of 1 - c (the mass sits at the vertices) dominates for n = 3: relative error
3e-8 at h = 1e-8, 4e-6 at h = 1e-10, where ρ_3 < 1.2e-10. References: su2025entropy (the question),
kotz2000continuous (Dirichlet aggregation).
"""

from __future__ import annotations

import decimal
import math
from typing import Any

import numpy as np

__all__ = ["entropy_density"]

_LOG2, _LOG3 = math.log(2.0), math.log(3.0)
# log 2 - fl(log 2) and log 3 - fl(log 3) (about 2e-17 and 1e-16): the gaps log 2 - h and log 3 - h of a float h
# are formed as (fl(log n) - h) + this, exact to rounding, so that ρ_2 ~ (2(log 2 - h))^{-1/2} keeps its accuracy
# for h within 1e-15 of log 2
with decimal.localcontext(prec=40):
    _LOG2_LO, _LOG3_LO = (float(decimal.Decimal(k).ln() - decimal.Decimal(math.log(k))) for k in (2, 3))
_TS_LEVEL = 4.0  # tanh-sinh abscissae k with |k| <= this: the cut tails hold < 1e-18 of a (·)^{-1/2} end point
_TS_STEP = 1.0 / 16  # tanh-sinh step: 129 nodes per piece; halving it changes ρ_3 by < 2e-10 for h >= 1e-6


def _gap(eps: np.ndarray) -> np.ndarray:
    """log 2 - H(1/2 - ε) for ε in [0, 1/2], without cancellation: Σ_k (2ε)^{2k} / (2k(2k-1)) for 2ε < 0.1 (eight
    terms: the ninth is below 1e-16 of the first), else (½+ε) log1p(2ε) + (½-ε) log1p(-2ε)."""
    u = 4 * eps * eps
    series = sum(u**k / (2 * k * (2 * k - 1)) for k in range(8, 0, -1))
    inner = eps < 0.5
    right = np.where(inner, (0.5 - eps) * np.log1p(-2 * np.where(inner, eps, 0.0)), 0.0)  # 0 · log 0 = 0
    return np.where(u < 0.01, series, (0.5 + eps) * np.log1p(2 * eps) + right)


def _newton_from_above(f, slope, y: np.ndarray, lo: float) -> np.ndarray:
    """Root of an increasing convex function by Newton's method from a start y at or above the root (arrays).

    Convexity keeps every iterate at or above the root, so the iterates decrease monotonically, quadratically
    near it; an entry stops when a step no longer decreases it (the rounding floor). ``f(y, i)`` and
    ``slope(y, i)`` take the entries ``i`` being solved.
    """
    shape = np.shape(y)
    y = np.array(y, dtype=np.float64).reshape(-1)
    todo = np.arange(y.size)
    for _ in range(100):  # a few dozen at most from the starts used here; the cap only guards the loop
        if todo.size == 0:
            break
        yt = y[todo]
        s = slope(yt, todo)
        new = np.maximum(yt - f(yt, todo) / np.where(s > 0, s, np.inf), lo)
        moving = new < yt
        y[todo] = np.where(moving, new, yt)
        todo = todo[moving]
    return y.reshape(shape)


def _inverse_gap(d: np.ndarray) -> np.ndarray:
    """ε in [0, 1/2] with log 2 - H(1/2 - ε) = d, for d in (0, log 2) (array). The gap is increasing and convex
    in ε and at least 2ε², so Newton starts at min(sqrt(d/2), 1/2 - ulp)."""
    start, flat = np.minimum(np.sqrt(d / 2), 0.5 - 2.0**-54), np.reshape(d, -1)
    return _newton_from_above(lambda e, i: _gap(e) - flat[i], lambda e, i: 2 * np.arctanh(2 * e), start, 0.0)


def _density2_gap(d: np.ndarray) -> np.ndarray:
    """ρ_2 at h = log 2 - d, from the gap d itself (no cancellation near the top): 1/atanh(2ε), ε = gap^{-1}(d)."""
    inside = (d > 0) & (d < _LOG2)
    eps = _inverse_gap(np.where(inside, d, _LOG2))
    with np.errstate(divide="ignore"):
        val = 1.0 / np.arctanh(np.minimum(2 * eps, 1.0))
    return np.where(inside, val, 0.0)


def _density2(h: np.ndarray) -> np.ndarray:
    """ρ_2(h): 1/atanh(2ε) inside (0, log 2), 0 outside (eq-density-n2). For h <= 1/2 from the smaller preimage
    t = 1/2 - ε itself, as 2/log((1-t)/t): t is found by bisection on log t (60 halvings of [log 1e-300, log 1/2]:
    t to 1e-15 relative), so that t stays accurate when it is tiny (h near 0), where 1/2 - ε would not."""
    out = _density2_gap((_LOG2 - h) + _LOG2_LO)
    low = (h > 0) & (h <= 0.5)
    if np.any(low):
        target = h[low]
        lo, hi = np.full_like(target, math.log(1e-300)), np.full_like(target, -_LOG2)
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            t = np.exp(mid)
            below = -t * mid - (1 - t) * np.log1p(-t) < target  # h_b(t), increasing in t on (0, 1/2]
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        t = np.exp(0.5 * (lo + hi))
        out[low] = 2.0 / (np.log1p(-t) - np.log(t))
    return out


def _hb(c: float) -> float:
    return 0.0 if c <= 0.0 or c >= 1.0 else -c * math.log(c) - (1 - c) * math.log1p(-c)


def _solve_increasing(f, target: float, lo: float, hi: float) -> float:
    """x in [lo, hi] with f(x) = target for an increasing f (bisection to float64 resolution)."""
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if f(mid) < target else (lo, mid)
    return 0.5 * (lo + hi)


def _kl(x: np.ndarray) -> np.ndarray:
    """G = log 3 - F(c) at c = 1/3 + x, F(c) = H(c, (1-c)/2, (1-c)/2): Σ p log(3p). Near c = 1/3 (|x| < 0.01) by
    its series Σ_{k>=2} ((-1)^k 3^{k-1} + (3/2)^{k-1}) x^k / (k(k-1)), ten terms
    (the next is below 1e-16 of the first); else by log1p around 1/3 and directly near c = 0."""
    c = 1.0 / 3.0 + x
    near = c > 1.0 / 6.0  # c log(3c) by log1p near 1/3, directly (0 at c = 0) near 0
    safe = np.where(near | (c <= 0), 1.0 / 3.0, c)
    first = np.where(near, c * np.log1p(3 * np.where(near, x, 0.0)), np.where(c > 0, safe * np.log(3 * safe), 0.0))
    small = np.abs(x) < 0.01
    xs = np.where(small, x, 0.0)
    series = sum(((-1) ** k * 3.0 ** (k - 1) + 1.5 ** (k - 1)) / (k * (k - 1)) * xs**k for k in range(11, 1, -1))
    return np.where(small, series, first + (1 - c) * np.log1p(-1.5 * x))


def _kl_slope(x: np.ndarray) -> np.ndarray:
    """|G'(c)| = |log(2c/(1-c))| at c = 1/3 + x, as log1p(3x/(2/3 - x)) (no cancellation near c = 1/3)."""
    with np.errstate(divide="ignore"):
        return np.abs(np.log1p(3 * x / (2.0 / 3.0 - x)))


def _branch(q: np.ndarray, right: bool) -> np.ndarray:
    """x = c - 1/3 with G(1/3 + x) = q >= 0 on one branch: right (c in [1/3, 1]) or left (c in [0, 1/3]).

    On both branches G is increasing and convex in y = |x| (G is a KL divergence, convex along the line) and
    G >= 2y² (G'' = 1/c + 1/(1-c) >= 4): Newton from y = sqrt(q/2), which gives x to relative rounding even
    when it is tiny (q near 0, the top of H).
    """
    sign, top = (1.0, 2.0 / 3.0) if right else (-1.0, 1.0 / 3.0)
    start = np.minimum(np.sqrt(q / 2), top * (1 - 2.0**-52))
    y = _newton_from_above(lambda y, i: _kl(sign * y) - q[i], lambda y, i: _kl_slope(sign * y), start, 0.0)
    return sign * y


def _pieces(h: float) -> list[tuple[float, float, bool]]:
    """The integration pieces of eq-density-n3 for 0 < h < log 3, in the variable g = e - G(c) = F(c) - h.

    On each branch of G (left: c < 1/3, right: c > 1/3) g is monotone in c; g = 0 where β_c = log 2 (a root of
    G = e, where ρ_2 has its g^{-1/2} singularity), g = e at c = 1/3, g = (1-c) log 2 where β_c = 0 (h_b(c) = h,
    the cut for h < log 2), and g = log 2 - h at c = 0. Returns (g_a, g_b, right) triples.
    """
    e = (_LOG3 - h) + _LOG3_LO
    if h > _LOG2:  # both ends of {G < e} are roots: the level set is a closed curve inside the triangle
        # β_c is smallest near c = 1/2 (β = 2(h - log 2) there; g = (3/2) log 2 - h): ρ_2 dips like 1/log(1/β)
        half = (1.5 * _LOG2 - h) + 1.5 * _LOG2_LO
        right = [(0.0, half, True), (half, e, True)] if half > 0 else [(0.0, e, True)]
        return [(0.0, e, False)] + right
    ca = _solve_increasing(_hb, h, 0.0, 0.5)  # β_c > 0 iff h_b(c) < h iff c < ca or c > 1 - ca
    cut = (1 - ca) * _LOG2  # g at c = ca
    pieces = [((_LOG2 - h) + _LOG2_LO, e if ca >= 1.0 / 3.0 else cut, False)]  # c from 0 to min(ca, 1/3)
    if ca > 1.0 / 3.0:
        pieces.append((cut, e, True))  # c from 1/3 to ca
    pieces.append((0.0, ca * _LOG2, True))  # c from 1 - ca to the root
    return pieces


def _tanh_sinh(a: float, b: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nodes, weights and signed distances to the nearer end (negative: nearer a) of the tanh-sinh rule on [a, b]."""
    k = np.arange(-_TS_LEVEL, _TS_LEVEL + _TS_STEP / 2, _TS_STEP)
    s = 0.5 * math.pi * np.sinh(k)
    e = np.exp(-2 * np.abs(s))
    dist = (b - a) * e / (1 + e)  # (b - a)(1 - tanh|s|)/2, computed without cancellation
    x = np.where(s < 0, a + dist, b - dist)
    w = (b - a) * 0.5 * math.pi * np.cosh(k) * 2 * e / (1 + e) ** 2 * _TS_STEP  # (b-a)/2 · (π/2) cosh k / cosh² s
    keep = dist > 0  # nodes closer to an end than its ulp sit on the end in float; their distance is kept exactly
    return x[keep], w[keep], np.where(s < 0, -dist, dist)[keep]


def _density3(h: np.ndarray) -> np.ndarray:
    """ρ_3 on a 1-D array of h (eq-density-n3) as 2 ∫ ρ_2(log 2 - g/(1-c)) / |G'(c)| dg over the pieces of
    :func:`_pieces`: in g the singular end (g = 0) is exact, so no root of G = e needs to be located; the nodes of
    every h are gathered, solved for c at once, and summed per h."""
    gs, qs, weights, right, owner = [], [], [], [], []
    for i, hi in enumerate(h):
        if not 0.0 < hi < _LOG3:
            continue
        e = (_LOG3 - float(hi)) + _LOG3_LO
        for ga, gb, is_right in _pieces(float(hi)):
            if gb <= ga:
                continue
            g, w, dist = _tanh_sinh(ga, gb)
            # q = e - g = G(c), from the nearer end's exact distance (q = dist itself next to c = 1/3)
            qs.append(np.where(dist < 0, (e - ga) + dist, (e - gb) + dist))
            gs.append(g)
            weights.append(w)
            right.append(np.full(g.size, is_right))
            owner.append(np.full(g.size, i))
    out = np.zeros(h.size)
    if gs:
        g, q, w, r = (np.concatenate(v) for v in (gs, qs, weights, right))
        x = np.empty_like(q)
        x[r], x[~r] = _branch(q[r], True), _branch(q[~r], False)
        slope = _kl_slope(x)
        dens = _density2_gap(g / (2.0 / 3.0 - x))  # ρ_2(β_c) with log 2 - β_c = g/(1-c)
        vals = np.where(np.isfinite(slope) & (slope > 0), dens / np.where(slope > 0, slope, 1.0), 0.0)
        np.add.at(out, np.concatenate(owner), 2.0 * w * vals)
    return out


def entropy_density(h: Any, n: int) -> float | np.ndarray:
    """The exact density ρ(h) of the Shannon entropy H(p), p uniform on Δ^{n-1}, for n = 2 or 3.

    n = 2: ρ_2(h) = 1/atanh(2ε) with h = H(1/2 - ε) (eq. ``eq-density-n2``), increasing on (0, log 2) and
    infinite at h = log 2. n = 3: ρ_3(h) = 2 ∫_0^1 ρ_2((h - h_b(c))/(1 - c)) dc (eq. ``eq-density-n3``), with
    ρ_3(log 3) = 4π/(3√3) ≈ 2.418 (returned at h = log 3). Both are largest at h = log n (book
    ``thm-small-n-density``); for n >= 4 the density vanishes at log n and its mode lies inside (use
    :func:`svmuon.spectral.monte_carlo.entropy_statistics` there).

    Args:
        h: Entropy value(s) in nats, a float or an array of any shape.
        n: 2 or 3.

    Returns:
        ρ(h) (per nat): ``float`` for a scalar h, else a float64 array of h's shape; 0 outside (0, log n).
        At h = ``math.log(2)`` for n = 2 the value is +inf, at ``math.log(3)`` for n = 3 it is 4π/(3√3) (the
        floats are taken as log n itself). Relative error below 1e-9 for 1e-6 <= h < log n (module docstring:
        how, and what happens below 1e-6).

    Raises:
        TypeError: ``n`` not an integer or ``h`` not numeric. ValueError: ``n`` not 2 or 3, or ``h`` NaN.

    References:
        su2025entropy, kotz2000continuous.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"n must be the integer 2 or 3, got {type(n).__name__}")
    if n not in (2, 3):
        raise ValueError(f"n must be 2 or 3 (exact densities); for n >= 4 use entropy_statistics, got n={n}")
    arr = np.asarray(h)
    if arr.dtype == bool or arr.dtype.kind not in "iuf":
        raise TypeError(f"h must be a real number or an array of them, got {type(h).__name__}")
    arr = arr.astype(np.float64)
    if np.any(np.isnan(arr)):
        raise ValueError("h must not be NaN")
    if n == 2:
        out = _density2(arr.reshape(-1)).reshape(arr.shape)
        out = np.where(arr == _LOG2, np.inf, out)
    else:
        out = _density3(arr.reshape(-1)).reshape(arr.shape)
        out = np.where(arr == _LOG3, 4 * math.pi / (3 * math.sqrt(3)), out)
    return float(out) if arr.ndim == 0 else out
