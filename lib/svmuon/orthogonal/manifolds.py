"""The orthogonal group O(n) as a manifold: tangent spaces, the Muon direction, the closed-form retraction.

A point is a square matrix with ``WᵀW = I``. The tangent space at ``W`` is ``{W Ω : Ω skew}`` because
differentiating ``WᵀW = I`` gives ``WᵀΔ + ΔᵀW = 0`` (absil2008optimization, edelman1998geometry).
Steepest descent under the spectral norm restricted to that tangent space has the closed form
(su2025orthogonal; the book's equation ``eq-orth-direction``)::

    Φ = W msign([WᵀG]_skew),

and the step ``W - ηΦ = W(I - ηO)``, ``O = msign([WᵀG]_skew)``, is pulled back onto the group by the
closed-form retraction (book equation ``eq-orth-retraction``)::

    W ← W (I - ηO) (I - OᵀO + OᵀO / √(1 + η²)),

which is exact also when ``O`` is rank-deficient (always the case for odd n: a skew matrix of odd order
is singular). Everything here is a pure function of its inputs: no optimizer state lives in this module.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import torch

from svmuon._validation import as_tensor, check_finite, check_float, check_matrix

__all__ = ["sym", "skew", "Orthogonal"]


def _matrix(x: Any, name: str, *, square: bool = True) -> tuple[torch.Tensor, bool]:
    T, was_numpy = as_tensor(x, name)
    check_float(T, name)
    check_matrix(T, name, square=square)
    return T, was_numpy


def _check_pair(A: torch.Tensor, a: str, B: torch.Tensor, b: str) -> None:
    """Raise ``ValueError`` unless ``A`` and ``B`` have the same n and broadcastable batch dimensions."""
    if A.shape[-1] != B.shape[-1]:
        raise ValueError(f"{a} and {b} must have the same matrix size n, got {a} of shape {tuple(A.shape)} and "
                         f"{b} of shape {tuple(B.shape)}")
    try:
        torch.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    except RuntimeError:
        raise ValueError(f"the batch dimensions of {a} {tuple(A.shape)} and {b} {tuple(B.shape)} are not "
                         f"broadcastable") from None


def sym(M: Any) -> Any:
    """Symmetric part ``[M]_sym = (M + Mᵀ)/2`` of square matrices.

    Args:
        M: tensor or NumPy array, shape ``(..., n, n)``, real floating dtype.

    Returns:
        Same type, shape, dtype and device; ``sym(M) + skew(M) == M`` up to one rounding.

    Raises:
        TypeError: ``M`` is not a real floating tensor/array.
        ValueError: ``M`` is not square ``(..., n, n)`` or is empty.

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


def _eye_like(T: torch.Tensor) -> torch.Tensor:
    return torch.eye(T.shape[-1], dtype=T.dtype, device=T.device)


class Orthogonal:
    """The orthogonal group ``O(n) = {W ∈ R^{n×n} : WᵀW = I}``, batched over leading dimensions.

    Holds only the choice of msign route (no optimizer state); every method is a pure function of its
    arguments, accepts shape ``(..., n, n)`` and keeps dtype and device.

    Args:
        msign_method: ``"svd"`` (exact) or ``"newton_schulz"``; see :func:`svmuon.orthogonal.msign.msign`.
        ns_steps: Newton–Schulz iterations (``None``: the schedule's default).
        ns_coefficients: Newton–Schulz schedule: ``"polar_express"``, ``"cubic"``, ``"keller_jordan"`` or
            explicit ``(a, b, c)`` triples.
        compute_dtype: dtype of the Newton–Schulz matmuls (``None``: msign's default, bf16 on CUDA).

    References:
        su2025orthogonal, absil2008optimization, edelman1998geometry, higham2008functions.
    """

    def __init__(self, *, msign_method: str = "svd", ns_steps: int | None = None,
                 ns_coefficients: Any = None, compute_dtype: torch.dtype | None = None) -> None:
        if msign_method not in ("svd", "newton_schulz"):
            raise ValueError(f"msign_method must be 'svd' or 'newton_schulz', got {msign_method!r}")
        if msign_method == "svd" and (ns_steps is not None or ns_coefficients is not None or compute_dtype is not None):
            raise ValueError("ns_steps, ns_coefficients and compute_dtype apply to msign_method='newton_schulz' only")
        self.msign_method = msign_method
        self.ns_steps = ns_steps
        self.ns_coefficients = ns_coefficients
        self.compute_dtype = compute_dtype

    def __repr__(self) -> str:
        if self.msign_method == "svd":
            return "Orthogonal(msign_method='svd')"
        return (f"Orthogonal(msign_method='newton_schulz', ns_steps={self.ns_steps}, "
                f"ns_coefficients={self.ns_coefficients!r}, compute_dtype={self.compute_dtype})")

    def _msign(self, T: torch.Tensor) -> torch.Tensor:
        from svmuon.orthogonal.msign import msign

        if self.msign_method == "svd":
            return msign(T, method="svd")
        return msign(T, method="newton_schulz", steps=self.ns_steps, coefficients=self.ns_coefficients,
                     compute_dtype=self.compute_dtype)

    # -- tangent space ------------------------------------------------------------------------------------
    def project_tangent(self, W: Any, Z: Any) -> Any:
        """Orthogonal projection of an ambient matrix ``Z`` onto the tangent space at ``W``: ``W [WᵀZ]_skew``.

        Idempotent (projecting twice changes nothing) when ``W`` is orthogonal.

        Args:
            W: point, ``(..., n, n)`` with ``WᵀW = I``. Z: ambient matrix, ``(..., n, n)``, broadcastable.

        Returns:
            Tangent vector ``Δ`` with ``WᵀΔ + ΔᵀW = 0``, the type, dtype and device of ``Z``.

        Raises:
            TypeError: non-float ``W`` or ``Z``.
            ValueError: non-square, empty, non-finite or shape-mismatched ``W`` or ``Z``.
        """
        Wt, _ = _matrix(W, "W")
        Zt, was_numpy = _matrix(Z, "Z")
        check_finite(Wt, "W")
        check_finite(Zt, "Z")
        _check_pair(Wt, "W", Zt, "Z")
        out = Wt @ _skew(Wt.mT @ Zt)
        return out.numpy() if was_numpy else out

    # -- steepest direction --------------------------------------------------------------------------------
    def skew_direction(self, W: Any, G: Any) -> Any:
        """``O = msign([WᵀG]_skew)``, the factor with ``Φ = W O`` (eq-orth-direction); exactly skew.

        msign maps skew matrices to skew matrices (the book's theorem ``thm-skew-msign``); the returned
        matrix is re-projected with ``[·]_skew`` so that rounding (or a bf16 Newton–Schulz) cannot leave a
        symmetric residue, which would move ``W`` off the group at first order in η.

        Args:
            W: ``(..., n, n)`` orthogonal. G: Euclidean gradient, ``(..., n, n)``, finite.

        Returns:
            ``O``, shape ``(..., n, n)``, dtype and device of ``G`` (NumPy in, NumPy out).

        Raises:
            TypeError: non-float ``W`` or ``G``.
            ValueError: non-square, empty, non-finite or shape-mismatched ``W`` or ``G``.
        """
        Wt, _ = _matrix(W, "W")
        Gt, was_numpy = _matrix(G, "G")
        check_finite(Wt, "W")
        check_finite(Gt, "G")
        _check_pair(Wt, "W", Gt, "G")
        O = _skew(self._msign(_skew(Wt.mT @ Gt)).to(Gt.dtype))
        return O.numpy() if was_numpy else O

    def steepest_direction(self, W: Any, G: Any) -> Any:
        """Steepest-ascent direction ``Φ = W msign([WᵀG]_skew)`` of ``tr(GᵀΦ)`` under ``‖Φ‖₂ ≤ 1`` on the
        tangent space ``WᵀΦ + ΦᵀW = 0`` (eq-orth-direction); the maximum is ``‖[WᵀG]_skew‖_*``.

        Descent moves along ``-Φ``. Args, Returns, Raises as :meth:`skew_direction`.

        References:
            su2025orthogonal (closed form, Lagrange multiplier ``X = -[WᵀG]_sym``).
        """
        Wt, _ = _matrix(W, "W")
        Gt, was_numpy = _matrix(G, "G")
        O = self.skew_direction(Wt, Gt)
        out = Wt.to(O.dtype) @ O
        return out.numpy() if was_numpy else out

    # -- retraction -----------------------------------------------------------------------------------------
    def retract(self, W: Any, O: Any, eta: float) -> Any:
        """Closed-form retraction ``W(I - ηO)(I - OᵀO + OᵀO/√(1+η²))`` (eq-orth-retraction).

        For ``O`` skew with ``OᵀO = P`` an orthogonal projector (``O`` a partial isometry, the output of an
        exact msign; rank-deficient allowed) the result is exactly orthogonal: ``(I-ηO)ᵀ(I-ηO) = I+η²P``
        and ``(I+η²P)^{-1/2} = I - P + P/√(1+η²)``. Because ``OP = O`` for a partial isometry, the product
        expands to ``W + W(-ηsO + (s-1)P)`` with ``s = 1/√(1+η²)``, which is what is computed (two
        matmuls, and the small update is added to ``W`` rather than multiplied into it, which halves the
        rounding drift). ``O`` is first re-projected onto skew matrices. If ``O`` is only approximately a
        partial isometry (a non-converged Newton–Schulz, bf16), an eigenvalue ``±iσ`` of ``O`` scales the
        squared modulus of the step by ``1 + σ²(s-1)²(σ²-1) ≈ 1 + η⁴σ²(σ²-1)/4``: the drift that
        :meth:`polar_correction` removes.

        Args:
            W: ``(..., n, n)``, orthogonal. O: ``(..., n, n)``, skew (a partial isometry for exactness).
            eta: step length η >= 0 (a spectral-norm length: ``‖W - W_new‖₂ ≤ √(2 - 2/√(1+η²))``).

        Returns:
            The new point, type, shape, dtype and device of ``W``.

        Raises:
            TypeError: non-float matrices, or ``eta`` not a real number.
            ValueError: bad shapes (``O`` must have the ``n`` of ``W`` and a batch broadcastable to that of
                ``W``), non-finite matrices, ``eta`` negative, NaN, infinite or too large for float64, or a
                non-finite result (e.g. an ``O`` so large that ``OᵀO`` overflows).
        """
        Wt, was_numpy = _matrix(W, "W")
        Ot, _ = _matrix(O, "O")
        if isinstance(eta, bool) or not isinstance(eta, numbers.Real):
            raise TypeError(f"eta must be a real number >= 0, got {type(eta).__name__}")
        try:
            eta_f = float(eta)
        except OverflowError:
            raise ValueError("eta must be a finite real number >= 0, got an integer beyond the float64 range") from None
        if not math.isfinite(eta_f) or eta_f < 0:
            raise ValueError(f"eta must be a finite real number >= 0, got {eta!r}")
        check_finite(Wt, "W")
        check_finite(Ot, "O")
        _check_pair(Wt, "W", Ot, "O")
        if torch.broadcast_shapes(Wt.shape, Ot.shape) != Wt.shape:
            raise ValueError(f"the batch dimensions of O {tuple(Ot.shape)} must broadcast to those of W "
                             f"{tuple(Wt.shape)} (the result has the shape of W)")
        out = _retract(Wt, Ot.to(Wt.dtype).expand_as(Wt), eta_f)
        if not bool(torch.isfinite(out).all()):
            raise ValueError(f"retract produced a non-finite result for eta={eta!r} in {Wt.dtype}; "
                             "W must be orthogonal and O a (partial-isometry) skew matrix of modest size")
        return out.numpy() if was_numpy else out

    # -- points ---------------------------------------------------------------------------------------------
    def orthogonality_error(self, W: Any) -> torch.Tensor:
        """``‖WᵀW - I‖_max`` per matrix, shape ``(...)`` (float64 accumulation), a tensor."""
        Wt, _ = _matrix(W, "W")
        W64 = Wt.double()
        return (W64.mT @ W64 - _eye_like(W64)).abs().amax(dim=(-2, -1))

    def check_point(self, W: Any, atol: float = 1e-5) -> bool:
        """True iff every matrix in ``W`` is square and finite with ``‖WᵀW - I‖_max <= atol``."""
        Wt, _ = as_tensor(W, "W")
        if Wt.ndim < 2 or Wt.shape[-1] != Wt.shape[-2] or Wt.numel() == 0 or not Wt.is_floating_point():
            return False
        if not bool(torch.isfinite(Wt).all()):
            return False
        return bool((self.orthogonality_error(Wt) <= atol).all())

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
            TypeError: non-float ``W``. ValueError: non-square, empty or non-finite ``W``.
        """
        Wt, was_numpy = _matrix(W, "W")
        check_finite(Wt, "W")
        out = _polar_correction(Wt)
        return out.numpy() if was_numpy else out


def _retract(W: torch.Tensor, O: torch.Tensor, eta: float) -> torch.Tensor:
    """eq-orth-retraction as ``W + W(-ηsO + (s-1)OᵀO)``, O re-projected to skew (see Orthogonal.retract)."""
    O = _skew(O)
    r = math.hypot(1.0, eta)  # sqrt(1 + η²) without overflowing η² for huge η
    s = 1.0 / r
    c = -(eta / r) * (eta / (1.0 + r))  # c = s - 1 = -η²/(r(1+r)) without cancellation (small η) or overflow
    if W.ndim == 2:
        step = torch.addmm(O, O.mT, O, beta=-eta * s, alpha=c)  # (s-1)OᵀO - ηsO
        return torch.addmm(W, W, step)
    W3, O3 = W.flatten(0, -3), O.flatten(0, -3)
    step = torch.baddbmm(O3, O3.mT, O3, beta=-eta * s, alpha=c)
    return torch.baddbmm(W3, W3, step).reshape(W.shape)


def _polar_correction(W: torch.Tensor) -> torch.Tensor:
    """``W(3I - WᵀW)/2 = W + W(I - WᵀW)/2``, written so the small correction is added to W (fused matmuls)."""
    if W.ndim == 2:
        R = torch.addmm(_eye_like(W), W.mT, W, alpha=-1.0)
        return torch.addmm(W, W, R, alpha=0.5)
    W3 = W.flatten(0, -3)
    R = torch.baddbmm(_eye_like(W3).expand_as(W3), W3.mT, W3, alpha=-1.0)
    return torch.baddbmm(W3, W3, R, alpha=0.5).reshape(W.shape)
