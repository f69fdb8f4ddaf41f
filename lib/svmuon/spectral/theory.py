"""Closed forms for the entropy of a uniformly random distribution p ~ Unif(Δ^{n-1}).

Everything here is numeric (NumPy + ``scipy.special``), vectorised over ``n`` and ``q`` by NumPy
broadcasting, and derived in the book's chapters "The typical entropy" and "Rényi entropies and the
spread" (the SymPy derivations live in :mod:`svmuon.spectral.symbolic`). Which results are exact and which
are asymptotic:

* exact for every n >= 1: :func:`expected_entropy` (every order q; ``eq-exact-mean`` for Shannon,
  ``thm-renyi-mean`` for the others), :func:`entropy_variance` (Shannon), :func:`expected_power_sum`;
* approximations that become exact only as n -> ∞: :func:`mean_field_entropy` (``eq-mean-field``,
  ``eq-renyi-mean-field``; error O(1/n)) and :func:`delta_method_variance` (``eq-delta-variance``; the
  leading O(1/n) term of the variance);
* the large-n constants of the next order, exact as n -> ∞: :func:`entropy_asymptotics` (the 1/n error of
  the mean field, the variance, the skewness ~ 1/sqrt(n) and the mode offset ~ 1/n).

Entropies are in nats. Scalar inputs give a Python ``float``; array inputs give a ``numpy.ndarray`` of
the broadcast shape. References: su2025entropy (the mean-field and delta-method formulas),
kotz2000continuous (Dirichlet and Beta moments), renyi1961measures.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, NamedTuple

import numpy as np
from scipy import special

from svmuon._validation import check_int, check_order
from svmuon.spectral.renyi_mean import mean_renyi_entropy

__all__ = [
    "mean_field_entropy",
    "expected_entropy",
    "entropy_variance",
    "delta_method_variance",
    "expected_power_sum",
    "entropy_asymptotics",
    "EntropyAsymptotics",
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


def expected_entropy(n: Any, q: Any = 1.0) -> float | np.ndarray:
    """Exact mean Rényi entropy E[H_q(p)] of p uniform on Δ^{n-1}, for every order q in [0, ∞].

    * q = 1 (Shannon): E[H] = ψ(n+1) - ψ(2) = H_n - 1 (H_n the n-th harmonic number), book
      ``thm-exact-mean`` (equation ``eq-exact-mean``): each p_i ~ Beta(1, n-1) and E[p log p] = (ψ(2) -
      ψ(n+1)) / n. E[H] = log n - (1 - γ) + 1/(2n) - 1/(12 n²) + O(n^-4).
    * q = 0: log n (every p_i > 0 almost surely).
    * every other q, q = ∞ included: book ``thm-renyi-mean``, E[H_q] = (q ψ(n) - E[log Σ x_i^q]) /
      (q - 1) with x_i ~ Exp(1), and E[log Σ x_i^q] as one integral over t of the n-th power of
      φ_q(t) = E[exp(-t x^q)] (Frullani's integral, eq. ``eq-frullani-mean``); at q = ∞ this is
      ψ(n) - E[log max_i x_i]. Evaluated by ``svmuon.spectral.renyi_mean`` to about 1e-14 relative
      (tested against mpmath to 1e-10 for n up to 10¹², and against the 1/n expansion up to n = 10³⁰⁰);
      about 50 ms per order q, any number of n, for n up to ~10⁷; for q > 3/2 the grids grow with log n
      (1-4 s at n = 10³⁰⁰, measured on a loaded 2-core CPU).

    The result is continuous in q (also through q = 1) and non-increasing in q, from log n at q = 0 to the
    mean min-entropy at q = ∞.

    Args:
        n: Dimension(s) n >= 1, an int or an integer array.
        q: Rényi order(s) in [0, inf] (``math.inf`` allowed), a float or an array broadcast against ``n``.
            Default 1 (Shannon).

    Returns:
        E[H_q] in nats (0 at n = 1): ``float`` for scalar inputs, else a float64 array of the broadcast shape.

    Raises:
        TypeError: If ``n`` or ``q`` is not numeric.
        ValueError: If ``n`` < 1 or not whole, or ``q`` is NaN or negative.

    References:
        kotz2000continuous (Dirichlet marginals), ostrowski1949frullani, devroye1986nonuniform,
        su2025entropy (the question).
    """
    n_arr, sn = _check_n(n)
    q_arr, sq = _check_q(q)
    n_b, q_b = np.broadcast_arrays(np.asarray(n_arr, dtype=np.float64), np.asarray(q_arr, dtype=np.float64))
    out = np.empty(n_b.shape)
    flat_n, flat_q, flat_out = n_b.reshape(-1), q_b.reshape(-1), out.reshape(-1)
    for order in np.unique(flat_q):  # one quadrature per order; every n of that order at once
        where = flat_q == order
        flat_out[where] = mean_renyi_entropy(flat_n[where], float(order))  # eq-exact-mean, thm-renyi-mean
    return _out(out, sn and sq)


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


class EntropyAsymptotics(NamedTuple):
    """Large-n constants of H_q(p), p uniform on Δ^{n-1} (float or float64 arrays, one entry per order q).

    The five fields, in order:

    - ``mean_correction``: c(q), E[H_q] = mean field + c(q)/n + O(n^-2) (eq. ``eq-mean-correction``);
    - ``variance``: V(q), Var[H_q] = V(q)/n + O(n^-2) (the delta-method factor, eq. ``eq-delta-variance``);
    - ``third_cumulant``: K(q), κ_3[H_q] = K(q)/n² + O(n^-3);
    - ``skewness``: K / V^{3/2} = lim sqrt(n) · skewness of H_q (eq. ``eq-skewness-limit``);
    - ``mode_offset``: -K / (2V) = lim n · (mode - mean) of the density of H_q (eq. ``eq-mode-offset``).
    """

    mean_correction: float | np.ndarray
    variance: float | np.ndarray
    third_cumulant: float | np.ndarray
    skewness: float | np.ndarray
    mode_offset: float | np.ndarray


def _asymptotics_at(q: float) -> tuple[float, float, float, float, float]:
    """The five constants at one finite q > 0, q != 1 handled by continuity (see entropy_asymptotics)."""
    import mpmath

    scale = mpmath.mpf(1)
    if 0 < q < 1e-30:  # c, V, K are (q, q², q³) times constants up to a relative O(q): evaluate at 1e-30, rescale
        scale, q = mpmath.mpf(q) / mpmath.mpf(1e-30), 1e-30
    delta = q - 1.0
    if q == 1.0 or abs(delta) < 1e-30:  # the Shannon values; |δ| < 1e-30 changes them by O(δ), far below rounding
        c = mpmath.mpf(1) / 2
        V, K = mpmath.pi**2 / 3 - 3, 12 * mpmath.zeta(3) - 10 - mpmath.pi**2 / 2
    else:
        # the terms below are O(δ^-3) each and cancel to O(1): 40 + 3·digits(1/δ) digits keep 15 of them; as q -> 0
        # they are O(1) and cancel to V = O(q²), K = O(q³): 3·digits(1/q) more (at most 90, see above)
        digits = 3 * max(0, int(-math.log10(abs(delta)))) + (3 * max(0, int(-math.log10(q))) if q > 0 else 0)
        with mpmath.workdps(40 + digits):
            qm = mpmath.mpf(q)
            G, G2, G3 = mpmath.gamma(qm + 1), mpmath.gamma(2 * qm + 1), mpmath.gamma(3 * qm + 1)
            d = qm - 1
            gu, gv, guu, gvv = qm / d, -1 / (d * G), -qm / d, 1 / (d * G**2)  # H_q - log n = (q log u - log v)/(q-1)
            kuu, kuv, kvv = 1, qm * G, G2 - G**2  # covariances of (x, x^q), x ~ Exp(1)
            kuuu, kuuv, kuvv, kvvv = 2, qm * (qm + 1) * G, 2 * qm * (G2 - G**2), G3 - 3 * G * G2 + 2 * G**3
            c = (guu * kuu + gvv * kvv) / 2
            V = gu**2 * kuu + 2 * gu * gv * kuv + gv**2 * kvv
            Au, Av = gu * kuu + gv * kuv, gu * kuv + gv * kvv
            K = (gu**3 * kuuu + 3 * gu**2 * gv * kuuv + 3 * gu * gv**2 * kuvv + gv**3 * kvvv
                 + 3 * (guu * Au**2 + gvv * Av**2))
            c, V, K = +(c * scale), +(V * scale**2), +(K * scale**3)  # round to the working precision of the caller
    if V == 0:  # q = 0: H_0 = log n is constant; a point mass is symmetric (the convention of EntropyStatistics)
        return 0.0, 0.0, 0.0, 0.0, 0.0
    return float(c), float(V), float(K), float(K / V**1.5), float(-K / (2 * V))


def entropy_asymptotics(q: Any = 1.0) -> EntropyAsymptotics:
    """The 1/n constants of the mean, variance, skewness and mode of H_q(p), p uniform on Δ^{n-1}.

    H_q - log n = g(u, v) = (q log u - log v)/(q - 1) is a smooth function of the two means u = mean(x_i),
    v = mean(x_i^q) of n i.i.d. Exp(1) draws (eq. ``eq-hq-uv``). Expanding g to second order around
    (1, Γ(q+1)) gives, with ∇g, ∇²g there and the cumulants κ of (x, x^q) built from E[x^s] = Γ(s+1):

    * c(q) = ½ tr(∇²g κ₂) = [Γ(2q+1)/Γ(q+1)² - 1 - q] / (2(q-1)): E[H_q] = mean field + c/n + O(n^-2);
      c(1) = 1/2, c(2) = 3/2, c(1/2) = 3/2 - 4/π = 0.2268;
    * V(q) = ∇gᵀ κ₂ ∇g (the delta-method factor);
    * K(q) = Σ g_i g_j g_k κ_ijk + 3 Σ g_i g_j g_kl κ_ik κ_jl, the leading third cumulant n² κ_3 of a smooth
      function of means (hall1992bootstrap, §2.4);
    * skewness K / V^{3/2}; at q = 1, (12 ζ(3) - 10 - π²/2) / (π²/3 - 3)^{3/2} = -3.26867, at q = 2 exactly -7;
    * mode offset -K/(2V): the first Edgeworth correction moves the maximum of the density from the mean by
      -skewness · sd / 2 = -K / (2 V n); at q = 1 (10 + π²/2 - 12 ζ(3)) / (2(π²/3 - 3)) = 0.87992, at q = 2
      exactly 3.5.

    Near q = 1 the individual terms are O((q-1)^-3) and cancel; they are evaluated with mpmath at enough
    digits, so the constants are continuous through the Shannon values (which are used at q = 1).

    Args:
        q: Order(s) in [0, inf), a float or an array. q = 0 gives zeros (H_0 = log n is constant; skewness and
            mode offset 0 by convention). Very large q overflows to ±inf (the constants grow like (27/4)^q).

    Returns:
        :class:`EntropyAsymptotics` of floats (scalar q) or float64 arrays of q's shape.

    Raises:
        TypeError: ``q`` not numeric. ValueError: ``q`` NaN, negative or infinite (H_∞ is an extreme-value
            statistic, not a smooth function of means: no 1/n expansion of this kind exists).

    References:
        su2025entropy (the delta method), hall1992bootstrap (cumulants of smooth functions of means).
    """
    q_arr, scalar = _check_q(q)
    if np.any(np.isinf(q_arr)):
        raise ValueError("q must be finite: at q = inf, H_inf = log S - log max x_i is an extreme-value statistic, "
                         "not a smooth function of sample means, and has no expansion of this kind")
    flat = np.atleast_1d(q_arr).reshape(-1)
    values = np.array([_asymptotics_at(float(v)) for v in flat]).reshape(np.shape(q_arr) + (5,))
    fields = [_out(values[..., i], scalar) for i in range(5)]
    return EntropyAsymptotics(*fields)
