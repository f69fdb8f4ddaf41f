"""The SVD polar factor with a backward that stays finite at repeated singular values (Sylvester form).

``torch.linalg.svd``'s own backward divides by ``σ_i² - σ_j²``, so the gradient of ``U Vᵀ`` is NaN at every
matrix with a repeated singular value: every orthogonal matrix, every ``c·Q``. The polar factor itself is
smooth there (higham2008functions, ch. 8), and its derivative involves only sums ``σ_i + σ_j``.
:func:`polar_factor_svd` computes the forward with ``torch.linalg.svd`` and differentiates it by the formulas
below (book chapter "Steepest descent under the spectral norm", section "Differentiating msign").

Derivation. Let ``X = U Σ Vᵀ`` (thin SVD, ``k = min(m, n)``), full rank, ``Q = U Vᵀ``. With
``H = (XᵀX)^{1/2} = V Σ Vᵀ`` for tall or square X, ``Q = X H⁻¹``, so ``dQ = dX H⁻¹ - Q dH H⁻¹``. In the
singular bases, with ``K = Uᵀ dX V``, ``HdH + dH H = dXᵀX + XᵀdX`` gives
``Vᵀ dH V = (σ_j K_ji + σ_i K_ij)/(σ_i + σ_j)``, and

    Uᵀ dQ V = Ω,   Ω_ij = (K_ij - K_ji) / (σ_i + σ_j)          (skew: Qᵀ dQ is skew)
    (I - UUᵀ) dQ = (I - UUᵀ) dX V Σ⁻¹ Vᵀ                        (tall X; zero when m <= n)

and the wide case follows by transposition: ``dQ (I - VVᵀ) = U Σ⁻¹ Uᵀ dX (I - VVᵀ)``. Pairing with the
incoming gradient ``C`` (``<C, dQ> = <X̄, dX>``) and writing ``A = Uᵀ C V``::

    X̄ = U Γ Vᵀ + (I - UUᵀ) C V Σ⁻¹ Vᵀ + U Σ⁻¹ Uᵀ C (I - VVᵀ),    Γ_ij = (A_ij - A_ji) / (σ_i + σ_j).

For square X both projector terms vanish and ``X̄ = U Γ Vᵀ``: ``Γ`` solves the Sylvester equation
``ΣΓ + ΓΣ = A - Aᵀ``. No ``σ_i - σ_j`` appears, so repeated singular values are harmless.

Where no derivative exists. msign is discontinuous at rank-deficient X: ``msign(X + ε u vᵀ)`` jumps by
``u vᵀ`` for every ``ε > 0`` when ``u, v`` span null spaces. The computed map keeps only the ``r`` singular
triplets above the cutoff (``keep``), and the backward returns the derivative of that computed map
``U_r V_rᵀ`` at a matrix whose dropped singular values are zero: the formula above with ``U_r, Σ_r, V_r``
in place of ``U, Σ, V``, so ``I - U_rU_rᵀ`` includes the dropped columns of ``U``. It is the derivative of
msign restricted to the manifold of rank-``r`` matrices; its ``U_⊥ᵀ X̄ V_⊥`` block (the rank-changing
directions, where msign jumps) is zero. Dropped singular values that are small but not zero (below
``rcond·σ_max``) change the computed map's true derivative only by a relative ``O(σ_dropped/σ_r)``.
Where nothing is kept (``X = 0``) the gradient is zero.

``complete=True`` returns the full thin ``U Vᵀ`` even when some ``σ_i = 0``: one of the nearest orthogonal
matrices (``Orthogonal.project``'s fallback), or of the nearest points of the Stiefel manifold
(``Stiefel.project``). For square X its backward is ``U Γ Vᵀ`` with ``Γ_ij = 0`` where ``σ_i + σ_j = 0``.
With one zero singular value, null vectors ``u, v``, that is the limit of the derivative at the invertible
neighbours ``X + ε u vᵀ`` (ε ↓ 0), whose polar factors tend to the returned ``U Vᵀ``; from the other side
(ε ↑ 0) the polar factor and its derivative have other limits. With two or more the rotation between the null
spaces is arbitrary and has no derivative; the backward holds it fixed. For tall (wide) X the projector term
of a zero ``σ_j`` is dropped too (``Σ⁻¹`` read as the pseudo-inverse): the completing column ``u_j`` is then
any unit vector orthogonal to the others, which has no derivative either, and the backward holds it fixed;
the result is finite wherever the forward is.

Second derivatives are not implemented: differentiating the returned gradient again (``create_graph=True``
followed by another backward, ``gradgradcheck``) raises ``RuntimeError`` naming msign.

References: higham2008functions (ch. 8: the polar decomposition and its sensitivity).
"""

from __future__ import annotations

import torch

__all__ = ["polar_factor_svd"]

_SECOND_ORDER = ("msign(method='svd') and Orthogonal.project support first derivatives only: the backward of "
                 "the SVD polar factor (svmuon.orthogonal._polar_grad) is not itself differentiable; use "
                 "method='newton_schulz' (plain autograd through matrix products) for higher derivatives")


def polar_factor_svd(X: torch.Tensor, rcond: float, *, complete: bool = False) -> torch.Tensor:
    """``U diag(1[σ > rcond·σ_max]) Vᵀ`` of ``X`` (``(..., m, n)``, float32/float64), differentiable.

    ``complete=True`` returns ``U Vᵀ`` of the thin SVD with every singular value replaced by one, zero ones
    included (orthonormal columns, or rows for wide X). Unchecked (callers validate); see the module docstring
    for the backward.
    """
    if torch.is_grad_enabled() and X.requires_grad:
        return _PolarSVD.apply(X, float(rcond), bool(complete))
    return _forward(X, float(rcond), bool(complete))[0]  # no graph wanted: skip the Function's overhead


def _forward(X: torch.Tensor, rcond: float, complete: bool):
    U, S, Vh = torch.linalg.svd(X, full_matrices=False)
    keep = S > rcond * S[..., :1]  # s_max = S[..., 0]; S == 0 everywhere -> nothing kept
    if complete:
        keep = torch.ones_like(keep)
    return (U * keep.to(X.dtype).unsqueeze(-2)) @ Vh, U, S, Vh, keep


class _PolarSVD(torch.autograd.Function):
    @staticmethod
    def forward(ctx, X: torch.Tensor, rcond: float, complete: bool) -> torch.Tensor:  # type: ignore[override]
        out, U, S, Vh, keep = _forward(X, rcond, complete)
        ctx.save_for_backward(X, U, S, Vh, keep)
        return out

    @staticmethod
    def backward(ctx, C: torch.Tensor):  # type: ignore[override]
        X, U, S, Vh, keep = ctx.saved_tensors
        with torch.no_grad():
            grad = _polar_backward(C, U, S, Vh, keep)
        if torch.is_grad_enabled():  # create_graph=True: a second backward must fail loudly, not silently
            grad = _FirstOrderOnly.apply(grad, X)
        return grad, None, None


def _polar_backward(C: torch.Tensor, U: torch.Tensor, S: torch.Tensor, Vh: torch.Tensor,
                    keep: torch.Tensor) -> torch.Tensor:
    """``X̄`` of the module docstring, batched; ``keep`` marks the singular triplets in the output."""
    m, n = U.shape[-2], Vh.shape[-1]
    k = keep.to(S.dtype)
    s_inv = torch.where(keep & (S > 0), 1 / torch.where(S > 0, S, 1), 0)  # Σ_r⁻¹, zero off the kept set
    A = U.mT @ C @ Vh.mT
    den = S.unsqueeze(-1) + S.unsqueeze(-2)
    pair = keep.unsqueeze(-1) & keep.unsqueeze(-2) & (den > 0)
    M = torch.where(pair, (A - A.mT) / torch.where(pair, den, 1), 0)
    # kept-dropped blocks of (I - U_rU_rᵀ) C V_r Σ_r⁻¹ and U_r Σ_r⁻¹ U_rᵀ C (I - V_rV_rᵀ) inside span(U), span(V)
    drop = 1 - k
    M = M + drop.unsqueeze(-1) * A * s_inv.unsqueeze(-2) + s_inv.unsqueeze(-1) * A * drop.unsqueeze(-2)
    grad = U @ M @ Vh
    if m > n:  # tall: (I - UUᵀ) C V Σ_r⁻¹ Vᵀ, the part of C outside the column space
        grad = grad + ((C @ Vh.mT - U @ A) * s_inv.unsqueeze(-2)) @ Vh
    elif m < n:  # wide: U Σ_r⁻¹ Uᵀ C (I - VVᵀ)
        grad = grad + U @ (s_inv.unsqueeze(-1) * (U.mT @ C - A @ Vh))
    return grad


class _FirstOrderOnly(torch.autograd.Function):
    """Identity on the gradient whose own backward raises: marks where second derivatives are missing."""

    @staticmethod
    def forward(ctx, grad: torch.Tensor, X: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return grad.clone()

    @staticmethod
    def backward(ctx, *_):  # type: ignore[override]
        raise RuntimeError(_SECOND_ORDER)
