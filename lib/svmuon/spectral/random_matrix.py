"""Singular-value entropy of a Gaussian random matrix in the large-n limit (Marchenko–Pastur law).

A matrix ``W`` of shape ``(m, n)`` with i.i.d. centred entries of variance s² has ``k = min(m, n)`` singular
values. With ``N = max(m, n)`` and the aspect ratio ``λ = k / N`` in (0, 1], the numbers ``x_i = σ_i² / (N s²)``
have an empirical distribution that converges to the Marchenko–Pastur law of ratio λ
(book eq. ``eq-mp-density``)::

    f_λ(x) = sqrt((b - x)(x - a)) / (2π λ x),   a, b = (1 ∓ sqrt(λ))²,   E[x] = 1,  E[x²] = 1 + λ.

For a square matrix (λ = 1) the singular values ``sqrt(x)`` follow the quarter-circle law
``sqrt(4 - s²)/π`` on [0, 2]. The entropy of ``p_i = σ_i^power / Σ σ_j^power`` is a ratio of linear
statistics of the spectrum, so with ``y = x^(power/2)`` (book eq. ``eq-gaussian-limit``)::

    H_q(p) - log k  ->  (q log E[y] - log E[y^q]) / (q - 1)        (q != 1)
    H_1(p) - log k  ->  log E[y] - E[y log y] / E[y]                 (Shannon)

almost surely as k, N -> ∞ with k/N -> λ. The expectations are computed here by ``scipy.integrate.quad``
over the density after the substitution ``x = 1 + λ - 2 sqrt(λ) cos θ``, which removes the square-root
edges (and, at λ = 1, the 1/sqrt(x) singularity): ``f_λ(x) dx = 2 sin²θ / (π x(θ)) dθ`` on [0, π].

References: marchenko1967distribution, su2025entropy, liu2025moonlight.
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any

import numpy as np
import torch
from scipy import integrate

from svmuon._validation import check_int, check_order

_MOMENT_RTOL = 1e-9  # relative accuracy demanded of every Marchenko-Pastur expectation
_NEAR_ONE = 0.5  # |q - 1| below this uses the expm1/log1p form of eq-gaussian-limit (no 0/0 at q = 1)

__all__ = ["marchenko_pastur_pdf", "marchenko_pastur_moment", "gaussian_entropy_limit", "gaussian_entropy_samples"]


def _check_ratio(aspect_ratio: Any) -> float:
    """Return the aspect ratio λ = min(m, n)/max(m, n) as a float in (0, 1]; raise naming ``aspect_ratio``."""
    if isinstance(aspect_ratio, bool) or not isinstance(aspect_ratio, numbers.Real):
        raise TypeError(f"aspect_ratio must be a real number in (0, 1], got {type(aspect_ratio).__name__}")
    lam = float(aspect_ratio)
    if not (0.0 < lam <= 1.0):
        raise ValueError(f"aspect_ratio must be min(m, n)/max(m, n), a real number in (0, 1], got {lam}")
    return lam


def _check_power(power: Any) -> float:
    """Return ``power`` as a positive finite float; raise TypeError/ValueError naming ``power``."""
    if isinstance(power, bool) or not isinstance(power, numbers.Real):
        raise TypeError(f"power must be a positive finite real number (1 or 2 in the book), got {type(power).__name__}")
    if not (0 < float(power) < math.inf):
        raise ValueError(f"power must be a positive finite real number (1 or 2 in the book), got {power!r}")
    return float(power)


def _check_points(x: Any) -> np.ndarray:
    """``x`` as a float64 array of real, non-NaN evaluation points; TypeError/ValueError naming ``x``."""
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as err:  # e.g. a ragged nested list
        raise TypeError(f"x must be array-like of real numbers, got {type(x).__name__} ({err})") from None
    if arr.dtype.kind == "c":
        raise TypeError("x must hold real evaluation points, got complex values")
    if arr.dtype.kind not in "iuf":  # strings, None, objects, bools: not evaluation points
        raise TypeError(f"x must be array-like of real numbers, got {type(x).__name__} of dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    nans = int(np.isnan(arr).sum())
    if nans:
        raise ValueError(f"x holds {nans} NaN entr{'y' if nans == 1 else 'ies'}: the density is not defined there "
                         "(±inf is allowed: the density is 0 there)")
    return arr


def marchenko_pastur_pdf(x: Any, aspect_ratio: float) -> np.ndarray:
    """Density of the Marchenko–Pastur law of ratio λ with mean 1 (book eq. ``eq-mp-density``).

    Args:
        x: Array-like of evaluation points (any shape), real; ±inf allowed (density 0), NaN not.
        aspect_ratio: λ = min(m, n)/max(m, n), a float in (0, 1].

    Returns:
        float64 NumPy array of ``x``'s shape: ``sqrt((b - x)(x - a)) / (2π λ x)`` on (a, b), 0 outside,
        with a, b = (1 ∓ sqrt λ)². This is the limiting density of σ²/(N s²) for a Gaussian matrix.

    Raises:
        TypeError: ``x`` complex or not convertible to real numbers.
        ValueError: ``x`` holds NaN (as every function of this module refuses a NaN argument, rather than
            returning a number for it; a NaN is not outside the support); ``aspect_ratio`` not a real number
            in (0, 1] (a TypeError if it is not a real number at all).

    References: marchenko1967distribution.
    """
    lam = _check_ratio(aspect_ratio)
    x = _check_points(x)
    a, b = (1 - math.sqrt(lam)) ** 2, (1 + math.sqrt(lam)) ** 2
    inside = (x > a) & (x < b) & (x > 0)
    out = np.zeros_like(x)
    xi = x[inside]
    out[inside] = np.sqrt((b - xi) * (xi - a)) / (2 * math.pi * lam * xi)
    return out


def marchenko_pastur_moment(g: Any, aspect_ratio: float) -> float:
    """E[g(x)] for x ~ Marchenko–Pastur(λ) with mean 1, by adaptive quadrature.

    Args:
        g: Vectorised-or-scalar callable R_{>0} -> R, finite on the support (it may have an integrable
            singularity at 0 when λ = 1, e.g. ``x log x`` or ``x**-0.25``).
        aspect_ratio: λ in (0, 1].

    Returns:
        The expectation as a Python float, computed by ``scipy.integrate.quad`` in the angle θ with
        ``x = 1 + λ - 2 sqrt(λ) cos θ`` and weight ``2 sin²θ / (π x)`` (absolute error below 1e-10 for the
        smooth integrands used in the book).

    Raises:
        TypeError: ``g`` is not callable.
        ValueError: bad ``aspect_ratio``; or the integral diverges (e.g. E[1/x] or E[x^-1/2] at λ = 1, where
            the density behaves like x^-1/2 near 0) or cannot be computed to 1e-9 relative accuracy: the
            quadrature's own error estimate is checked, so a divergent integral is an error, never a number.

    References: marchenko1967distribution.
    """
    if not callable(g):
        raise TypeError(f"g must be a callable, got {type(g).__name__}")
    lam = _check_ratio(aspect_ratio)
    r = math.sqrt(lam)

    def integrand(theta: float) -> float:
        x = 1 + lam - 2 * r * math.cos(theta)
        if x <= 0.0:  # only θ = 0 at λ = 1, a point of measure zero
            return 0.0
        return float(g(x)) * 2 * math.sin(theta) ** 2 / (math.pi * x)

    with warnings.catch_warnings():  # QUADPACK's warnings become the error below, with a clearer message
        warnings.simplefilter("ignore", integrate.IntegrationWarning)
        value, abserr = integrate.quad(integrand, 0.0, math.pi, limit=200, epsabs=1e-13, epsrel=1e-12)[:2]
    # A convergent integrand of the book reaches abserr ~ 1e-14; a divergent one leaves an error estimate
    # many orders larger (E[1/x] at λ = 1: 6e-7 on a "value" of -0.5), so the estimate separates the two.
    if not math.isfinite(value) or not abserr <= _MOMENT_RTOL * max(abs(value), 1e-3):
        raise ValueError(f"the Marchenko-Pastur expectation of g does not converge for aspect_ratio={lam} "
                         f"(quadrature error estimate {abserr:.2g} on a value {value:.6g}); at λ = 1 the density "
                         "behaves like x^-1/2 near 0, so g must be integrable against it (e.g. E[x^s] needs s > -1/2)")
    return value


def _log_edge_moment(lam: float, N: float) -> float:
    """``log E[(x/b)^N]`` for x ~ Marchenko–Pastur(λ), ``b = (1 + sqrt λ)²``, any ``N >= 1`` (up to 1e308).

    With φ = π - θ the substitution of :func:`marchenko_pastur_moment` gives ``x = b - 4r sin²(φ/2)``,
    r = sqrt λ, and the mass of ``(x/b)^N`` lies within φ ~ s = sqrt(b / (N r)) of the upper edge. Writing
    φ = u s, ``E = s³ J`` with ``J = ∫ exp(N log1p(-4r sin²(us/2)/b)) · 2 (sin(us)/s)² / (π x) du``, an integral
    of order one (it tends to ``1/(2 sqrt(π) b)`` as N -> ∞), so that neither the quadrature misses the
    peak nor ``E`` underflows (about N^-3/2: below 1e-308 once N > 1e205). The integrand is below
    exp(-4u²/π²) (sin(φ/2) >= φ/π), under 1e-40 of its peak beyond u = 15: u runs to min(π/s, 20).
    """
    r = math.sqrt(lam)
    b = (1.0 + r) ** 2
    s = math.sqrt(b / (N * r))

    def integrand(u: float) -> float:
        phi = u * s
        x = b - 4.0 * r * math.sin(phi / 2) ** 2
        return math.exp(N * math.log1p(-4.0 * r * math.sin(phi / 2) ** 2 / b)) * 2 * (math.sin(phi) / s) ** 2 / (
            math.pi * x) if x > 0 else 0.0

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", integrate.IntegrationWarning)
        J, abserr = integrate.quad(integrand, 0.0, min(math.pi / s, 20.0), limit=200, epsabs=0.0, epsrel=1e-12)[:2]
    if not (J > 0 and abserr <= _MOMENT_RTOL * J):
        raise ValueError(f"the Marchenko-Pastur edge moment E[(x/b)^{N:g}] for aspect_ratio={lam} could not be "
                         f"computed to {_MOMENT_RTOL:g} relative accuracy (estimate {J:.3g} ± {abserr:.2g})")
    return 3.0 * math.log(s) + math.log(J)


def gaussian_entropy_limit(aspect_ratio: float, *, q: float = 1.0, power: float = 1) -> float:
    """Large-n limit of H_q(p) - log k for a Gaussian (or any i.i.d. finite-fourth-moment) matrix.

    Args:
        aspect_ratio: λ = min(m, n)/max(m, n) in (0, 1]; 1 for a square matrix.
        q: Rényi order in [0, inf]; q = 1 is Shannon's entropy (the default), q = 0 gives 0 exactly, and
            q = inf gives log E[y] - (power/2) log b, b = (1 + sqrt λ)² the upper edge of the spectrum.
        power: 1 for p ∝ σ, 2 for p ∝ σ² (the two normalisations of eq-normalisations); any positive real.

    Returns:
        The limit in nats (a Python float, <= 0 by Jensen's inequality), book eq. ``eq-gaussian-limit``:
        ``(q log E[y] - log E[y^q])/(q - 1)`` with ``y = x^(power/2)``, x ~ Marchenko–Pastur(λ); for q = 1
        ``log E[y] - E[y log y]/E[y]``. The value is continuous in q: for δ = q - 1 with 0 < abs(δ) < 1/2 it
        is computed as ``log E[y] - log1p(δ M) / δ`` with ``M = E[y expm1(δ log y)/δ] / E[y]``, which has
        no 0/0 as q -> 1; for q > 1 it is ``q/(q-1) (log E[y] - (power/2) log b) - log E[(x/b)^(q·power/2)]/(q-1)``
        with b the upper edge, the last moment computed around the edge (it neither overflows nor underflows,
        so every finite q, 1e300 included, is accurate and tends to the q = inf value). Examples:
        λ = 1, power = 2, q = 2 gives ``-log 2``; λ → 0 gives 0 (the spectrum of a very flat matrix is flat).

    Raises:
        TypeError, ValueError: bad ``aspect_ratio``, ``q`` (negative or NaN) or ``power``.

    References: marchenko1967distribution, yin1988limit (q = inf), su2025entropy.
    """
    lam = _check_ratio(aspect_ratio)
    q = check_order(q)
    a = _check_power(power) / 2.0
    if q == 0.0:
        return 0.0
    mean_y = marchenko_pastur_moment(lambda x: x**a, lam)
    log_b = 2.0 * math.log1p(math.sqrt(lam))  # log of the upper edge b = (1 + sqrt λ)²
    if math.isinf(q):  # H_inf - log k = log(mean y) - log(max y), and max x -> b (yin1988limit)
        return math.log(mean_y) - a * log_b
    delta = q - 1.0
    if q == 1.0:
        # y log y = x^a · a log x, written so that x -> 0 gives 0 instead of 0 · (-inf)
        ylogy = marchenko_pastur_moment(lambda x: a * x**a * math.log(x) if x > 0 else 0.0, lam)
        return math.log(mean_y) - ylogy / mean_y
    if abs(delta) < _NEAR_ONE:
        # E[y^q] = E[y] (1 + δ M): every term of M has the sign of log y, nothing cancels, M -> E[y log y]/E[y]
        m = marchenko_pastur_moment(lambda x: x**a * math.expm1(delta * a * math.log(x)) / delta if x > 0 else 0.0,
                                    lam) / mean_y
        return math.log(mean_y) - math.log1p(delta * m) / delta
    if q > 1.0:  # E[y^q] = b^(aq) E[(x/b)^(aq)]; written so that no term grows with q (q up to 1e308)
        return (q / delta) * (math.log(mean_y) - a * log_b) - _log_edge_moment(lam, a * q) / delta
    mean_yq = marchenko_pastur_moment(lambda x: x ** (a * q), lam)
    return (q * math.log(mean_y) - math.log(mean_yq)) / delta


def gaussian_entropy_samples(
    m: int,
    n: int,
    *,
    draws: int,
    q: Any = 1.0,
    power: Any = 1,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
) -> np.ndarray:
    """H_q(p) - log k for ``draws`` independent standard-Gaussian matrices of shape (m, n).

    The Monte Carlo counterpart of :func:`gaussian_entropy_limit`. The spectra come from
    :func:`svmuon.spectral.spectrum.spectral_distribution` and the entropies from
    :func:`svmuon.spectral.entropy.renyi_entropy`; the same matrices serve every ``q`` and ``power``.

    Args:
        m, n: Matrix shape, integers >= 1.
        draws: Number of independent matrices, >= 1.
        q: A Rényi order, or a sequence of them (as in :func:`gaussian_entropy_limit`).
        power: A normalisation exponent, or a sequence of them.
        generator: Optional ``torch.Generator`` for reproducible draws.
        dtype: float32 or float64 (default).

    Returns:
        float64 NumPy array in nats: shape ``(draws,)`` when ``q`` and ``power`` are scalars, else
        ``(len(q), len(power), draws)`` (a scalar counts as a sequence of one).

    Raises:
        TypeError, ValueError: non-integer or non-positive ``m``, ``n``, ``draws``; bad ``q`` or ``power``.
    """
    from svmuon.spectral.entropy import renyi_entropy
    from svmuon.spectral.spectrum import spectral_distribution

    m, n, draws = check_int(m, "m"), check_int(n, "n"), check_int(draws, "draws")
    scalar = isinstance(q, numbers.Real) and isinstance(power, numbers.Real)
    qs = [check_order(v) for v in ((q,) if isinstance(q, numbers.Real) else q)]
    powers = [_check_power(v) for v in ((power,) if isinstance(power, numbers.Real) else power)]
    W = torch.randn(draws, m, n, generator=generator, dtype=dtype)
    out = np.empty((len(qs), len(powers), draws))
    for j, pw in enumerate(powers):
        p = spectral_distribution(W, pw)
        for i, qq in enumerate(qs):
            out[i, j] = np.asarray(renyi_entropy(p, qq), dtype=np.float64) - math.log(min(m, n))
    return out[0, 0] if scalar else out
