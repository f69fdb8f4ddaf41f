"""Closed forms for the entropy of a uniformly random distribution p ~ Unif(Δ^{n-1}).

Everything here is numeric (NumPy + ``scipy.special``), vectorised over ``n`` and ``q`` by NumPy
broadcasting, and derived in the book's chapters "The typical entropy" and "Rényi entropies and the
spread" (the SymPy derivations live in :mod:`svmuon.spectral.symbolic`). Which results are exact and which
are asymptotic:

* exact for every n >= 1: :func:`expected_entropy` (``eq-exact-mean``), :func:`entropy_variance`,
  :func:`expected_power_sum`;
* approximations that become exact only as n -> ∞: :func:`mean_field_entropy` (``eq-mean-field``,
  ``eq-renyi-mean-field``; error O(1/n)) and :func:`delta_method_variance` (``eq-delta-variance``; the
  leading O(1/n) term of the variance).

Entropies are in nats. Scalar inputs give a Python ``float``; array inputs give a ``numpy.ndarray`` of
the broadcast shape. References: su2025entropy (the mean-field and delta-method formulas),
kotz2000continuous (Dirichlet and Beta moments), renyi1961measures.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
from scipy import special

from svmuon._validation import check_int, check_order

__all__ = [
    "mean_field_entropy",
    "expected_entropy",
    "entropy_variance",
    "delta_method_variance",
    "expected_power_sum",
]

_SERIES_RADIUS = 0.05  # |q - 1| below which the removable singularity at q = 1 is evaluated by series
_Q_OVERFLOW = 600.0  # delta-method factor ~ 4^q / (q² sqrt(π q)) > 1.8e308 for every q above this
_SERIES_TERMS = 12  # the series in δ = q - 1 converges for |δ| < 3/2 (pole of Γ(2q+1) at q = -1/2): 12
# terms at |δ| <= 0.05 leave a truncation error ~ (0.05 / 1.5)^12 ≈ 1e-18, below float64 rounding.


def _check_n(n: Any) -> tuple[np.ndarray, bool]:
    """``n`` as a float64 array of integers >= 1 (and whether it was a scalar)."""
    if isinstance(n, numbers.Integral) or isinstance(n, bool):
        n_int = check_int(n, "n")
        try:
            return np.float64(float(n_int)), True
        except OverflowError:
            raise ValueError(f"n must be at most the float64 range (~1.8e308), got an integer with "
                             f"{len(str(n_int))} digits") from None
    arr = np.asarray(n)
    if arr.dtype == bool or arr.dtype.kind not in "iuf":
        raise TypeError(f"n must be an integer or an array of integers >= 1, got {type(n).__name__} of dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
        raise ValueError("n must hold whole numbers (the dimension of the simplex), got non-integer or non-finite values")
    if np.any(arr < 1):
        raise ValueError(f"n must be >= 1, got min(n) = {arr.min():g}")
    return arr, arr.ndim == 0


def _check_q(q: Any) -> tuple[np.ndarray, bool]:
    """``q`` as a float64 array in [0, inf] (and whether it was a scalar)."""
    if isinstance(q, numbers.Real) or isinstance(q, bool):
        return np.float64(check_order(q)), True
    arr = np.asarray(q)
    if arr.dtype == bool or arr.dtype.kind not in "iuf":
        raise TypeError(f"q must be a real number or array in [0, inf], got {type(q).__name__} of dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    if np.any(np.isnan(arr)) or np.any(arr < 0):
        raise ValueError("q must lie in [0, inf]; got NaN or a negative order")
    return arr, arr.ndim == 0


def _out(x: np.ndarray, scalar: bool) -> float | np.ndarray:
    return float(x) if scalar else np.asarray(x, dtype=np.float64)


def _log_gamma_ratio(q: np.ndarray) -> np.ndarray:
    """log Γ(q+1) / (q - 1), continuous at q = 1 (value ψ(2) = 1 - γ) and -> +inf as q -> inf."""
    d = q - 1.0
    near = np.abs(d) < 1e-4  # 3-term Taylor series there: truncation error ~ |d|^3 < 1e-12
    big = q > 1e15  # gammaln(q+1) ~ q log q overflows float64 near q ~ 1e306: Stirling, divided through by q-1
    safe = np.where(near | np.isinf(q) | big, 2.0, q)
    direct = special.gammaln(safe + 1.0) / (safe - 1.0)
    qb = np.where(big & ~np.isinf(q), q, 2e15)
    stirling = (qb / (qb - 1.0)) * (np.log(qb) - 1.0) + 0.5 * (np.log(2 * np.pi) + np.log(qb)) / (qb - 1.0)
    dn = np.where(near, d, 0.0)
    series = special.digamma(2.0) + special.polygamma(1, 2.0) * dn / 2 + special.polygamma(2, 2.0) * dn**2 / 6
    return np.where(np.isinf(q), np.inf, np.where(near, series, np.where(big, stirling, direct)))


def mean_field_entropy(n: Any, q: Any = 1.0) -> float | np.ndarray:
    """Mean-field estimate of E[H_q(p)] for p uniform on Δ^{n-1}: log n - log Γ(q+1) / (q - 1).

    Replaces each sum over Exp(1) draws by its expectation (book equations ``eq-mean-field`` for q = 1,
    where the value is log n - (1 - γ), and ``eq-renyi-mean-field``). Asymptotic: the error is O(1/n)
    (for q = 1 it is 1/(2n) + O(1/n²)). At q = 0 it is exact (log n); as q -> inf it tends to -inf,
    which is where the approximation fails (H_∞ stays near log n - log log n).

    Args:
        n: Dimension(s) n >= 1, an int or an integer array.
        q: Rényi order(s) in [0, inf], a float or an array; broadcast against ``n``. Default 1 (Shannon).

    Returns:
        The estimate in nats: ``float`` for scalar inputs, else a float64 array of the broadcast shape.

    Raises:
        TypeError: If ``n`` or ``q`` is not numeric.
        ValueError: If ``n`` < 1 or is not whole, or ``q`` is NaN or negative.

    References:
        su2025entropy.
    """
    n_arr, sn = _check_n(n)
    q_arr, sq = _check_q(q)
    return _out(np.log(n_arr) - _log_gamma_ratio(q_arr), sn and sq)  # eq-renyi-mean-field


def expected_entropy(n: Any) -> float | np.ndarray:
    """Exact mean Shannon entropy of p uniform on Δ^{n-1}: E[H] = ψ(n+1) - ψ(2) = H_n - 1.

    Each coordinate p_i ~ Beta(1, n-1), and E[p log p] = (ψ(2) - ψ(n+1)) / n for that Beta law, so
    summing n equal terms gives the book's theorem ``thm-exact-mean`` (equation ``eq-exact-mean``). H_n is
    the n-th harmonic number; E[H] = log n - (1 - γ) + 1/(2n) - 1/(12 n²) + O(n^-4).

    Args:
        n: Dimension(s) n >= 1, an int or an integer array.

    Returns:
        E[H] in nats (0 at n = 1): ``float`` for a scalar, else a float64 array.

    Raises:
        TypeError: If ``n`` is not numeric.
        ValueError: If ``n`` < 1 or not whole.

    References:
        kotz2000continuous (Dirichlet marginals), su2025entropy (the question).
    """
    n_arr, sn = _check_n(n)
    return _out(special.digamma(n_arr + 1.0) - special.digamma(2.0), sn)  # eq-exact-mean


def entropy_variance(n: Any) -> float | np.ndarray:
    """Exact variance of the Shannon entropy of p uniform on Δ^{n-1}.

    Var[H] = (π²/3 - 2)/(n+1) - 1/(n+1)² - ψ'(n+2), from E[p_1² log² p_1] (Beta(1, n-1) marginal) and
    E[p_1 log p_1 · p_2 log p_2] (Dirichlet(1, 1, n-2) pair marginal); see the chapter "The typical
    entropy" and :func:`svmuon.spectral.symbolic.exact_entropy_variance`. It is 0 at n = 1 and
    (π²/3 - 3)/n + O(1/n²) for large n, the q -> 1 value of :func:`delta_method_variance`.

    Args:
        n: Dimension(s) n >= 1, an int or an integer array.

    Returns:
        Var[H] in nats²: ``float`` for a scalar, else a float64 array.

    Raises:
        TypeError: If ``n`` is not numeric.
        ValueError: If ``n`` < 1 or not whole.

    References:
        kotz2000continuous.
    """
    n_arr, sn = _check_n(n)
    r = 1.0 / (n_arr + 1.0)
    var = (math.pi**2 / 3 - 2) * r - r**2 - special.polygamma(1, n_arr + 2.0)
    return _out(np.maximum(var, 0.0), sn)  # max: only rounding (~1e-17 at n = 1) can make it negative


def _delta_factor_series(d: np.ndarray) -> np.ndarray:
    """[Γ(2q+1)/Γ(q+1)² - q² - 1] / (q-1)² as a power series in d = q - 1 (removable singularity at 0).

    log[Γ(2q+1)/Γ(q+1)²] = log 2 + Σ_k c_k d^k with c_k = (2^k ψ^{(k-1)}(3) - 2 ψ^{(k-1)}(2)) / k!;
    the exponential of the series is built by the usual recurrence e_k = (1/k) Σ_j j c_j e_{k-j}.
    """
    K = _SERIES_TERMS + 2
    c = [0.0] + [(2.0**k * special.polygamma(k - 1, 3.0) - 2 * special.polygamma(k - 1, 2.0)) / math.factorial(k) for k in range(1, K + 1)]
    e = [1.0]
    for k in range(1, K + 1):
        e.append(sum(j * c[j] * e[k - j] for j in range(1, k + 1)) / k)
    numer = [2 * ek for ek in e]  # 2·exp(series) = Γ(2q+1)/Γ(q+1)²
    numer[0] -= 2.0  # minus (q² + 1) = 2 + 2d + d²
    numer[1] -= 2.0
    numer[2] -= 1.0
    coeffs = numer[2:]  # numer[0] = numer[1] = 0 up to rounding: the double zero at q = 1
    out = np.zeros_like(d)
    for a in reversed(coeffs):
        out = out * d + a
    return out


def delta_method_variance(n: Any, q: Any = 1.0) -> float | np.ndarray:
    """Delta-method (first-order) variance of H_q(p) for p uniform on Δ^{n-1}.

    Var[H_q] ≈ [Γ(2q+1) / ((q-1)² Γ(q+1)²) - (q²+1)/(q-1)²] / n (book equation ``eq-delta-variance``),
    from linearising H_q in u = mean(x), v = mean(x^q) with x_i ~ Exp(1). The removable singularity at
    q = 1 is evaluated by a power series for ``|q - 1| < 0.05``, so the function is smooth through the
    Shannon value (π²/3 - 3)/n; at q = 2 it is 1/n; at q = 0 it is 0 (H_0 = log n is constant). It is the
    leading term only: asymptotic in n, and poor for large q (the factor grows like 4^q / sqrt(π q)); it is
    +inf at q = inf and where the factor overflows float64 (q ≳ 520; computed in log space, so any finite q
    gives either the finite value or +inf, never NaN).

    Args:
        n: Dimension(s) n >= 1, an int or an integer array.
        q: Rényi order(s) in [0, inf], broadcast against ``n``. Default 1 (Shannon).

    Returns:
        The variance in nats²: ``float`` for scalar inputs, else a float64 array.

    Raises:
        TypeError: If ``n`` or ``q`` is not numeric.
        ValueError: If ``n`` < 1 or not whole, or ``q`` is NaN or negative.

    References:
        su2025entropy, vandervaart1998asymptotic (the delta method).
    """
    n_arr, sn = _check_n(n)
    q_arr, sq = _check_q(q)
    d = q_arr - 1.0
    near = np.abs(d) < _SERIES_RADIUS
    # beyond _Q_OVERFLOW the factor (> 4^q / (q² sqrt(π q))) exceeds float64: its limit +inf, exactly as q = inf
    huge = q_arr > _Q_OVERFLOW
    finite_q = np.where(near | huge, 3.0, q_arr)
    with np.errstate(over="ignore"):
        ratio = np.exp(special.gammaln(2 * finite_q + 1) - 2 * special.gammaln(finite_q + 1))
        direct = (ratio - finite_q**2 - 1) / (finite_q - 1) ** 2
    factor = np.where(near, _delta_factor_series(np.where(near, d, 0.0)), direct)
    factor = np.where(huge, np.inf, factor)
    return _out(factor / n_arr, sn and sq)  # eq-delta-variance


def expected_power_sum(n: Any, q: Any) -> float | np.ndarray:
    """Exact E[Σ_i p_i^q] for p uniform on Δ^{n-1}: n Γ(q+1) Γ(n) / Γ(n+q).

    From the Beta(1, n-1) marginal: E[p^q] = Γ(q+1) Γ(n) / Γ(n+q). At q = 2 this is 2/(n+1), so by
    Jensen's inequality (−log is convex) E[H_2] >= log((n+1)/2). At q = inf the limit is 1 for n = 1 and
    0 otherwise. Computed in log space as ``n (n-1) B(q+1, n-1)`` (``scipy.special.betaln``, with Stirling's
    formula where betaln fails for two huge arguments), so very large q gives the correct small value (or
    0.0 once it underflows) rather than NaN.

    Args:
        n: Dimension(s) n >= 1, an int or an integer array.
        q: Order(s) in [0, inf], broadcast against ``n``.

    Returns:
        The expectation (dimensionless): ``float`` for scalar inputs, else a float64 array.

    Raises:
        TypeError: If ``n`` or ``q`` is not numeric.
        ValueError: If ``n`` < 1 or not whole, or ``q`` is NaN or negative.

    References:
        kotz2000continuous.
    """
    n_arr, sn = _check_n(n)
    q_arr, sq = _check_q(q)
    n_arr, q_arr = np.broadcast_arrays(n_arr, q_arr)
    one = n_arr == 1
    qf = np.where(np.isinf(q_arr), 1.0, q_arr)
    a, b = qf + 1.0, np.where(one, 1.0, n_arr - 1.0)
    with np.errstate(all="ignore"):
        log_b = special.betaln(a, b)  # log B(q+1, n-1) = log[Γ(q+1)Γ(n-1)/Γ(n+q)], no cancellation at large q
        bad = ~np.isfinite(log_b)
        if np.any(bad):  # Stirling for two huge arguments, log(a+b) without overflow
            ab = np.logaddexp(np.log(a), np.log(b))
            stirling = (0.5 * math.log(2 * math.pi) - (a - 0.5) * np.log1p(b / a) - (b - 0.5) * np.log1p(a / b)
                        - 0.5 * ab)
            log_b = np.where(bad, stirling, log_b)
        val = np.exp(np.log(n_arr) + np.log(b) + log_b)
    val = np.where(q_arr == 0, n_arr, val)  # Σ p_i^0 = n exactly
    val = np.where(one, 1.0, np.where(np.isinf(q_arr), 0.0, val))
    return _out(val, sn and sq)
