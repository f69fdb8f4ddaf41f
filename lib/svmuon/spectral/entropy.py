"""Shannon and Rényi entropies of distributions and of normalised spectra; effective and stable rank.

All entropies are in nats. For a distribution p on k points and an order q in [0, ∞] (book eq. ``eq-renyi``;
the Shannon entropy H_1, the limit q -> 1, is book eq. ``eq-shannon``)::

    H_q(p) = log(Σ_i p_i^q) / (1 - q),   H_1 = -Σ_i p_i log p_i   (the limit q -> 1),
    H_0 = log #{i : p_i > 0},            H_∞ = -log max_i p_i,    with 0 · log 0 = 0.

Near q = 1 the formula is evaluated as ``-log1p(Σ p_i expm1((q-1) log p_i)) / (q-1)``: every term has the
same sign, so there is no cancellation and H_q is continuous (to rounding) across q = 1. Far from q = 1 a
log-sum-exp form is used, which neither overflows for large q nor underflows for tiny p_i.

Dtypes: float32/float64 in their own precision; float16/bfloat16 computed in float32 and cast back. Device and
container (torch or NumPy) follow the input.

References: shannon1948mathematical, renyi1961measures, roy2007effective, su2025entropy.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
import torch

from svmuon._validation import as_tensor, check_finite, check_float, check_order
from svmuon.spectral.spectrum import (
    _check_power,
    _check_rtol,
    _distribution,
    _finish,
    _prepare_matrix,
    _scale_free,
    _svdvals,
    _work_dtype,
)

__all__ = ["shannon_entropy", "renyi_entropy", "singular_value_entropy", "effective_rank", "stable_rank"]

# |q - 1| below this uses the expm1 form. With |q - 1| < 1/2 the exponent (q - 1) log p_i stays below
# |log p_i| / 2 <= 745 / 2 < 709 (float64) and 104 / 2 < 88 (float32), so expm1 cannot overflow.
_NEAR_ONE = 0.5


def _check_dim(p: torch.Tensor, dim: Any) -> int:
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):  # NumPy integers too, as the other options
        raise TypeError(f"dim must be an int, got {type(dim).__name__}")
    dim = int(dim)
    if p.ndim == 0:
        raise ValueError("p must have at least one dimension (the outcomes of the distribution), got a scalar")
    if not -p.ndim <= dim < p.ndim:
        raise ValueError(f"dim must be in [{-p.ndim}, {p.ndim - 1}] for p of shape {tuple(p.shape)}, got {dim}")
    return dim % p.ndim


def _prepare_distribution(p: Any, dim: Any) -> tuple[torch.Tensor, int, torch.dtype, bool]:
    """Validate ``p`` as a probability distribution along ``dim``; move ``dim`` last.

    Tolerance on the sums: sqrt(eps) of the input dtype (1.5e-8 for float64, 3.5e-4 for float32, 0.03 for
    float16): loose enough for rounding in a normalisation of millions of terms (error ~ log2(k) eps for
    pairwise summation), tight enough to reject anything that is not meant to be a distribution.
    """
    t, was_numpy = as_tensor(p, "p")
    check_float(t, "p")
    d = _check_dim(t, dim)
    if t.shape[d] == 0:
        raise ValueError(f"p must have at least one outcome along dim={dim}, got shape {tuple(t.shape)}")
    check_finite(t, "p")
    dtype = t.dtype
    work = t.to(_work_dtype(dtype)).movedim(d, -1)
    if bool((work < 0).any()):
        raise ValueError(f"p must be a probability distribution along dim={dim}: it has a negative entry "
                         f"(min {float(work.min()):.3g})")
    sums = work.sum(dim=-1)
    tol = math.sqrt(torch.finfo(dtype).eps)
    err = (sums - 1).abs()
    if bool((err > tol).any()):
        worst = float(sums.reshape(-1)[int(err.reshape(-1).argmax())])
        raise ValueError(f"p must be a probability distribution along dim={dim}: its entries must sum to 1 "
                         f"within {tol:.2g}, but a sum is {worst:.6g}")
    return work, d, dtype, was_numpy


def _shannon(p: torch.Tensor) -> torch.Tensor:
    """Shannon entropy of p / Σp along the last dim (eq-shannon); 0 · log 0 = 0.

    The zeros are masked (in the logarithm and in Σp), so that autograd gives 0, not NaN, for an entry
    p_i = 0: the gradient of the function restricted to the support (the true slope there is +inf).
    """
    positive = p > 0
    s = torch.where(positive, p, torch.zeros_like(p)).sum(dim=-1)  # = Σp; written so zeros get no gradient
    safe = torch.where(positive, p, torch.ones_like(p))
    plogp = torch.where(positive, safe * torch.log(safe), torch.zeros_like(p))
    return torch.log(s) - plogp.sum(dim=-1) / s


def _renyi(p: torch.Tensor, q: float) -> torch.Tensor:
    """Rényi entropy of order q of p / Σp along the last dim (eq-renyi), for a validated p >= 0, Σp > 0.

    Differentiable wherever H_q is (see :func:`singular_value_entropy`); entries p_i = 0 get a zero gradient
    (every logarithm is taken of a masked, positive argument, and Σp sums the support), never NaN.
    """
    if q == 1.0:
        return _shannon(p)
    positive = p > 0
    s = torch.where(positive, p, torch.zeros_like(p)).sum(dim=-1)  # = Σp; zeros get no gradient through it
    log_s = torch.log(s)
    if q == 0.0:  # log of the support size: piecewise constant, so its gradient is 0 (kept in the graph)
        return torch.log(positive.sum(dim=-1).to(p.dtype)) + 0.0 * s
    if math.isinf(q):
        return log_s - torch.log(p.amax(dim=-1))
    log_p = torch.log(torch.where(positive, p, torch.ones_like(p)))
    if abs(q - 1.0) < _NEAR_ONE:
        # Σ p^q = s (1 + T) with T = Σ p expm1((q-1) log p) / s; H_q = log s - log1p(T) / (q - 1).
        delta = q - 1.0
        t = (p * torch.expm1(delta * log_p)).sum(dim=-1) / s
        return log_s - torch.log1p(t) / delta
    # log Σ p^q = q·ℓ_max + log Σ exp(q (ℓ - ℓ_max)), ℓ = log p (ℓ = -inf where p = 0, and q > 0 here).
    log_p = torch.where(positive, log_p, torch.full_like(p, -math.inf))
    top = log_p.amax(dim=-1, keepdim=True)
    # H_q = (q ℓ_max + L - q log s)/(1 - q) = q/(q-1) (log s - ℓ_max) - L/(q-1), L = log Σ e^{q(ℓ-ℓ_max)} in
    # [0, log k]: in the first form q ℓ_max overflows for q near 1e308 (NaN), in the second nothing does
    q_arg = min(q, torch.finfo(p.dtype).max)  # q itself would round to inf in float32, and inf · 0 = NaN at ℓ_max
    # a tiny q rounds to 0 in float32 (q < 1.4e-45) and 0 · (-inf) = NaN at p_i = 0: keep -inf there explicitly
    # (then L = log #support, the right limit: H_q -> log #support as q -> 0)
    lse_rest = torch.logsumexp(torch.where(positive, q_arg * (log_p - top), log_p), dim=-1)
    return (q / (q - 1.0)) * (log_s - top.squeeze(-1)) - lse_rest / (q - 1.0)


def shannon_entropy(p: Any, dim: int = -1) -> torch.Tensor | np.ndarray:
    """Shannon entropy H(p) = -Σ_i p_i log p_i in nats, with 0 · log 0 = 0 (book eq. ``eq-shannon``).

    Args:
        p: Tensor or NumPy array of a real floating dtype, non-negative, summing to 1 along ``dim`` within
            sqrt(eps) of its dtype; any number of other (batch) dimensions.
        dim: The dimension that holds the outcomes.

    Returns:
        ``p``'s shape without ``dim``; values in [0, log k] with k = p.shape[dim]. The result is the exact
        entropy of p / Σp (so rounding in Σp does not leak into it). Dtype and device of ``p`` (half
        precision computed in float32); NumPy in, NumPy out.

    Note:
        Gradients: exact on the support; an entry p_i = 0 (where the slope of -p log p is +inf) gets 0.

    Raises:
        TypeError: ``p`` is not a tensor/array or has a non-float dtype; ``dim`` is not an int.
        ValueError: ``p`` is 0-D or empty along ``dim``, has NaN/Inf or negative entries, or a sum != 1;
            ``dim`` out of range.

    References:
        shannon1948mathematical.
    """
    work, _, dtype, was_numpy = _prepare_distribution(p, dim)
    return _finish(_shannon(work), dtype, was_numpy)


def renyi_entropy(p: Any, q: float, dim: int = -1) -> torch.Tensor | np.ndarray:
    """Rényi entropy H_q(p) = log(Σ_i p_i^q) / (1 - q) in nats, for every order q in [0, ∞] (eq. ``eq-renyi``).

    q = 1 is the Shannon entropy (the limit q -> 1, evaluated without dividing by zero, and continuous across
    q = 1 to rounding); q = 0 is the log of the support size log #{p_i > 0}; q = ∞ is the min-entropy
    -log max_i p_i. H_q is non-increasing in q and lies in [0, log k].

    Args:
        p: As in :func:`shannon_entropy`.
        q: The order, a real number in [0, inf] (``math.inf`` allowed).
        dim: The dimension that holds the outcomes.

    Returns:
        ``p``'s shape without ``dim``: H_q of p / Σp, in nats. Dtype/device of ``p``; NumPy in, NumPy out.

    Note:
        Gradients: exact on the support; an entry p_i = 0 gets 0 (for q < 1 the true slope there is +inf,
        for q > 1 it is 0). q = 0 has gradient 0; q = inf the gradient of -log max_i p_i.

    Raises:
        TypeError: as in :func:`shannon_entropy`, or ``q`` not a real number.
        ValueError: as in :func:`shannon_entropy`, or ``q`` negative or NaN.

    References:
        renyi1961measures, su2025entropy.
    """
    q = check_order(q, "q")
    work, _, dtype, was_numpy = _prepare_distribution(p, dim)
    return _finish(_renyi(work, q), dtype, was_numpy)


def _participation(work: torch.Tensor) -> torch.Tensor:
    """H_2 of p ∝ σ² from traces, -log ‖AᵀA‖_F² with A = W / ‖W‖_F: no SVD, smooth wherever W != 0.

    Σσ_i⁴ / (Σσ_i²)² = ‖WᵀW‖_F² / ‖W‖_F⁴; the smaller Gram matrix is formed, after scaling by ‖W‖_F so that
    nothing overflows. Equals the SVD route to rounding (singular values below the default threshold change
    it by less than (k ε)⁴). Clamped to [0, log k], the range rounding could leave by ~ε.

    ‖W‖_F itself is taken after an exact power-of-two rescaling (max entry in [0.5, 1)): directly, Σ w_ij²
    overflows for entries above ~1e19 in float32 (1e154 in float64) and loses digits or underflows below
    ~1e-19 (1e-154).
    """
    from svmuon.orthogonal.msign import power_of_two_scale

    if bool((work == 0).all(dim=(-2, -1)).any()):
        raise ValueError(f"W must not be the zero matrix: its singular-value entropy is undefined (W of shape "
                         f"{tuple(work.shape)})")
    work = work / power_of_two_scale(work.detach())  # H is scale invariant: a constant factor changes nothing
    norm = torch.linalg.matrix_norm(work).unsqueeze(-1).unsqueeze(-1)
    a = work / norm
    gram = a.mT @ a if a.shape[-2] >= a.shape[-1] else a @ a.mT
    h = -torch.log((gram * gram).sum(dim=(-2, -1)))
    return h.clamp(min=0.0, max=math.log(min(work.shape[-2:])))


def _spectral_entropy(W: Any, q: Any, power: Any, rtol: Any = None) -> tuple[torch.Tensor, torch.dtype, bool, int]:
    """H_q of the normalised spectrum in the working dtype, with the input dtype, container flag and k."""
    q = check_order(q, "q")
    power = _check_power(power)
    rtol = _check_rtol(rtol)
    work, dtype, was_numpy = _prepare_matrix(W, "W")
    k = min(work.shape[-2:])
    if q == 2.0 and power == 2.0 and not rtol:  # the participation ratio: smooth, from traces (no SVD)
        return _participation(work), dtype, was_numpy, k
    p = _distribution(_svdvals(_scale_free(work)), power, tuple(work.shape), rtol)
    return _renyi(p, q), dtype, was_numpy, k


_GRADIENTS = """
    Note:
        Gradients: autograd gives the exact gradient of the value computed, wherever it is differentiable,
        Σ_i (∂H/∂σ_i) u_i v_iᵀ (``torch.linalg.svdvals`` has a stable backward, also for repeated singular
        values). Singular values at or below ``rtol · σ_1`` count as zeros and get a zero gradient (the value
        does not depend on them there); with ``rtol=0.0`` every positive singular value counts and the
        function is smooth on full-rank matrices for q < inf, e.g. for a float32 matrix of condition number
        1e7, whose smallest singular value lies below the default float32 threshold. No derivative exists
        where some σ_i / σ_1 equals ``rtol`` (the value jumps), at a zero singular value with ``rtol=0.0`` for
        every q > 0 with ``power=1`` and for q <= 1/2 with ``power=2`` (a zero σ_n moved to ``|t|`` gives the
        normaliser Σσ^P a kink for P <= 1, and ``p_n^q = |t|^(Pq) / (Σσ^P)^q`` an infinite slope for Pq < 1
        and a kink at Pq = 1: autograd returns the gradient along the matrices of the same rank), and for
        q = inf where σ_1 is repeated (autograd returns the gradient for one top singular pair). q = 0 is
        piecewise constant: gradient 0. q = 2 with ``power=2`` (the participation ratio) is computed from
        traces without an SVD, -log(‖WᵀW‖_F² / ‖W‖_F⁴), and is smooth at every non-zero W, rank-deficient
        ones included (used whenever ``rtol`` is None or 0).
"""


def singular_value_entropy(W: Any, q: float = 1.0, power: float = 1, normalize: bool = False, *,
                           rtol: float | None = None) -> torch.Tensor | np.ndarray:
    """Rényi entropy of order q of the normalised singular values of W, in nats.

    H_q(p) with p_i = σ_i^power / Σ_j σ_j^power (eqs. ``eq-normalisations`` and ``eq-renyi``; singular
    values at or below ``rtol * σ_1`` count as zeros, by default ``rtol = max(m, n) * eps``, see
    :func:`svmuon.spectral.spectrum.spectral_distribution`).

    Args:
        W: Shape ``(..., m, n)``, m, n >= 1, real floating dtype, finite, no zero matrix in the batch.
        q: Rényi order in [0, inf]; 1 is Shannon (the singular-value entropy of the sources).
        power: 1 (σ/Σσ, Roy–Vetterli) or 2 (σ²/Σσ², Moonlight); the source article offers both. Any
            positive real is accepted.
        normalize: If True, divide by log k, k = min(m, n), so that the result lies in [0, 1]. Needs k >= 2:
            with k = 1 the spectral distribution is always (1,) and H / log k would be 0 / 0, so a
            ValueError is raised instead of a made-up value.
        rtol: None (default: ``max(m, n) * eps`` of the working dtype, the numerical-rank threshold) or a
            relative threshold in [0, 1); 0.0 keeps every singular value (the smooth function to train).

    Returns:
        Shape ``(...)``; in [0, log k] nats (or [0, 1] if normalized). Dtype/device of ``W`` (half precision
        computed in float32 and cast back); NumPy in, NumPy out.
{gradients}
    Raises:
        TypeError: bad container/dtype of ``W``; ``q``/``power``/``rtol`` not real; ``normalize`` not a bool.
        ValueError: bad shape, NaN/Inf, a zero matrix (entropy undefined), q < 0 or NaN, power <= 0,
            rtol outside [0, 1), ``normalize=True`` with min(m, n) = 1.

    References:
        su2025entropy, liu2025moonlight, roy2007effective, renyi1961measures.
    """
    if not isinstance(normalize, (bool, np.bool_)):
        raise TypeError(f"normalize must be a bool, got {type(normalize).__name__}")
    if normalize:
        t, _ = as_tensor(W, "W")
        if t.ndim >= 2 and min(t.shape[-2:]) == 1:
            raise ValueError(f"normalize=True needs min(m, n) >= 2, but W has shape {tuple(t.shape)}: with one "
                             "singular value the entropy is always 0 and log k = 0, so H / log k is undefined")
    h, dtype, was_numpy, k = _spectral_entropy(W, q, power, rtol)
    if normalize:
        h = h / math.log(k)
    return _finish(h, dtype, was_numpy)


def effective_rank(W: Any, q: float = 1.0, power: float = 1, *, rtol: float | None = None) -> torch.Tensor | np.ndarray:
    """Effective rank exp(H_q(p)) of W, p the normalised spectrum (Roy–Vetterli's erank at q=1, power=1).

    A real number in [1, rank W]. Particular (q, power) pairs are classical ranks:

    - q = 0 (any power): the numerical rank, #{σ_i > rtol σ_1} (as ``torch.linalg.matrix_rank`` with the
      default rtol = max(m, n) eps);
    - q = 1, power = 1: the effective rank erank of Roy and Vetterli;
    - q = 2, power = 2: the participation ratio (Σσ_i²)² / Σσ_i⁴ = ‖W‖_F⁴ / ‖WᵀW‖_F² (computed so, without an SVD);
    - q = ∞, power = 2: the stable rank ‖W‖_F² / ‖W‖_2² (see :func:`stable_rank`);
    - q = ∞, power = 1: the nuclear-to-spectral ratio ‖W‖_* / ‖W‖_2 = Σσ_i / σ_1.

    Args:
        W: Shape ``(..., m, n)``, as in :func:`singular_value_entropy`.
        q: Rényi order in [0, inf].
        power: 1 or 2 (any positive real accepted).
        rtol: As in :func:`singular_value_entropy`.

    Returns:
        Shape ``(...)``, dtype/device of ``W``; NumPy in, NumPy out.
{gradients}
    Raises:
        TypeError: as in :func:`singular_value_entropy`.
        ValueError: as in :func:`singular_value_entropy`.

    References:
        roy2007effective, su2025entropy.
    """
    h, dtype, was_numpy, _ = _spectral_entropy(W, q, power, rtol)
    r = torch.exp(h)
    if not isinstance(q, torch.Tensor) and float(q) == 0:  # exp(log r) is r to one rounding: the count itself, an integer
        r = r.round()
    return _finish(r, dtype, was_numpy)


def stable_rank(W: Any) -> torch.Tensor | np.ndarray:
    """Stable rank ‖W‖_F² / ‖W‖_2² = Σ_i σ_i² / σ_1² of each matrix; equals ``effective_rank(W, inf, 2)``.

    Args:
        W: Shape ``(..., m, n)``, m, n >= 1, real floating dtype, finite, no zero matrix in the batch.

    Returns:
        Shape ``(...)``, in [1, min(m, n)]. Dtype/device of ``W``; NumPy in, NumPy out.

    Note:
        Gradients: exact, 2 W / σ_1² - 2 (‖W‖_F² / σ_1³) u_1 v_1ᵀ, wherever σ_1 is a simple singular value
        (full rank or not); where σ_1 is repeated (e.g. at an orthogonal matrix) there is no derivative and
        autograd returns this formula for one top singular pair.

    Raises:
        TypeError: bad container or dtype.
        ValueError: bad shape, NaN/Inf, or a zero matrix (0 / 0).

    References:
        roy2007effective (for the family of effective ranks).
    """
    work, dtype, was_numpy = _prepare_matrix(W, "W")
    sigma = _svdvals(_scale_free(work))  # σ_1 could overflow for finite W; the ratio does not depend on scale
    top = sigma[..., 0]
    if bool((top == 0).any()):
        raise ValueError(f"W must not be the zero matrix: its stable rank ‖W‖_F² / ‖W‖_2² = 0 / 0 is undefined "
                         f"(W of shape {tuple(work.shape)})")
    return _finish(((sigma / top.unsqueeze(-1)) ** 2).sum(dim=-1), dtype, was_numpy)


singular_value_entropy.__doc__ = singular_value_entropy.__doc__.replace("{gradients}", _GRADIENTS)
effective_rank.__doc__ = effective_rank.__doc__.replace("{gradients}", _GRADIENTS)
