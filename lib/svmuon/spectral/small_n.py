"""The exact density ρ(h) of the Shannon entropy of a uniform point of the simplex, for n = 2 and n = 3.

Book chapter "The typical entropy", section "Small n: where is the density largest?"
(``thm-small-n-density``). For n = 2 the point is (t, 1 - t) with t uniform on [0, 1], and (book eq.
``eq-density-n2``)::

    ρ_2(h) = 2 / |H'(t)| = 1 / atanh(2ε),   h = H(1/2 - ε),   0 < h < log 2,

which increases to +∞ at h = log 2 (like (log 2 - h)^{-1/2}). For n = 3, condition on c = p_3 ~ Beta(1, 2): the
grouping rule H(p) = h_b(c) + (1 - c) H(p_1/(1-c), p_2/(1-c)) with an independent uniform point of Δ^1 gives
(book eq. ``eq-density-n3``)::

    ρ_3(h) = 2 ∫_0^1 ρ_2((h - h_b(c)) / (1 - c)) dc,

h_b the binary entropy (ρ_2 = 0 outside (0, log 2)). Its value at the top is ρ_3(log 3) = 4π/(3√3)
(the area of the ellipse {log 3 - H <= ε} grows like that multiple of ε).

Numerics: the inverse binary entropy by bisection and Newton on arrays (ρ_2 to ~1e-15); the c-integral by the
tanh-sinh rule on each interval where the integrand is positive (its end points carry (·)^{-1/2}
singularities), which gives ρ_3 to ~1e-8 relative. References: su2025entropy (the question), kotz2000continuous
(Dirichlet aggregation).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["entropy_density"]

_LOG2, _LOG3 = math.log(2.0), math.log(3.0)
_TS_LEVEL = 4.0  # tanh-sinh abscissae k with |k| <= this: the cut tails hold < 1e-18 of a (·)^{-1/2} end point
_TS_STEP = 1.0 / 32  # tanh-sinh step: 257 nodes per interval; ρ_3 to ~1e-8 relative (halving the step changes it
# by 1e-8: the floor is the rounding of log 2 - β near the singular end, not the rule)


def _gap(eps: np.ndarray) -> np.ndarray:
    """log 2 - H(1/2 - ε) for ε in [0, 1/2], without cancellation: (½+ε) log1p(2ε) + (½-ε) log1p(-2ε)."""
    inner = eps < 0.5
    right = np.where(inner, (0.5 - eps) * np.log1p(-2 * np.where(inner, eps, 0.0)), 0.0)  # 0 · log 0 = 0
    return (0.5 + eps) * np.log1p(2 * eps) + right


def _inverse_gap(d: np.ndarray) -> np.ndarray:
    """ε in [0, 1/2] with log 2 - H(1/2 - ε) = d, for d in [0, log 2] (array)."""
    lo, hi = np.zeros_like(d), np.full_like(d, 0.5)
    for _ in range(60):  # bisection: the gap is increasing in ε; 2^-60 of the bracket, then polish by Newton
        mid = 0.5 * (lo + hi)
        below = _gap(mid) < d
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    eps = 0.5 * (lo + hi)
    for _ in range(2):
        slope = 2 * np.arctanh(np.minimum(2 * eps, 1 - 1e-16))  # d gap / dε = log((1+2ε)/(1-2ε))
        step = np.where(slope > 0, (_gap(eps) - d) / np.where(slope > 0, slope, 1.0), 0.0)
        eps = np.clip(eps - step, lo, hi)
    return eps


def _density2_gap(d: np.ndarray) -> np.ndarray:
    """ρ_2 at h = log 2 - d, from the gap d itself (no cancellation near the top): 1/atanh(2ε), ε = gap^{-1}(d)."""
    inside = (d > 0) & (d < _LOG2)
    eps = _inverse_gap(np.where(inside, d, _LOG2))
    with np.errstate(divide="ignore"):
        val = 1.0 / np.arctanh(np.minimum(2 * eps, 1.0))
    return np.where(inside, val, 0.0)


def _density2(h: np.ndarray) -> np.ndarray:
    """ρ_2(h): 1/atanh(2ε) inside (0, log 2), 0 outside (eq-density-n2)."""
    return _density2_gap(_LOG2 - h)


def _binary(c: np.ndarray) -> np.ndarray:
    """Binary entropy h_b(c) = -c log c - (1-c) log(1-c) on an array, 0 at c = 0 and c = 1."""
    inner = (c > 0) & (c < 1)
    cm = np.where(inner, c, 0.5)
    return np.where(inner, -cm * np.log(cm) - (1 - cm) * np.log1p(-cm), 0.0)


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


def _kl(c: np.ndarray) -> np.ndarray:
    """G(c) = log 3 - F(c), F(c) = H(c, (1-c)/2, (1-c)/2): Σ p log(3p) with log1p around c = 1/3 (no cancellation)."""
    x = c - 1.0 / 3.0
    near = c > 1.0 / 6.0  # c log(3c) by log1p near 1/3, directly (0 at c = 0) near 0
    safe = np.where(near | (c <= 0), 1.0 / 3.0, c)
    first = np.where(near, c * np.log1p(3 * np.where(near, x, 0.0)), np.where(c > 0, safe * np.log(3 * safe), 0.0))
    return first + (1 - c) * np.log1p(-1.5 * x)


def _kl_slope(c: np.ndarray) -> np.ndarray:
    return np.log(2 * c / (1 - c))  # G'(c)


def _kl_scalar(c: float) -> float:
    """G(c) for one float (the bisections below): the same formula as :func:`_kl` with math."""
    x = c - 1.0 / 3.0
    first = c * math.log1p(3 * x) if c > 1.0 / 6.0 else (c * math.log(3 * c) if c > 0 else 0.0)
    return first + (1 - c) * math.log1p(-1.5 * x)


def _intervals(e: float) -> list[tuple[float, float, bool, bool]]:
    """For h = log 3 - e: the c-intervals on which 0 < β_c(h) < log 2, i.e. h_b(c) < h and G(c) < e; with flags
    saying whether each end is a root of G(c) = e (where the integrand has its (·)^{-1/2} singularity)."""
    # G is decreasing on [0, 1/3], increasing on [1/3, 1], G(1/3) = 0
    c2 = _solve_increasing(_kl_scalar, e, 1.0 / 3.0, 1.0)
    h = _LOG3 - e
    if h >= _LOG2:  # G(0) = log(3/2) <= e: the left end is a root too
        return [(_solve_increasing(lambda c: -_kl_scalar(c), -e, 0.0, 1.0 / 3.0), c2, True, True)]
    ca = _solve_increasing(_hb, h, 0.0, 0.5)  # h_b(c) < h: c < ca or c > 1 - ca
    pieces = [(0.0, min(ca, c2), False, c2 <= ca)]
    if 1 - ca < c2:
        pieces.append((1 - ca, c2, False, True))
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
    """ρ_3 on a 1-D array of h (eq-density-n3): the nodes of every h are gathered, evaluated at once, summed per h."""
    gaps, weights, owner = [], [], []
    for i, hi in enumerate(h):
        if not 0.0 < hi < _LOG3:
            continue
        e = _LOG3 - float(hi)
        for a, b, root_a, root_b in _intervals(e):
            if b <= a:
                continue
            c, w, dist = _tanh_sinh(a, b)
            # log 2 - β_c = (e - G(c)) / (1 - c). Near a root r of G = e the difference is G(r) - G(c) = G'(mid)(r - c)
            # up to O(|r - c|³): used within 1e-4 (b - a) of the root, where the plain difference would cancel.
            gap = e - _kl(c)
            near_b = root_b & (dist > 0) & (dist < 1e-4 * (b - a))
            near_a = root_a & (dist < 0) & (-dist < 1e-4 * (b - a))
            gap = np.where(near_b, _kl_slope(0.5 * (c + b)) * dist, gap)
            gap = np.where(near_a, _kl_slope(0.5 * (c + a)) * dist, gap)  # G decreasing there, dist < 0
            gaps.append(gap / (1 - c))
            weights.append(w)
            owner.append(np.full(c.size, i))
    out = np.zeros(h.size)
    if gaps:  # ρ_2(β_c) with β_c = log 2 - gap/(1-c), weighted; 2 ∫ ... dc
        values = np.concatenate(weights) * _density2_gap(np.concatenate(gaps))
        np.add.at(out, np.concatenate(owner), 2.0 * values)
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
        At h = log 2 for n = 2 the value is +inf.

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
        out = _density2(arr)
        out = np.where(arr == _LOG2, np.inf, out)
    else:
        out = _density3(arr.reshape(-1)).reshape(arr.shape)
        out = np.where(arr == _LOG3, 4 * math.pi / (3 * math.sqrt(3)), out)
    return float(out) if arr.ndim == 0 else out
