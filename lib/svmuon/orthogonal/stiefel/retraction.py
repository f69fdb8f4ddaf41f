"""The polar retraction on St(m, n) for any step length: ``R_W(-ηΦ) = (W - ηΦ)((W - ηΦ)ᵀ(W - ηΦ))^{-1/2}``.

For tangent ``Φ`` the Gram matrix is ``I + η²ΦᵀΦ`` (thm-stiefel-retraction); its inverse square root is a binomial
series in ``E = VsᵀVs - I`` that converges fast for the optimizer's short steps, and an eigendecomposition beyond.
The series runs on the Gram matrix of the actual ``Vs = W - ηΦ``, so a tangent residual of ``Φ`` or a drifted ``W``
costs no accuracy: the result is the nearest point to ``Vs`` to rounding.
"""

from __future__ import annotations

import functools

import torch

from svmuon.orthogonal.stiefel.reduction import WORK_DTYPE, _mm, _sym

__all__ = ["polar_retraction"]


@functools.lru_cache(maxsize=256)  # called at every optimizer step with the same few (lr, dtype) pairs
def _series_degree(eta_max: float, unit: float) -> int | None:
    """The degree of the binomial series ``(I + E)^{-1/2} = Σ_k binom(-1/2, k) E^k`` that reaches ``unit`` for
    ``‖E‖₂ <= r``, ``r = η² + 1e-3`` (``E = (W - ηΦ)ᵀ(W - ηΦ) - I = η²ΦᵀΦ`` plus rounding and drift for tangent
    ``Φ`` with ``‖Φ‖₂ <= 1``): the tail after degree ``k`` is at most ``|binom(-1/2, k+1)| r^{k+1} / (1 - r)``.
    ``None`` where ``r >= 0.5`` (the series converges too slowly; an eigendecomposition is cheaper)."""
    r = eta_max * eta_max + 1e-3
    if r >= 0.5:
        return None
    k, coef = 0, 1.0
    while True:
        coef *= (k + 0.5) / (k + 1)  # |binom(-1/2, k+1)|
        if coef * r ** (k + 1) / (1 - r) <= unit or k >= 30:
            return k
        k += 1


def _inverse_sqrt_series(H: torch.Tensor, degree: int) -> torch.Tensor:
    """``Σ_{k <= degree} binom(-1/2, k) E^k``, ``E = H - I``, by Horner's rule (``degree - 1`` products of E); a
    polynomial in the symmetric ``E``, so symmetric to rounding (the retraction needs no more)."""
    coefs = [1.0]
    for k in range(degree):
        coefs.append(coefs[-1] * -(k + 0.5) / (k + 1))
    eye = torch.eye(H.shape[-1], dtype=H.dtype, device=H.device)
    if degree == 0:
        return eye.expand_as(H)
    E = H - eye
    Z = torch.add(eye, E, alpha=coefs[-1] / coefs[-2]).mul_(coefs[-2])  # c₁E + c₀I: the last two terms
    for c in reversed(coefs[:-2]):
        Z = torch.baddbmm(eye.expand_as(E), E, Z, beta=c) if E.ndim == 3 else c * eye + E @ Z
    return Z


def polar_retraction(W: torch.Tensor, Phi: torch.Tensor, eta: torch.Tensor, eta_max: float | None) -> torch.Tensor:
    """``Vs Z``, ``Vs = W - ηΦ``, ``Z = (VsᵀVs)^{-1/2}`` (unchecked kernel, tall ``(k, m, n)``, ``eta`` ``(k, 1, 1)``):
    by the binomial series (``_series_degree``: degree 2-3 in float32 and 6 in float64 at ``η = 0.05``) when the
    host bound ``eta_max`` has ``η² < 0.5``, else (or for ``eta_max=None``) by an eigendecomposition in float64.
    Two m × n × n products and a few n × n ones."""
    Vs = torch.addcmul(W, eta, Phi, value=-1.0)
    degree = None if eta_max is None else _series_degree(float(eta_max), torch.finfo(W.dtype).eps)
    if degree is None:
        # the polar factor of Vs is that of Vs / max(1, η): its Gram matrix cannot overflow for any finite η
        Vs = Vs / eta.clamp_min(1.0)
        try:
            lam, V = torch.linalg.eigh(_sym(_mm(Vs.mT, Vs).to(WORK_DTYPE)))
        except torch.linalg.LinAlgError:  # a non-finite Vs (NaN direction): a NaN point, which the step refuses
            return torch.full_like(Vs, float("nan"))
        Z = (V * torch.rsqrt(lam.clamp_min(torch.finfo(WORK_DTYPE).tiny))[..., None, :]) @ V.mT
        return Vs @ Z.to(W.dtype)
    return _mm(Vs, _inverse_sqrt_series(_mm(Vs.mT, Vs), degree))
