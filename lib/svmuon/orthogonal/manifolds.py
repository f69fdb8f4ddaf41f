"""The orthogonal group O(n) as a manifold: tangent spaces, the Muon direction, the closed-form retraction.

A point is a square matrix with ``WᵀW = I``. The tangent space at ``W`` is ``{W Ω : Ω skew}`` because
differentiating ``WᵀW = I`` gives ``WᵀΔ + ΔᵀW = 0`` (absil2008optimization, edelman1998geometry).
Steepest descent under the spectral norm restricted to that tangent space has the closed form
(su2025orthogonal; the book's equation ``eq-orth-direction``)::

    Φ = W msign([WᵀG]_skew),

and the step ``W - ηΦ = W(I - ηO)``, ``O = msign([WᵀG]_skew)``, is pulled back onto the group by the polar
retraction along the partial isometry ``O`` (book equation ``eq-orth-retraction``)::

    W ← W (I - ηO) (I - OᵀO + OᵀO / √(1 + η²)),

which is exact also when ``O`` is rank-deficient (always the case for odd n: a skew matrix of odd order
is singular). :class:`Orthogonal` is the ``m = n`` case of :class:`svmuon.orthogonal.base.Manifold`; its
kernels are what :class:`svmuon.optim.manifold_muon.ManifoldMuon` runs. Nothing here holds optimizer state.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import torch

from svmuon._validation import check_finite
from svmuon.orthogonal.base import (Direction, Manifold, _one_minus_s, _orthogonalizer, _retraction_scalars, as_matrix,
                                    check_pair, eye_like)

__all__ = ["sym", "skew", "Orthogonal", "drift_factor"]


def _matrix(x: Any, name: str, *, square: bool = True) -> tuple[torch.Tensor, bool]:
    return as_matrix(x, name, square=square)


_eye_like = eye_like


def sym(M: Any) -> Any:
    """Symmetric part ``[M]_sym = (M + Mᵀ)/2`` of square matrices.

    Args:
        M: tensor or NumPy array, shape ``(..., n, n)``, real floating dtype, finite.

    Returns:
        Same type, shape, dtype and device; ``sym(M) + skew(M) == M`` up to one rounding.

    Raises:
        TypeError: ``M`` is not a real floating tensor/array.
        ValueError: ``M`` is not square ``(..., n, n)``, is empty, or holds NaN/Inf.

    References:
        su2025orthogonal (the sym/skew split that gives the Lagrange multiplier ``X = -[WᵀG]_sym``).
    """
    T, was_numpy = _matrix(M, "M")
    out = (T + T.mT) / 2
    return out.numpy() if was_numpy else out


def skew(M: Any) -> Any:
    """Skew-symmetric part ``[M]_skew = (M - Mᵀ)/2`` of square matrices (exactly skew: ``out.mT == -out``).

    Args, Returns, Raises and References as for :func:`sym`.
    """
    T, was_numpy = _matrix(M, "M")
    out = (T - T.mT) / 2
    return out.numpy() if was_numpy else out


def _skew(T: torch.Tensor) -> torch.Tensor:
    return (T - T.mT) / 2


def drift_factor(sigma_range: tuple[float, float]) -> float:
    """``max σ²|σ² - 1|`` over ``σ ∈ {0} ∪ [lo, hi]``: the factor of the retraction's drift (eq-orth-drift).

    One retraction with a skew ``O`` whose singular values lie in ``{0} ∪ [lo, hi]`` multiplies the
    squared length of each invariant plane by ``1 + σ²(σ² - 1)(s - 1)²``, ``s = 1/√(1+η²)``, so it moves
    ``WᵀW`` by at most ``drift_factor · (s - 1)² ≈ drift_factor · η⁴/4`` in spectral norm. 0 for an
    exact msign (``σ ∈ {0, 1}``); 0.644 for Keller Jordan's 5-step band ``[0.4705, 1.2024]``; 0.25 for a
    schedule whose outputs can take any value in ``[0, 1]`` (the maximum of ``σ²(1 - σ²)``, at
    ``σ² = 1/2``).

    Args:
        sigma_range: ``(lo, hi)`` with ``0 <= lo <= hi`` (e.g. ``Orthogonalizer.sigma_range``).

    Returns:
        A float >= 0.

    Raises:
        TypeError: ``sigma_range`` is not a pair of real numbers. ValueError: not ``0 <= lo <= hi < inf``.
    """
    if (not isinstance(sigma_range, (tuple, list)) or len(sigma_range) != 2
            or not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in sigma_range)):
        raise TypeError(f"sigma_range must be a pair (lo, hi) of real numbers, got {sigma_range!r}")
    lo, hi = float(sigma_range[0]), float(sigma_range[1])
    if not (0.0 <= lo <= hi < math.inf):  # NaN fails too
        raise ValueError(f"sigma_range must satisfy 0 <= lo <= hi < inf, got {sigma_range!r}")
    f = lambda x: x * x * abs(x * x - 1)  # noqa: E731
    candidates = [f(lo), f(hi)] + ([0.25] if lo * lo <= 0.5 <= hi * hi else [])
    return max(candidates)


class Orthogonal(Manifold):
    """The orthogonal group ``O(n) = {W ∈ R^{n×n} : WᵀW = I}``, batched over leading dimensions.

    Holds nothing (no optimizer state, no msign route: :meth:`~svmuon.orthogonal.base.Manifold.steepest_direction`
    and :meth:`skew_direction` take an optional ``orthogonalize``); every method is a pure function of its
    arguments, accepts shape ``(..., n, n)`` and keeps dtype and device.

    Raises:
        TypeError: any constructor argument (the msign options belong to the optimizer, or to ``orthogonalize``).

    References:
        su2025orthogonal, absil2008optimization, edelman1998geometry, higham2008functions.
    """

    # -- kernels (see svmuon.orthogonal.base) -------------------------------------------------------------
    def _shape_error(self, shape: tuple[int, ...]) -> str | None:
        if shape[-1] != shape[-2]:
            return f"a point of the orthogonal group must be square (..., n, n), got shape {shape}"
        return None

    def tangent(self, W: torch.Tensor, Z: torch.Tensor) -> torch.Tensor:
        return W @ _skew(W.mT @ Z)

    def direction(self, W: torch.Tensor, U: torch.Tensor, orthogonalize: Any, state: dict) -> Direction:
        """``O = [msign([WᵀU]_skew)]_skew`` (eq-orth-direction) and ``‖[WᵀU]_skew‖_F`` (one product)."""
        A = _skew(W.mT @ U.to(W.dtype))
        O = _skew(orthogonalize(A).to(W.dtype))  # removes a symmetric residue of rounding or bf16
        return Direction(O, torch.linalg.matrix_norm(A), {}, {})

    def _tangent_from_step(self, W: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        return W @ step  # Φ = W O

    def _step_from_tangent(self, W: torch.Tensor, Phi: torch.Tensor) -> torch.Tensor:
        return _skew(W.mT @ Phi)  # O = WᵀΦ, re-projected onto skew matrices

    def retract_direction(self, W: torch.Tensor, step: torch.Tensor, eta: torch.Tensor,
                          eta_max: float | None = None) -> torch.Tensor:
        """eq-orth-retraction as ``W + W(-ηsO + (s-1)OᵀO)``: two products, the small update added to W.

        Because ``OP = O`` for a partial isometry (``P = OᵀO``), ``W(I-ηO)(I-P+sP) = W + W(-ηsO + (s-1)P)``;
        adding the small update to ``W`` rather than multiplying ``W`` by a factor halves the rounding drift.
        """
        O = _skew(step)
        s, c = _retraction_scalars(eta)
        update = (O.mT @ O).mul_(c).sub_(O * (eta * s))  # (s-1)OᵀO - ηsO
        return torch.baddbmm(W, W, update)

    def step_slack(self, eta: torch.Tensor, orthogonalize: Any) -> torch.Tensor | float:
        factor = drift_factor(getattr(orthogonalize, "sigma_range", (0.0, 1.0)))
        if factor == 0:
            return 0.0
        _, c = _retraction_scalars(eta)
        return (factor * c * c).flatten()  # eq-orth-drift: factor · (s-1)²

    def step_slack_bound(self, eta: float, orthogonalize: Any) -> float:
        c = _one_minus_s(eta, math.hypot(1.0, eta))  # on the host: no tensor read, no synchronisation
        return drift_factor(getattr(orthogonalize, "sigma_range", (0.0, 1.0))) * c * c

    # -- public methods specific to O(n) ---------------------------------------------------------------------
    def skew_direction(self, W: Any, G: Any, *, orthogonalize: Any = None) -> Any:
        """``O = msign([WᵀG]_skew)``, the factor with ``Φ = W O`` (eq-orth-direction); exactly skew.

        msign maps skew matrices to skew matrices (the book's ``thm-skew-msign``); the returned
        matrix is re-projected with ``[·]_skew`` so that rounding (or a bf16 Newton–Schulz) cannot leave a
        symmetric residue, which would move ``W`` off the group at first order in η.

        Args:
            W: ``(..., n, n)`` orthogonal. G: Euclidean gradient, ``(..., n, n)``, finite.
            orthogonalize: ``X -> msign(X)`` (default: exact, by SVD), e.g. an
                :class:`~svmuon.orthogonal.msign.Orthogonalizer` with a Newton–Schulz schedule.

        Returns:
            ``O``, shape ``(..., n, n)``, dtype and device of ``G`` (NumPy in, NumPy out).

        Raises:
            TypeError: non-float ``W`` or ``G``.
            ValueError: non-square, empty, non-finite or shape-mismatched ``W`` or ``G``; ``W`` not a point
                (``‖WᵀW - I‖_max > √eps`` of its dtype, as ``steepest_direction``).
        """
        from svmuon.orthogonal.msign import power_of_two_scale

        Wt, _ = _matrix(W, "W")
        Gt, was_numpy = _matrix(G, "G")
        check_pair(Wt, "W", Gt, "G")
        self._require_point(Wt)
        shape = torch.broadcast_shapes(Wt.shape, Gt.shape)
        flat = lambda T: T.expand(shape).reshape(-1, *shape[-2:])  # noqa: E731
        Gf = flat(Gt)
        Gf = Gf / power_of_two_scale(Gf)  # exact; O does not depend on the size of G, and WᵀG cannot overflow
        O = self.direction(flat(Wt.to(Gt.dtype)), Gf, _orthogonalizer(orthogonalize), {}).step.reshape(shape)
        return O.numpy() if was_numpy else O

    def orthogonality_error(self, W: Any) -> torch.Tensor:
        """``‖WᵀW - I‖_max`` per matrix, shape ``(...)`` (float64 accumulation), a tensor; as
        :meth:`~svmuon.orthogonal.base.Manifold.defect`.

        Raises:
            TypeError: non-float ``W``. ValueError: non-square, empty or non-finite ``W``.
        """
        return self.defect(W)

    def project(self, W: Any) -> Any:
        """Nearest orthogonal matrix in Frobenius (and spectral) norm: the polar factor ``msign(W)``.

        Computed as ``msign(W)`` by SVD with ``rcond=0`` (every non-zero singular value is kept, so an
        ill-conditioned ``W`` still gives an orthogonal matrix). For an exactly singular ``W`` the nearest
        orthogonal matrix is not unique and msign is only a partial isometry; then ``U Vᵀ`` from a full
        SVD is returned (one of the minimisers).

        Differentiable through msign's SVD backward (finite at orthogonal ``W``). In the singular fallback the
        backward is ``U Γ Vᵀ`` with ``Γ_ij = 0`` where ``σ_i + σ_j = 0``: for one zero singular value the limit
        of the derivative from the invertible side the returned ``U Vᵀ`` belongs to; for two or more (no
        derivative: the pairing of the null spaces is arbitrary) that pairing is held fixed.

        References:
            higham1986polar, schonemann1966procrustes.
        """
        from svmuon.orthogonal.msign import msign

        Wt, was_numpy = _matrix(W, "W")
        check_finite(Wt, "W")
        Q = msign(Wt, method="svd", rcond=0.0)  # keep every non-zero singular value, however small
        # a dropped (exactly zero) direction v leaves QᵀQ - I = -vvᵀ: Frobenius error >= 1, unlike the max norm
        I = _eye_like(Q)
        if bool((torch.linalg.matrix_norm(Q.mT @ Q - I) > 0.5).any()):
            from svmuon.orthogonal._polar_grad import polar_factor_svd  # U Vᵀ of a full SVD, differentiable

            Q = polar_factor_svd(Wt.double(), 0.0, complete=True).to(Wt.dtype)
        return Q.numpy() if was_numpy else Q

    def polar_correction(self, W: Any) -> Any:
        """One Björck–Newton–Schulz step ``W(3I - WᵀW)/2`` toward the polar factor (bjorck1971iterative).

        Cheap drift control: two matmuls; if ``‖WᵀW - I‖ = ε`` before, it is ``≈ 3ε²/4`` after.

        Raises:
            TypeError: non-float ``W``.
            ValueError: non-square, empty or non-finite ``W``, or a result beyond the dtype's range (``W``
                far from orthogonal: ``WᵀW`` or the product overflows).
        """
        Wt, was_numpy = _matrix(W, "W")
        out, _ = self.stabilize(Wt.reshape(-1, *Wt.shape[-2:]), True)
        out = out.reshape(Wt.shape)
        if not bool(torch.isfinite(out).all()):
            raise ValueError(f"polar_correction: W(3I - WᵀW)/2 overflows {Wt.dtype} (max|W| = "
                             f"{float(Wt.abs().max()):.3g}); it is meant for nearly orthogonal W, use project(W)")
        return out.numpy() if was_numpy else out
