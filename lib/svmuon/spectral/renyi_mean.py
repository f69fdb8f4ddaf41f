"""The exact mean Rényi entropy E[H_q(p)] of a uniform point p of the simplex, for every order q in [0, ∞].

Book chapter "Rényi entropies and the spread", ``thm-renyi-mean``. With x_i i.i.d. Exp(1),
S = Σ x_i ~ Gamma(n, 1) and T_q = Σ x_i^q (``thm-exp-simplex``)::

    E[H_q] = (q E[log S] - E[log T_q]) / (q - 1),   E[log S] = ψ(n),

and Frullani's integral log a = ∫_0^∞ (e^{-t} - e^{-ta}) dt / t turns E[log T_q] into one integral over t of
the n-th power of the Laplace transform φ_q(t) = E[exp(-t x^q)] (the terms of T_q are independent; book
eq. ``eq-frullani-mean``)::

    E[log T_q] = ∫_0^∞ (e^{-t} - φ_q(t)^n) dt / t

Two forms of it are evaluated, both by the trapezoid rule after an exponential change of variable (the
integrands are analytic in a strip around the real line and decay exponentially at both ends, so the rule
converges geometrically; the steps below leave errors near 1e-15, checked against mpmath in the tests):

* 0 < q <= 3/2 ("near one"): E[H_q] = ψ(n) + (1/δ) ∫ (φ_q(t)^n - φ_1(t)^n) dt/t with δ = q - 1 and
  φ_1(t) = 1/(1+t). The difference φ_q - φ_1 = E[e^{-tx} expm1(-t x expm1(δ log x))] is computed without
  cancellation, so the quotient by δ stays accurate as q -> 1 (no 0/0 at q = 1).
* q > 3/2 (and q = ∞): with t = e^{qw} and the duality φ_q(t) = 1 - φ_{1/q}(t^{-1/q}) (from
  P(E' > t x^q) for a second Exp(1) draw E'), E[H_q] = q (ψ(n) - J)/(q - 1) - γ with
  J = ∫ (exp(-e^w) - Φ(w)^n) dw and Φ(w) = 1 - E[exp(-e^{-w} y^{1/q})]; at q = ∞, Φ(w) = 1 - exp(-e^{-w})
  is the distribution function of the log of the largest of n Exp(1) draws, E[H_∞] = ψ(n) - E[log max x_i].

Inner expectations over an Exp(1) draw x are integrals in v = log x of the density e^{v - e^v}. Everything is
NumPy, vectorised over n; one call handles one order q. References: su2025entropy (the question),
ostrowski1949frullani (Frullani's integral), devroye1986nonuniform (exponential order statistics).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

_EULER = float(np.euler_gamma)
_H_V = 0.15  # trapezoid step in v = log x (inner integrals); analyticity strip >= π/3 wide: error ~ e^{-2π·0.9/0.15}
_H_U = 0.25  # step in u = log t (near-one form); strip π/2: error ~ e^{-2π·1.4/0.25} ~ 1e-15
_H_W = 0.05  # step in w (large-q form); narrowed to _H_W_LOG / log n for large n, where Φ^n steepens like 1/log n
_H_W_LOG = 0.35
_TAIL = 45.0  # integrands are cut where they fall below e^{-45} ~ 3e-20 (absolute)
_CHUNK = 1 << 22  # entries of an (n, grid) block evaluated at once: bounds memory at ~32 MiB per temporary


def _trapezoid_grid(lo: float, hi: float, h: float) -> tuple[np.ndarray, float]:
    m = int(math.ceil((hi - lo) / h)) + 1
    return np.linspace(lo, hi, m), (hi - lo) / (m - 1)


def _trapezoid(f: np.ndarray, h: float | np.ndarray) -> np.ndarray:
    """Trapezoid sums along the last axis (the end points carry weight 1/2)."""
    return h * (f.sum(axis=-1) - 0.5 * (f[..., 0] + f[..., -1]))


def _log_ratio_near_one(q: float, u: np.ndarray) -> np.ndarray:
    """z(t) = log φ_q(t) - log φ_1(t) at t = e^u, with φ_q - φ_1 computed without cancellation."""
    t = np.exp(u)
    delta = q - 1.0
    span = min(max(1.0, 1.0 / q), 3.0)  # the bulk of e^{-t x^q} lies near v = -log(t)/q
    log_t = np.maximum(u, 0.0)
    m = int(math.ceil((_TAIL + 4.0 + span * log_t.max()) / _H_V)) + 1
    lo = -_TAIL - span * log_t
    v = lo[:, None] + (4.0 - lo)[:, None] * np.linspace(0.0, 1.0, m)[None, :]
    hv = (4.0 - lo) / (m - 1)
    ev = np.exp(v)
    a = t[:, None] * ev  # t x
    d = -a * np.expm1(delta * v)  # t x - t x^q
    with np.errstate(over="ignore", invalid="ignore"):
        # e^{-t x^q} - e^{-t x}: as e^{-tx} expm1(.) where that is accurate, as a plain difference where the two
        # exponentials differ by more than a factor e (no cancellation then, and no inf · 0)
        term = np.where(np.abs(d) < 1.0, np.exp(-a) * np.expm1(d), np.exp(-(a - d)) - np.exp(-a))
    diff = _trapezoid(np.exp(v - ev) * term, hv)  # φ_q(t) - φ_1(t)
    rel = diff * (1.0 + t)  # φ_q / φ_1 - 1
    with np.errstate(divide="ignore"):
        ratio = 1.0 + rel
        z = np.where(ratio > 0.0, np.log(np.where(ratio > 0.0, ratio, 1.0)), -np.inf)  # φ_q negligible: -inf
    small = np.abs(rel) < 0.5
    return np.where(small, np.log1p(np.where(small, rel, 0.0)), z)


def _mean_near_one(n: np.ndarray, q: float) -> np.ndarray:
    """E[H_q] for 0 < q <= 3/2, q != 1, and integers n >= 2 (float64 array)."""
    n_min, n_max = float(n.min()), float(n.max())
    u_lo = -_TAIL - math.log(n_max)  # left: φ_q^n - φ_1^n ~ n t (Γ(q+1) - 1)
    # right: φ_q^n ~ (Γ(1+1/q) t^{-1/q})^n and φ_1^n = (1+t)^{-n}; beyond u = 26 both are below e^{-40} for q <= 1/2
    tail = max(q * special.gammaln(1.0 + 1.0 / q) + 40.0 * q / n_min, 40.0 / n_min)
    u, h = _trapezoid_grid(u_lo, min(tail, 26.0) + 2.0, _H_U)
    z = _log_ratio_near_one(q, u)
    log_phi1 = -np.log1p(np.exp(u))
    out = np.empty_like(n)
    rows = max(1, _CHUNK // u.size)
    for start in range(0, n.size, rows):
        nn = n[start:start + rows, None]
        nz, nl = nn * z[None, :], nn * log_phi1[None, :]
        with np.errstate(over="ignore", invalid="ignore"):
            # φ_q^n - φ_1^n = φ_1^n expm1(n z), or the plain difference where n z is not small
            f = np.where(nz < 0.5, np.exp(nl) * np.expm1(nz), np.exp(nl + np.minimum(nz, 700.0)) - np.exp(nl))
        out[start:start + rows] = _trapezoid(f, h)
    return special.digamma(n) + out / (q - 1.0)


def _log_cdf_large_q(q: float, w: np.ndarray, log_n: float) -> np.ndarray:
    """log Φ(w), Φ(w) = E[1 - exp(-e^{-w} y^{1/q})] = φ_q(e^{qw}) (exactly 1 - exp(-e^{-w}) at q = ∞).

    ``n log Φ`` must be right to ~e^{-45} for n up to e^{log_n}, so 1 - Φ = E exp(-e^{-w} y^{1/q}) is needed to an
    absolute e^{-45}/n: the v grid starts at -(45 + log n), where the density e^{v - e^v} < e^v drops below that.
    """
    s = np.exp(-w)
    if math.isinf(q):  # log(1 - e^{-s}): log1p where e^{-s} is small (keeps n · log Φ exact for n up to 1e6 and beyond)
        tail = s > math.log(2.0)
        return np.where(tail, np.log1p(-np.exp(-np.where(tail, s, 1.0))), np.log(-np.expm1(-np.where(tail, 1.0, s))))
    v, hv = _trapezoid_grid(-_TAIL - log_n, 4.0, _H_V)
    density = np.exp(v - np.exp(v))
    out = np.empty_like(w)
    rows = max(1, _CHUNK // v.size)
    for start in range(0, w.size, rows):  # (w, v) blocks of bounded size
        arg = -s[start:start + rows, None] * np.exp(v / q)[None, :]
        psi = _trapezoid(density * np.exp(arg), hv)  # E exp(-s y^{1/q})
        omega = _trapezoid(-density * np.expm1(arg), hv)  # 1 - psi, accurate when small
        out[start:start + rows] = np.where(omega < 0.5, np.log(np.where(omega > 0.0, omega, 1.0)), np.log1p(-psi))
    return out


def _mean_large_q(n: np.ndarray, q: float) -> np.ndarray:
    """E[H_q] for q > 3/2 (q = ∞ included) and integers n >= 2 (float64 array)."""
    n_min, n_max = float(n.min()), float(n.max())
    r = 0.0 if math.isinf(q) else 1.0 / q
    hi = max(math.log(_TAIL) + 1.0, special.gammaln(1.0 + r) + 40.0 / n_min + 1.0)  # Φ^n ~ (Γ(1+1/q) e^{-w})^n
    # left cut-off: there exp(-e^w) - Φ^n ~ n (1 - Φ), and 1 - Φ = E exp(-s y^{1/q}) (s = e^{-w}) is at most
    # Γ(q+1) s^{-q} (drop e^{-y}), and at most 2^{-q} + exp(-s/2) (split at y^{1/q} = 1/2): below e^{-45}/n left of
    # w = -(45 + log n + log Γ(q+1))/q, and left of -42 once 2^{-q} n < e^{-46} (the first bound is then loose)
    log_n = math.log(n_max)
    if math.isinf(q) or q * math.log(2.0) > _TAIL + log_n + 1.0:
        lo = -_TAIL + 3.0
    else:
        lo = -max(_TAIL - 3.0, (_TAIL + log_n + special.gammaln(q + 1.0)) / q)
    # Φ^n steepens like 1/log n (q = ∞, Gumbel), but no further than 1/q (log n >> q: n(1 - Φ) ~ n Γ(q+1) e^{qw})
    w, h = _trapezoid_grid(lo, hi, min(_H_W, _H_W_LOG / min(log_n, q)))
    log_cdf = _log_cdf_large_q(q, w, log_n)
    head = np.expm1(-np.exp(w))  # exp(-e^w) - 1
    out = np.empty_like(n)
    rows = max(1, _CHUNK // w.size)
    for start in range(0, n.size, rows):
        nn = n[start:start + rows, None]
        f = head[None, :] - np.expm1(nn * log_cdf[None, :])  # exp(-e^w) - Φ^n, written as a difference of expm1s
        out[start:start + rows] = _trapezoid(f, h)
    psi_n = special.digamma(n)
    if math.isinf(q):
        return psi_n - out - _EULER
    return (q / (q - 1.0)) * (psi_n - out) - _EULER  # q / (q - 1) first: no overflow for q near 1.8e308


def mean_renyi_entropy(n: np.ndarray, q: float) -> np.ndarray:
    """Exact E[H_q(p)], p uniform on Δ^{n-1}, for a float64 array of integers n >= 1 and one order q in [0, ∞].

    Unchecked kernel of :func:`svmuon.spectral.theory.expected_entropy` (which validates and broadcasts).
    """
    out = np.zeros_like(n)
    many = n > 1  # n = 1: the single point (1,), entropy 0 for every order
    if not many.any():
        return out
    nn = n[many]
    if q == 0.0:
        out[many] = np.log(nn)  # H_0 = log #{p_i > 0} = log n almost surely
    elif q == 1.0:
        out[many] = special.digamma(nn + 1.0) - special.digamma(2.0)  # eq-exact-mean
    else:
        unique, inverse = np.unique(nn, return_inverse=True)
        kernel = _mean_near_one if q <= 1.5 else _mean_large_q
        out[many] = kernel(unique, q)[inverse]
    return out
