"""The reduced problem of the Stiefel direction: what every solver of this package shares.

On ``St(m, n) = {W : WᵀW = I_n}`` (m >= n; the source articles write St(n, m)) the unit steepest-ascent
direction under the spectral norm solves (book equation ``eq-stiefel-problem``)::

    max tr(GᵀΦ)   s.t.   ‖Φ‖₂ <= 1,   WᵀΦ + ΦᵀW = 0.

With ``A = WᵀG``, ``K = [A]_skew``, ``G⊥ = G - WA``, ``C = G⊥ᵀG⊥`` (all n × n but ``G⊥``):

* **the dual** (thm-stiefel-reduction): ``min over symmetric Y of f(Y) = tr(M^{1/2})``,
  ``M = (Y + K)ᵀ(Y + K) + C``, with ``Y = [A]_sym + X`` for the multiplier ``X`` of ``‖G + WX‖_*``; every
  ``f(Y)`` is an upper bound on the optimal value;
* **the primal in the rotation** (prop-stiefel-primal): every tangent ``Φ = WΩ + E`` (``Ω`` skew, ``WᵀE = 0``)
  with ``‖Φ‖₂ <= 1`` has ``EᵀE ⪯ D = I + Ω²``, and the best ``E`` for a given ``Ω`` is known in closed form:
  ``E = G⊥ N(Ω)`` with ``N = D Rᵀ T^{+3/2} R D``, ``T = R D Rᵀ``, ``RᵀR = C``, of value
  ``p(Ω) = ⟨K, Ω⟩ + tr(T^{1/2})``, a lower bound on the optimal value, attained at the optimal ``Ω``. The
  direction ``Φ(Ω) = WΩ + G⊥N(Ω)`` is tangent and has ``‖Φ‖₂ <= 1`` for *every* skew ``Ω`` with
  ``‖Ω‖₂ <= 1`` (``ΦᵀΦ = I - D + D^{1/2} P D^{1/2}`` with ``P`` an orthogonal projector), which is what makes
  cheap solvers safe: whatever ``Ω`` they reach, the step is feasible and its optimality gap is bounded by
  ``f(Y) - p(Ω)`` for any ``Y``.

Everything here is batched over leading dimensions; the n × n work runs in float64 (``WORK_DTYPE``),
cheap next to the m × n products.

References:
    su2025stiefel, bernstein2025stiefel, absil2008optimization, edelman1998geometry; the book's chapter
    "The Stiefel case" (thm-stiefel-reduction, prop-stiefel-primal).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from svmuon.orthogonal.base import _max_abs

__all__ = ["WORK_DTYPE", "StiefelSolution"]

WORK_DTYPE = torch.float64  # the n × n solve; its cost is small next to the m × n products


@dataclass
class StiefelSolution:
    """What a Stiefel direction solver returns (tensors, or NumPy arrays for NumPy input).

    Attributes:
        Phi: ``(..., m, n)``, the direction (ascent: descend along ``-Phi``), dtype of ``G``.
        X: ``(..., n, n)`` symmetric multiplier with ``Phi ≈ msign(G + WX)`` (the dual point the solver ends at),
            float64 whatever the dtype of ``G`` from :func:`~svmuon.orthogonal.stiefel.api.stiefel_direction`
            (the unchecked kernels leave ``X``, ``Y``, ``tangent_norm`` and ``gap`` in their work dtype: float32
            for ``work_dtype=torch.float32``).
        residual: ``(...)``, ``‖WᵀΦ + ΦᵀW‖_F`` of the returned ``Phi`` (the tangent residual). ``X``, ``Y`` and
            ``residual`` are ``None`` from the completion's unchecked kernel on the optimizer's path
            (``exact_residual=False``), which reads neither.
        iterations: outer iterations run (the most over the batch; 0 for the closed-form ``"completion"``).
        converged: every residual <= ``tol`` (``"completion"``: always feasible, so ``True``).
        msign_calls: calls of ``orthogonalize`` (0 for the reduced solvers).
        cg_iterations: Hessian-vector products (``"newton"``), else 0.
        factorizations: n × n eigendecompositions or SVDs.
        tangent_norm: ``(...)``, ``‖P_W(G)‖_F``, where the solver forms it on the way, else ``None``.
        Y: ``(..., n, n)``, the reduced multiplier ``[WᵀG]_sym + X`` where the solver forms it, else ``None``
            (the warm start of the next optimizer step for ``"newton"``: its optimum depends on the tangent
            part of ``G`` only).
        gap: ``(...)``, an upper bound on the relative optimality gap ``(f - ⟨G, Φ⟩) / ⟨G, Φ⟩`` from a dual
            value ``f`` the solver has at hand (``"completion"``: ``f(Y = 0)``), else ``None``; a certificate,
            usually loose (on gradients recorded from training the true gap is 7-17 times smaller).
        defect: ``(...)``, ``max|WᵀW - I|`` of the point in float64 where the solver formed ``WᵀW`` (the float64
            completion's reduction), else ``None``: the optimizer's check of the point before the step reads it.
    """

    Phi: Any
    X: Any
    residual: Any
    iterations: int
    converged: bool
    msign_calls: int = 0
    cg_iterations: int = 0
    factorizations: int = 0
    tangent_norm: Any = None
    Y: Any = None
    gap: Any = None
    defect: Any = None


# -- small kernels --------------------------------------------------------------------------------------------
def _sym(T: torch.Tensor) -> torch.Tensor:
    return (T + T.mT) / 2


def _skew(T: torch.Tensor) -> torch.Tensor:
    return (T - T.mT) / 2


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Frobenius inner product per matrix, shape ``(..., 1, 1)``."""
    return (a * b).sum(dim=(-2, -1), keepdim=True)


def _addmm(C: torch.Tensor, A: torch.Tensor, B: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    """``C + alpha·A@B``: one fused ``baddbmm`` for ``(k, ·, ·)`` batches, a product and a sum otherwise."""
    if A.ndim == 3 and B.ndim == 3 and C.ndim == 3:
        return torch.baddbmm(C, A, B, alpha=alpha)
    return C + alpha * (A @ B)


def _mm(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """``A @ B``; ``bmm`` itself for two ``(k, ·, ·)`` batches (``matmul`` adds views and checks around it, a few
    microseconds a call that the optimizer's step pays a dozen times)."""
    return torch.bmm(A, B) if A.ndim == 3 and B.ndim == 3 else A @ B


def _eye(T: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    return torch.eye(T.shape[-1], dtype=dtype or T.dtype, device=T.device)


def _tangent_part(W: torch.Tensor, Z: torch.Tensor) -> torch.Tensor:
    """``P_W(Z) = Z - W [WᵀZ]_sym``, the projection onto the tangent space at ``W`` (two products)."""
    if W.ndim == 3 and Z.ndim == 3 and W.shape[0] == Z.shape[0]:  # the optimizer's batches: bmm itself, fused
        A = torch.bmm(W.mT, Z)
        return torch.baddbmm(Z, W, A + A.mT, alpha=-0.5)  # the halving of [A]_sym in alpha: exact, one pass less
    return Z - W @ _sym(W.mT @ Z)


def _residual(W: torch.Tensor, Phi: torch.Tensor) -> torch.Tensor:
    """``‖WᵀΦ + ΦᵀW‖_F`` per matrix (the tangent residual), accumulated in at least float32."""
    T = W.mT @ Phi
    T = T if T.dtype in (torch.float32, torch.float64) else T.float()
    return torch.linalg.matrix_norm(T + T.mT)


def _real(dtype: torch.dtype) -> torch.dtype:
    return dtype if dtype in (torch.float32, torch.float64) else torch.float32


def _record(trace: list | None, t0: float, residual: torch.Tensor, iteration: int, msign_calls: int,
            factorizations: int, products: int) -> None:
    """Append one point of a convergence history (only when the caller asked for one: it synchronises)."""
    if trace is not None:
        trace.append({"iteration": iteration, "seconds": time.perf_counter() - t0,
                      "residual": float(residual.max()), "msign_calls": msign_calls,
                      "factorizations": factorizations, "cg_products": products})


# -- the dual (thm-stiefel-reduction) ------------------------------------------------------------------------
class _Reduced(NamedTuple):
    """The reduction of ``(W, G)`` (thm-stiefel-reduction), n × n parts in float64."""

    S: torch.Tensor  # [A]_sym
    K: torch.Tensor  # [A]_skew
    C: torch.Tensor  # G⊥ᵀG⊥
    Gp: torch.Tensor  # G⊥ = G - WA, (..., m, n), dtype of G
    sigma2: torch.Tensor  # ‖P_W(G)‖_F² / n, (..., 1, 1): the scale σ̄² of the problem
    tangent_norm: torch.Tensor  # ‖P_W(G)‖_F = (‖K‖_F² + ‖G⊥‖_F²)^{1/2}, (...)
    defect: torch.Tensor | None = None  # max|WᵀW - I| in float64, (...), where the reduction formed WᵀW


def _reduce(W: torch.Tensor, G: torch.Tensor) -> _Reduced:
    """Three m × n × n products: ``A = WᵀG``, ``G⊥ = G - WA`` and ``C = G⊥ᵀG⊥``. ``G⊥`` is formed
    explicitly (not ``C = GᵀG - AᵀA``) so that a gradient almost normal to the manifold keeps an accurate
    tangent part (the optimizer's eps rule reads ``‖P_W(G)‖_F``)."""
    A = W.mT @ G
    Gp = G - W @ A
    return _reduced(W, A.to(WORK_DTYPE), Gp, _sym((Gp.mT @ Gp).to(WORK_DTYPE)))


def _reduce_consistent(W: torch.Tensor, G: torch.Tensor) -> _Reduced:
    """The reduction in float64 with ``WᵀG⊥ = 0`` to float64 rounding even for a point that is orthonormal only
    to its own dtype's rounding (a float32 ``W``: ``WᵀW - I ~ 1e-7``): ``G⊥ = G - W (WᵀW)⁻¹ WᵀG``, the exact
    complement of range(W), and ``C`` its float64 Gram matrix. What the completion needs: it multiplies ``G⊥`` by a
    matrix ``N`` whose entries can be ~1e6 where ``G⊥`` is nearly rank-deficient, so any component of ``G⊥`` along
    W, or any inconsistency between ``G⊥`` and ``C``, would be amplified into a tangent residual (measured with
    ``G - WA`` in float32 on St(10, 9): residual 1.04).

    ``(WᵀW)⁻¹ A`` is the Neumann series ``A - E(A - E(A - EA))``, ``E = WᵀW - I``, whose error ``‖E‖⁴‖A‖`` is
    below float64 rounding for every point the package accepts (``‖E‖ <= √eps`` of float32, ``‖E‖⁴ <= 1.4e-14``;
    an optimizer's point, ``‖E‖ ~ 1e-6``: 1e-24): three n × n products instead of a Cholesky solve, which costs
    five times as much at n = 64. Four float64 m × n × n products."""
    W64, G64 = W.to(WORK_DTYPE), G.to(WORK_DTYPE)
    A = W64.mT @ G64
    E = W64.mT @ W64 - _eye(A)
    X = A
    for _ in range(3):  # X <- A - E X: A - EA, then A - E(A - EA), then the third term
        X = _addmm(A, E, X, alpha=-1.0)
    Gp = _addmm(G64, W64, X, alpha=-1.0)
    return _reduced(W, A, Gp, _sym(Gp.mT @ Gp))._replace(defect=_max_abs(E))


def _reduced(W: torch.Tensor, A: torch.Tensor, Gp: torch.Tensor, C: torch.Tensor) -> _Reduced:
    n = W.shape[-1]
    K = _skew(A)
    trC = C.diagonal(dim1=-2, dim2=-1).sum(-1)
    tangent2 = _dot(K, K)[..., 0, 0] + trC
    # the scale of the problem is that of P_W(G): the normal part of G only shifts the multiplier
    sigma2 = tangent2[..., None, None] / n
    return _Reduced(_sym(A), K, C, Gp, sigma2, torch.sqrt(tangent2))


def _exact_factor(red: _Reduced) -> torch.Tensor:
    """``R`` with ``RᵀR = G⊥ᵀG⊥`` from a QR of ``G⊥`` (absolute accuracy ``u‖G‖``, not ``u‖G‖²``)."""
    return torch.linalg.qr(red.Gp.to(WORK_DTYPE), mode="r").R


class _Spectrum(NamedTuple):
    V: torch.Tensor  # eigenvectors of M, (..., n, n)
    lam: torch.Tensor  # eigenvalues of M (>= 0), (..., n)
    s: torch.Tensor  # sqrt(lam + eps²), (..., n)


def _spectrum(Y: torch.Tensor, red: _Reduced, eps2: torch.Tensor, R: torch.Tensor | None) -> _Spectrum:
    """Eigen-decomposition of ``M = (Y+K)ᵀ(Y+K) + C``: by ``eigh`` of M, or (``R`` given, ``RᵀR = C``) by the
    SVD of the stacked ``[Y + K; R]``, which resolves small eigenvalues to absolute accuracy ``u‖G‖`` instead
    of ``u‖G‖²`` (needed near a singular optimum, where ``s ≈ ε``)."""
    B = Y + red.K
    if R is None:
        lam, V = torch.linalg.eigh(B.mT @ B + red.C)
    else:
        _, sv, Vh = torch.linalg.svd(torch.cat([B, R], dim=-2), full_matrices=False)
        lam, V = sv * sv, Vh.mT
    lam = lam.clamp_min(0.0)
    return _Spectrum(V, lam, torch.sqrt(lam + eps2[..., 0]))


def _assemble(W: torch.Tensor, G: torch.Tensor, X: torch.Tensor, sp: _Spectrum) -> torch.Tensor:
    """``Φ = (G + WX)(M + ε²I)^{-1/2}`` from the spectrum of ``M`` (two m × n × n products)."""
    Sinv = (sp.V / sp.s[..., None, :]) @ sp.V.mT  # (M + ε²I)^{-1/2}
    return G @ Sinv.to(G.dtype) + W @ (X @ Sinv).to(G.dtype)


# -- the primal in the rotation Ω (prop-stiefel-primal) ------------------------------------------------------
RANK_RTOL = 1e-14  # eigenvalues below this fraction of the largest count as zero (float64: ~45 ulps of λ_max)


def _pinv_powers(lam: torch.Tensor, rtol: float = RANK_RTOL) -> tuple[torch.Tensor, torch.Tensor]:
    """``(λ^{1/2}, λ^{-1/2})`` of eigenvalues ``(..., n)`` in ``eigh``'s ascending order, with those <=
    ``max(rtol · λ_max, tiny)`` (all, if ``λ_max <= 0``) set to 0 in both: the square root and the pseudo-inverse
    square root of a PSD matrix. NaN eigenvalues (from a NaN matrix, whose eigenvectors are NaN too) give 0 here
    and NaN in everything built from the eigenvectors."""
    inv_root = _pinv_rsqrt(lam, rtol)
    return lam * inv_root, inv_root  # λ · λ^{-1/2} = λ^{1/2}, and 0 where dropped


def _pinv_rsqrt(lam: torch.Tensor, rtol: float = RANK_RTOL) -> torch.Tensor:
    """The ``λ^{-1/2}`` of :func:`_pinv_powers` alone (three element-wise passes over ``(..., n)``)."""
    cut = (rtol * lam[..., -1:]).clamp_min(torch.finfo(lam.dtype).tiny)  # > 0: rsqrt is only read where λ > cut
    return torch.where(lam > cut, torch.rsqrt(lam), 0.0)


def _gram_factor(C: torch.Tensor, shift: float | None = None, trace: torch.Tensor | None = None) -> torch.Tensor:
    """An upper-triangular ``R`` with ``RᵀR = C + δI``, ``δ = shift · tr(C)`` (Cholesky; ``R = 0`` for ``C = 0``).

    Default shift (float64): ``2⁻⁴⁴ max(1, n/64)``, four times the rounding floor ``n u ‖C‖`` of a float64 Gram
    matrix (and it keeps a singular ``C``, e.g. from a gradient with zero columns, factorizable). Using
    ``C + δI ⪰ C`` keeps the completion feasible (``N C N ⪯ N (C + δI) N ⪯ D``) and costs at most ``√δ`` of value
    per null direction of ``C`` (``2.4e-7 ‖G⊥‖_F``). The float32 completion passes a larger one
    (``completion._LOW_SHIFT``), and ``trace`` (``tr C``, ``(...)``) where it has it. Where ``C + δI`` is not
    positive definite (``C = 0`` among them) ``R = 0``."""
    n = C.shape[-1]
    tr = C.diagonal(dim1=-2, dim2=-1).sum(-1) if trace is None else trace
    shifted = C.clone()
    delta = tr * ((2.0 ** -44) * max(1.0, n / 64) if shift is None else shift)
    shifted.diagonal(dim1=-2, dim2=-1).add_(delta[..., None])
    L, info = torch.linalg.cholesky_ex(shifted)
    ok = (info == 0) & (tr > 0)  # C = 0: not left to the backend's zero-pivot test (unused parameters are common)
    return torch.where(ok[..., None, None], L, 0.0).mT  # where on L, not on its transpose: a contiguous read


class _Completion(NamedTuple):
    N: torch.Tensor  # (..., n, n), the normal part is G⊥ N
    value: torch.Tensor  # (...), p(Ω) = ⟨K, Ω⟩ + tr(C N): the value ⟨G, Φ(Ω)⟩ exactly


def _complete(K: torch.Tensor, C: torch.Tensor, Omega: torch.Tensor, *, shift: float | None = None,
              rtol: float = RANK_RTOL, trace: torch.Tensor | None = None) -> _Completion:
    """The best normal part for the rotation ``Ω`` (prop-stiefel-primal): ``N = D Rᵀ T^{+3/2} R D`` with
    ``D = I + Ω²``, ``T = R D Rᵀ``, ``RᵀR = C``; one n × n eigendecomposition and four n × n products, in the
    dtype of the inputs (float64; the float32 completion passes its own ``shift`` and ``rtol``). With
    ``T = QτQᵀ`` and ``B = QᵀRD``: ``N = Bᵀ τ^{+3/2} B``. (``eigh`` reads one triangle, so the products
    that are symmetric up to rounding are not symmetrised first.)"""
    D = _mm(Omega, Omega)
    D.diagonal(dim1=-2, dim2=-1).add_(1.0)
    R = _gram_factor(C, shift, trace)
    RD = _mm(R, D)
    tau, Q = torch.linalg.eigh(_mm(RD, R.mT))
    inv_root = _pinv_rsqrt(tau, rtol)
    B = _mm(Q.mT, RD)
    N = _sym(_mm(B.mT * (inv_root * inv_root * inv_root)[..., None, :], B))
    value = (K * Omega).sum(dim=(-2, -1)) + (C * N).sum(dim=(-2, -1))
    return _Completion(N, value)
