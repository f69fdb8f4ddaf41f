"""Distributions and spectra with a prescribed entropy: the level set {p : H(p) = h} as a parametrisation.

The experiment of chapter "Holding the entropy fixed" trains weight matrices whose singular-value entropy is
held exactly at a target ``h`` (nats). It needs a map from free parameters onto the level set that is exact,
differentiable and cheap. This module gives one, the *tempered softmax* (book eq. ``eq-tempered-softmax``):

    p(z) = softmax(β z),   β = β(z, h) >= 0 the unique root of  H(softmax(β z)) = h,

for a logit vector ``z`` in R^k that is not constant. Along β the entropy ``φ(β) = H(softmax(β z))`` is
continuous and strictly decreasing, ``φ'(β) = -β Var_{p}(z) < 0`` for β > 0 (eq. ``eq-tempered-slope``),
from ``φ(0) = log k`` to ``log #argmax z`` as β -> ∞; so every h in ``(log #argmax z, log k]`` has exactly one
β, and ``H(p(z)) = h`` holds to the root's accuracy (below 1e-10 nats in float64, measured in the tests). The gradient follows
from the implicit function theorem: differentiating ``φ(β(z), z) = h`` gives ``∂β/∂z = -(∂H/∂z)/φ'(β)``;
the entropy of the output is constant in z, so its gradient vanishes exactly (tested by finite differences).

A spectrum with entropy h in the book's normalisation with power ``r`` (``p_i = σ_i^r / Σ_j σ_j^r``, r = 1
the book's default, r = 2 the energy normalisation) is then ``σ_i = c · p_i^{1/r}`` for any scale ``c > 0``.

References: su2025entropy (the question of a fixed entropy), shannon1948mathematical, krantz2002implicit.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from svmuon._validation import as_tensor, check_finite, check_float

__all__ = ["tempered_softmax", "spectrum_with_entropy"]

_RESIDUAL = 1e-8  # nats: a float64 root that misses h by more is refused (measured misses are below 1e-10)
_NEWTON_STEPS = 40  # Newton's method from a bracketing grid: quadratic after a few steps; fixed count, no host sync


def _entropy_at(beta: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(H(softmax(βz)), φ'(β) = -β Var_p(z))`` for β of shape ``(..., 1)``."""
    logp = torch.log_softmax(beta * z, dim=-1)
    p = logp.exp()
    H = -(p * logp).sum(-1, keepdim=True)
    mean = (p * z).sum(-1, keepdim=True)
    var = (p * (z - mean) ** 2).sum(-1, keepdim=True)
    return H, -beta * var


def _normalise(z: torch.Tensor) -> torch.Tensor:
    """``z · 2^-e - max``: the same distributions ``softmax(βz)`` with ``max z = 0`` and ``max |z|`` in [1/2, 2].

    ``2^e`` is the power of two just above ``max |z|``, applied as two exact factors (a subnormal ``max |z|``
    needs ``2^-e`` beyond the float64 range); scaling before shifting keeps ``z - max z`` finite for logits near
    1e308. The factors and the shift are detached: the gradient stays exact because ``p(cz + d) = p(z)``.
    """
    with torch.no_grad():
        _, e = torch.frexp(z.abs().amax(-1, keepdim=True))
        a = torch.div(e, 2, rounding_mode="floor")
        f1, f2 = torch.exp2(-a.to(z.dtype)), torch.exp2(-(e - a).to(z.dtype))
    u = z * f1 * f2
    return u - u.detach().amax(-1, keepdim=True)


def _solve_beta(z: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """The root β >= 0 of ``H(softmax(βz)) = h`` in float64, shape ``(..., 1)``, for normalised ``z`` (max 0);
    unchecked (h reachable). Where float64 cannot reach h (h within rounding of log #argmax z) the result
    misses h; the public functions check the residual."""
    spread = (-z.amin(-1, keepdim=True)).clamp_min(torch.finfo(z.dtype).tiny)
    gap = torch.where(z < 0, -z, torch.full_like(z, math.inf)).amin(-1, keepdim=True)  # smallest max - z_i > 0
    gap = torch.where(torch.isfinite(gap), gap, spread)
    # bracket on geometric grids of β·spread and of β·gap from 2^-20 to 2^60 (the entropy falls to
    # log #argmax only once β·gap is large, and the gap can be far below the spread); φ decreases, so the root
    # lies between the last grid point with φ >= h and the first with φ < h (or at 0)
    steps = torch.exp2(torch.arange(-20, 61, dtype=z.dtype, device=z.device))
    grid = torch.cat([steps / spread, steps / gap], dim=-1).clamp_max(1e300).sort(dim=-1).values  # (..., 162)
    H_grid, _ = _entropy_at(grid.unsqueeze(-1), z.unsqueeze(-2))  # (..., 162, 1)
    above = (H_grid.squeeze(-1) >= h).sum(-1, keepdim=True)  # grid points with φ >= h (a prefix)
    lo = torch.where(above > 0, grid.gather(-1, (above - 1).clamp_min(0)), torch.zeros_like(h))
    hi = grid.gather(-1, above.clamp_max(grid.shape[-1] - 1))
    beta = (lo + hi) / 2
    for _ in range(_NEWTON_STEPS):  # Newton, kept inside the bracket (bisection when it would leave it)
        H, slope = _entropy_at(beta, z)
        lo = torch.where(H >= h, beta, lo)
        hi = torch.where(H < h, beta, hi)
        newton = beta - (H - h) / torch.where(slope < 0, slope, torch.full_like(slope, -1.0))
        # closed bracket: at an exact root (H = h, so lo = β = newton) a strict test bisected away from it
        inside = (newton >= lo) & (newton <= hi) & (slope < 0)
        beta = torch.where(inside, newton, (lo + hi) / 2)
    return beta


def _tempered_softmax(z: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """Unchecked kernel: ``softmax(β(z, h) z)`` with the implicit-function gradient, float64 ``z``."""
    z = _normalise(z)  # softmax(βz) is invariant under shifts and positive scales of z; keeps βz <= 0 finite
    with torch.no_grad():
        beta0 = _solve_beta(z, h)
        beta0 = torch.where(h >= math.log(z.shape[-1]), torch.zeros_like(beta0), beta0)  # uniform: β = 0 exactly
    H, slope = _entropy_at(beta0, z)  # differentiable in z
    degenerate = slope.detach() >= 0  # β = 0 (h = log k): the uniform distribution, constant in z
    denom = torch.where(degenerate, torch.ones_like(slope), slope.detach())
    # value β0 (H = h there); gradient -(∂H/∂z)/φ'(β): the implicit function theorem (eq-tempered-slope)
    beta = beta0 + torch.where(degenerate, torch.zeros_like(H), -(H - H.detach()) / denom)
    return torch.softmax(beta * z, dim=-1)


def _check_level(z: torch.Tensor, h: Any) -> torch.Tensor:
    if isinstance(h, bool) or not isinstance(h, (int, float, np.floating, np.integer, np.ndarray, torch.Tensor)):
        raise TypeError(f"h must be a real number (nats), an array or a tensor, got {type(h).__name__}")
    if isinstance(h, np.ndarray) and not np.issubdtype(h.dtype, np.number):
        raise TypeError(f"h must hold real numbers, got an array of dtype {h.dtype}")
    if isinstance(h, torch.Tensor) and (h.is_complex() or h.dtype == torch.bool):
        raise TypeError(f"h must hold real numbers, got a tensor of dtype {h.dtype}")
    try:
        h_t = torch.as_tensor(h, dtype=torch.float64, device=z.device)
    except OverflowError:
        raise ValueError(f"h must be finite, got an integer too large for float64: {h!r}") from None
    # h rounded to its own dtype may land just above log k (float32 log 64 = log 64 + 4e-8): tolerate that
    h_eps = torch.finfo(h.dtype).eps if isinstance(h, torch.Tensor) and h.is_floating_point() else (
        np.finfo(h.dtype).eps if isinstance(h, (np.ndarray, np.floating)) and np.issubdtype(h.dtype, np.floating)
        else 0.0)
    if not torch.isfinite(h_t).all():
        raise ValueError(f"h must be finite, got {h!r}")
    try:
        h_t = torch.broadcast_to(h_t, z.shape[:-1]).unsqueeze(-1)
    except RuntimeError:
        raise ValueError(f"h of shape {tuple(h_t.shape)} does not broadcast to z's batch shape {tuple(z.shape[:-1])}") from None
    k = z.shape[-1]
    top = (z == z.amax(-1, keepdim=True)).sum(-1, keepdim=True).to(torch.float64)
    low, high = torch.log(top), math.log(k)
    bad = (h_t > high + max(1e-12, 4 * h_eps * high)) | (h_t <= low) & (h_t < high)
    if bad.any():
        i = int(bad.flatten().nonzero()[0])
        if float(low.flatten()[i]) == high:
            raise ValueError(f"h = {float(h_t.flatten()[i])!r} nats is not reachable from z: a constant z gives only "
                             f"the uniform distribution, h = log k = {high:.6g}")
        raise ValueError(f"h = {float(h_t.flatten()[i])!r} nats is not reachable from z: softmax(βz) over β >= 0 has "
                         f"entropies in (log #argmax z, log k] = ({float(low.flatten()[i]):.6g}, {high:.6g}]")
    return h_t.clamp_max(high)


def tempered_softmax(z: Any, h: Any) -> torch.Tensor | np.ndarray:
    """The distribution ``softmax(β z)`` on the entropy level set ``{H(p) = h}`` (book eq. eq-tempered-softmax).

    Args:
        z: logits, shape ``(..., k)`` with k >= 1, float16, bfloat16, float32 or float64 (torch or NumPy; the
            root is always found in float64 and ``p`` rounded to z's dtype), finite, on any device. Only the
            direction of ``z`` matters up to a shift and a positive scale (1e-310 or 1e308 logits are fine).
        h: target Shannon entropy in nats, a number, array or tensor broadcasting to ``z.shape[:-1]``; must lie in
            ``(log #argmax z, log k]`` (``h = log k`` gives the uniform distribution).

    Returns:
        ``p`` of ``z``'s shape, dtype, device and container, with ``Σ p = 1`` and ``H(p) = h`` to within
        1e-10 nats (float64; float32 output rounds p to ~1e-7 relative). Differentiable in ``z`` (torch):
        the gradient is exact (implicit function theorem, eq. eq-tempered-slope); ``h`` receives none.

    Raises:
        TypeError: ``z`` not a real float tensor/array (integer, complex, list); ``h`` not a real number, array
            or tensor (a string, complex or boolean values).
        ValueError: ``z`` without a last axis or non-finite; ``h`` non-finite, of a non-broadcasting shape,
            or outside ``(log #argmax z, log k]``; ``h`` so close to ``log #argmax z`` that float64 cannot
            reach it (it would need β > 1e300: the largest logit leads the next by a relative ~1e-300).

    References:
        su2025entropy; the chapter "Holding the entropy fixed".
    """
    t, was_numpy = as_tensor(z, "z")
    check_float(t, "z")
    if t.ndim < 1 or t.shape[-1] < 1:
        raise ValueError(f"z must have a last axis of length k >= 1, got shape {tuple(t.shape)}")
    check_finite(t, "z")
    h_t = _check_level(t.detach().to(torch.float64), h)
    p64 = _tempered_softmax(t.to(torch.float64), h_t)
    with torch.no_grad():  # float64 cannot always reach h: h within rounding of log #argmax z (a tiny top gap)
        miss = (torch.special.entr(p64).sum(-1, keepdim=True) - h_t).abs() > _RESIDUAL
    if miss.any():
        i = int(miss.flatten().nonzero()[0])
        raise ValueError(f"h = {float(h_t.flatten()[i])!r} nats cannot be reached in float64 from this z: it needs "
                         f"β beyond 1e300 (the largest logit leads the next by too little); raise h or spread z")
    p = p64.to(t.dtype)
    return p.detach().cpu().numpy() if was_numpy else p


def spectrum_with_entropy(z: Any, h: Any, scale: Any = 1.0, power: float = 1) -> torch.Tensor | np.ndarray:
    """Singular values ``σ = scale · p^{1/power}``, ``p = tempered_softmax(z, h)``: entropy exactly ``h``.

    The normalised spectrum ``σ^power / Σ σ^power`` equals ``p``, so the singular-value entropy of any
    ``U diag(σ) Vᵀ`` with orthonormal ``U, V`` is ``h`` (``singular_value_entropy(..., power=power)``).

    Args:
        z: logits, shape ``(..., k)``, as in :func:`tempered_softmax`.
        h: target entropy in nats, as in :func:`tempered_softmax`.
        scale: positive overall scale ``c`` (number or tensor broadcasting to ``z.shape[:-1] + (1,)``);
            differentiable when a tensor.
        power: the normalisation power r, 1 (book default, ``p ∝ σ``) or 2 (``p ∝ σ²``), any r > 0.

    Returns:
        ``σ`` of ``z``'s shape, dtype and container, sorted as ``z`` is (largest logit, largest σ).

    Raises:
        ValueError: as :func:`tempered_softmax`; ``power <= 0``; a non-positive or non-finite ``scale``, or
            one whose shape does not broadcast to ``z.shape[:-1] + (1,)`` (a scale per singular value would
            change the entropy); a power the dtype cannot carry: the returned σ, with values at or below
            ``k·eps·σ_max`` counted as zeros (as ``singular_value_entropy`` does for a k×k matrix), must give
            H(σ^power/Σσ^power) within ``sqrt(eps)`` of h. That fails for small powers, where
            ``(p_min/p_max)^(1/power) <= k·eps`` (about power < log(p_max/p_min) / log(1/(k·eps))), and for
            large ones, where ``power·eps·Σ p_i |log p_i + h| > sqrt(eps)`` (σ_i round to equal values); the
            message gives both bounds for the spectrum at hand.
        TypeError: as :func:`tempered_softmax`; ``scale`` not a real number, array or tensor.
    """
    from svmuon.spectral.spectrum import _check_power

    r = _check_power(power)
    t, was_numpy = as_tensor(z, "z")
    check_float(t, "z")
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating, np.integer, np.ndarray,
                                                         torch.Tensor)):
        raise TypeError(f"scale must be a positive number, an array or a tensor, got {type(scale).__name__}")
    if (isinstance(scale, np.ndarray) and scale.dtype.kind not in "fiu") or (
            isinstance(scale, torch.Tensor) and (scale.is_complex() or scale.dtype == torch.bool)):
        raise TypeError(f"scale must hold real numbers, got dtype {scale.dtype}")
    s = scale.to(t.device, t.dtype) if isinstance(scale, torch.Tensor) else torch.as_tensor(scale, dtype=t.dtype,
                                                                                             device=t.device)
    if not torch.isfinite(s).all() or (s <= 0).any():
        raise ValueError(f"scale must be positive and finite, got {scale!r}")
    try:
        ok = torch.broadcast_shapes(s.shape, t.shape[:-1] + (1,)) == t.shape[:-1] + (1,)
    except RuntimeError:
        ok = False
    if not ok:  # a scale varying along the last axis would change the spectrum's shape and its entropy
        raise ValueError(f"scale of shape {tuple(s.shape)} does not broadcast to z.shape[:-1] + (1,) = "
                         f"{tuple(t.shape[:-1]) + (1,)}")
    p = tempered_softmax(t, h)
    sigma = s * p ** (1.0 / r)
    _check_realised(sigma.detach(), p.detach(), torch.as_tensor(h, dtype=torch.float64, device=t.device), r)
    return sigma.detach().cpu().numpy() if was_numpy else sigma


def _check_realised(sigma: torch.Tensor, p: torch.Tensor, h: torch.Tensor, r: float) -> None:
    """Refuse a power r for which the spectrum ``sigma``, as returned in its dtype, does not carry entropy h.

    Measured on ``sigma`` itself in float64, as :func:`svmuon.singular_value_entropy` (default ``rtol``) would
    see a k×k matrix with these singular values: values at or below ``k·eps·σ_max`` count as zeros, and
    ``H(σ^r / Σσ^r)`` must be within ``sqrt(eps)`` of h (eps of sigma's dtype). Two ends fail. A small r
    spreads ``σ_i ∝ p_i^{1/r}`` beyond the dtype: ``(p_min/p_max)^{1/r} <= k·eps`` drops the smallest values
    (or all underflow), about r < log(p_max/p_min) / log(1/(k·eps)). A large r rounds them towards one value:
    rounding each σ_i (relative eps/2) moves p_i by r·eps/2 relative and H by up to
    ``r·eps·Σ p_i |log p_i + h|``, above sqrt(eps) for r > 1/(sqrt(eps)·Σ p_i |log p_i + h|)."""
    k = sigma.shape[-1]
    eps = torch.finfo(sigma.dtype).eps
    tol = math.sqrt(eps)
    s64 = sigma.to(torch.float64)
    top = s64.amax(-1, keepdim=True)
    ok_top = (top > 0) & torch.isfinite(top)
    w = s64 / torch.where(ok_top, top, torch.ones_like(top))
    keep = (w > k * eps) & ok_top
    logw = torch.where(keep, torch.log(torch.where(keep, w, torch.ones_like(w))), torch.full_like(w, -math.inf))
    lp = r * logw - torch.logsumexp(r * logw, -1, keepdim=True)
    H = -torch.where(keep, lp.exp() * lp, torch.zeros_like(lp)).sum(-1) + 0.0  # + 0.0: no "-0" in the message
    target = torch.broadcast_to(h, H.shape)
    miss = ~ok_top.squeeze(-1) | ((H - target).abs() > tol)
    if not bool(miss.any()):
        return
    i = int(miss.flatten().nonzero()[0])
    hi_ = float(target.flatten()[i])
    what = (f"its singular-value entropy would be {float(H.flatten()[i]):.6g} nats, not h = {hi_:.6g}"
            if bool(ok_top.flatten()[i]) else f"σ = scale·p^(1/power) underflows to {float(top.flatten()[i]):.3g}")
    q = p.to(torch.float64).reshape(-1, k)[i]
    q = q[q > 0]
    lo = float(torch.log(q.max() / q.min())) / math.log(1 / (k * eps))
    hi = tol / (eps * max(float((q * (torch.log(q) + hi_).abs()).sum()), 1e-300))
    raise ValueError(f"power = {r!r} cannot carry this spectrum in {sigma.dtype}: {what} (tolerance sqrt(eps) = "
                     f"{tol:.2g}); powers between about {lo:.3g} and {hi:.3g} are safe for it (small ones spread "
                     "σ_i ∝ p_i^(1/power) beyond the dtype, large ones round the σ_i to one value)")
