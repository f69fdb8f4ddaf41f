"""The fast Stiefel direction: the rotation of Muon on the tangent gradient, then its best completion.

Two closed-form stages, no iteration, no host synchronisation (``solver="completion"``, the default of
:class:`~svmuon.orthogonal.stiefel.manifold.Stiefel`):

1. **Rotation.** At the orthogonal group's multiplier ``X = -[WᵀG]_sym`` the dual's direction is
   ``msign(G + WX) = msign(P_W(G))``, the polar factor of the tangent gradient (Muon applied to the Riemannian
   gradient). Its component in span(W) is ``Wᵀ msign(P_W(G)) = K M₀^{-1/2}`` with ``M₀ = KᵀK + C`` (one n × n
   eigendecomposition); its skew part ``Ω₀`` has ``‖Ω₀‖₂ <= 1``.
2. **Completion.** The best normal part for that rotation, ``G⊥ N(Ω₀)`` (prop-stiefel-primal; one more n × n
   eigendecomposition), so ``Φ = WΩ₀ + G⊥ N(Ω₀)`` is tangent with ``‖Φ‖₂ <= 1`` by construction.

It is exact in both limits: on the orthogonal group (``C = 0``: ``Φ = W msign(K)``, eq-orth-direction) and for a
gradient without rotational part (``K = 0``: ``Φ = msign(G⊥)``). In between it is a lower bound on the optimum;
``f(Y = 0) = tr(M₀^{1/2})``, an upper bound, comes for free from stage 1 and is returned as the certificate
``gap``. Measured on gradients recorded from real training (the chapter "The Stiefel case", ``python -m
svmuon.bench stiefel``) the value is within 0.14-0.64 % of the optimum at the benchmark's sampled steps
(digits, text and text-wide, whose 1024 × 256 layers give the largest), 1.0 % on the chapter's first digits
gradient of ``W₁``;
random rank-one gradients, a mixed case far from both exact limits, can be much farther (measured in float64
against the SDP, 40 draws on each of St(8, 3), St(12, 5), St(6, 4) and St(10, 2): 0.6 % at the median, up to 13 %
on St(10, 2), whose own median is 5.8 %).

Cost: two n × n eigendecompositions and one Cholesky factorisation in float64, six m × n × n products (five of them
in float64, so that ``G⊥`` is orthogonal to range(W) and agrees with its Gram matrix to float64 rounding: ``N`` can
have large entries where ``G⊥`` is nearly rank-deficient, and float32 rounding there would become a tangent
residual: ``reduction._reduce_consistent``). ``work_dtype=torch.float32`` (``_low_precision``) does all of it in
float32: cheaper, and it pays in value for the shift that keeps it feasible.
"""

from __future__ import annotations

import torch

from svmuon.orthogonal.stiefel.reduction import (
    RANK_RTOL,
    WORK_DTYPE,
    StiefelSolution,
    _addmm,
    _complete,
    _mm,
    _pinv_powers,
    _real,
    _reduce_consistent,
    _residual,
    _skew,
    _sym,
    _tangent_part,
)

__all__ = ["completion_direction", "completion_direction_matmul", "rotation_start"]

# ‖Ω₀‖₂ <= 1 holds exactly for K M₀^{-1/2}; rounding can exceed it by a few ulps, which would make D = I + Ω²
# slightly indefinite. Shrinking by 8 n u keeps D ⪰ 0 and costs a relative 1e-13 of value.
_SHRINK_ULPS = 8.0


def rotation_start(K: torch.Tensor, C: torch.Tensor, rtol: float = RANK_RTOL) -> tuple[torch.Tensor, torch.Tensor]:
    """``(Ω₀, f₀)``: ``Ω₀ = [K M₀^{+1/2}]_skew``, ``M₀ = C - K²`` (stage 1), and the dual value
    ``f₀ = tr(M₀^{1/2})`` at ``Y = 0``, an upper bound on the optimal value. In the dtype of ``K`` and ``C``
    (float64; float32 for ``work_dtype=torch.float32``), batched ``(..., n, n)`` (``eigh`` reads one triangle
    of ``C + KᵀK``); eigenvalues below ``rtol · λ_max`` count as zero."""
    n = K.shape[-1]
    M0 = _addmm(C, K.mT, K)
    lam, V = torch.linalg.eigh(M0)
    root, inv_root = _pinv_powers(lam, rtol)
    Z = _mm(_mm(K, V) * inv_root[..., None, :], V.mT)
    Omega = (Z - Z.mT) * (0.5 * (1.0 - _SHRINK_ULPS * n * torch.finfo(K.dtype).eps))
    return Omega, root.sum(-1)


def completion_direction(W: torch.Tensor, G: torch.Tensor, *, exact_residual: bool = False,
                         work_dtype: torch.dtype = WORK_DTYPE) -> StiefelSolution:
    """The unchecked kernel of ``solver="completion"`` for tall ``(..., m, n)`` batches (module docstring).

    ``W`` must be a point to the rounding of its dtype, ``G`` finite and of ``W``'s dtype (float32 or float64).
    ``exact_residual`` (the public path) projects ``Φ`` onto the tangent space, measures ``‖WᵀΦ + ΦᵀW‖_F`` and
    divides ``Φ`` by ``‖Φ‖₂`` where rounding left it above 1 (four more products); ``X`` is then the multiplier of
    stage 1 (``-[WᵀG]_sym``) and ``Y = 0``. Without it (the optimizer's path: its retraction is exact for any ``Φ``,
    which the construction makes tangent up to rounding) ``X``, ``Y`` and ``residual`` are ``None``.
    ``work_dtype=torch.float32``: every stage in float32 (``_low_precision``; float32 inputs only, which the
    dispatcher checks).
    """
    if work_dtype == torch.float32:
        Phi, value, dual0, A, tangent_norm = _low_precision(W, G)
        S, defect = (_sym(A) if exact_residual else None), None
    else:
        red = _reduce_consistent(W, G)
        Omega, dual0 = rotation_start(red.K, red.C)
        comp = _complete(red.K, red.C, Omega)
        Phi = W @ Omega.to(G.dtype) + (red.Gp @ comp.N).to(G.dtype)
        value, S, tangent_norm, defect = comp.value, red.S, red.tangent_norm, red.defect
    dt = G.dtype
    # the relative gap of the certificate; 0 for U = 0 (both values 0), and large (up to inf), not hidden, where
    # rounding left the value at or below 0 with a positive dual value (a diagnostic: no check reads it)
    gap = (dual0 - value).clamp_min(0.0) / value.clamp_min(torch.finfo(value.dtype).tiny)
    if exact_residual:  # the public path: tangent and ‖Φ‖₂ <= 1 exactly, at the price of three more products. A
        # gradient whose tangent part is rounding noise (G = W(S + Sᵀ)) leaves G⊥ as noise with a component along W
        # that N amplifies (measured: residual 2.0 in float64), hence the projection; eigh's relative error on T's
        # small eigenvalues, amplified by N, can leave ‖Φ‖₂² - 1 at ~1e-11 in float64 (measured), hence the division
        Phi = _tangent_part(W, Phi)
        top = torch.linalg.eigvalsh(_sym((Phi.mT @ Phi).to(WORK_DTYPE))).amax(dim=-1).clamp_min(1.0)
        Phi = Phi / torch.sqrt(top).to(dt)[..., None, None]
        residual = _residual(W, Phi)
    else:  # the optimizer's path: no residual, and no multipliers (it reads Φ, the tangent norm and the gap only)
        return StiefelSolution(Phi, None, None, 0, True, 0, 0, 2, tangent_norm, None, gap, defect)
    # the multipliers, the tangent norm and the certificate in the work dtype: the public entry point converts them
    # factorizations: the two eigh of either route (the Cholesky factorisation is not counted)
    return StiefelSolution(Phi, -S, residual, 0, True, 0, 0, 2, tangent_norm, torch.zeros_like(S), gap, defect)


#: the float32 completion's Gram shift per unit tr(C) and row: ``δ = m u tr(C)`` covers the rounding of the float32
#: Gram matrix, ``|fl(G⊥ᵀG⊥) - G⊥ᵀG⊥| <= γ_m |G⊥|ᵀ|G⊥|`` (γ_m ≈ m u), whose spectral norm is at most γ_m ‖G⊥‖_F²
_LOW_SHIFT = 2.0 ** -24
#: its rank threshold: eigenvalues below 45 ulps of λ_max count as zero, the float64 RANK_RTOL's 45 ulps in float32
_LOW_RTOL = 45 * 2.0 ** -23


def _low_precision(W: torch.Tensor, G: torch.Tensor) -> tuple:
    """``(Φ, value, f₀, WᵀG, ‖P_W(G)‖_F)`` of the completion computed in float32 throughout: every product and
    both eigendecompositions in float32. The Gram shift must cover the float32 Gram's rounding (``_LOW_SHIFT``,
    feasibility), which costs value wherever ``G⊥`` is small, and ``G⊥`` is not orthogonal to range(W) beyond
    float32 rounding, so the normal part is projected once more (two products) instead of the float64 reduction's
    Neumann correction. Written for the optimizer's hot path: batched products called directly on ``(k, m, n)``
    (the matrices of any leading shape flattened), the symmetrisations ``eigh`` and Cholesky do not need left out
    (both read one triangle), the last projection and the rotation in one product.
    Measured on recorded training gradients (the chapter "The Stiefel case", ``python -m svmuon.bench stiefel``)."""
    lead, (m, n) = W.shape[:-2], W.shape[-2:]
    W32, G32 = W.to(torch.float32).reshape(-1, m, n), G.to(torch.float32).reshape(-1, m, n)
    A = torch.bmm(W32.mT, G32)
    Gp = torch.baddbmm(G32, W32, A, alpha=-1.0)
    C = torch.bmm(Gp.mT, Gp)
    K = _skew(A)
    trC = C.diagonal(dim1=-2, dim2=-1).sum(-1)
    Omega, dual0 = rotation_start(K, C, _LOW_RTOL)
    comp = _complete(K, C, Omega, shift=_LOW_SHIFT * m, rtol=_LOW_RTOL, trace=trC)
    X = torch.bmm(Gp, comp.N)
    # Φ = X - W WᵀX + WΩ: the normal part orthogonal to range(W) to float32 rounding, and the rotation, in one product
    Phi = torch.baddbmm(X, W32, Omega - torch.bmm(W32.mT, X)).to(G.dtype)
    tangent_norm = torch.sqrt((K * K).sum(dim=(-2, -1)) + trC)
    return (Phi.reshape(G.shape), comp.value.reshape(lead), dual0.reshape(lead), A.reshape(*lead, n, n),
            tangent_norm.reshape(lead))


def _sqrt_from_below(D: torch.Tensor, steps: int) -> torch.Tensor:
    """``S = Y_k`` of the coupled Newton–Schulz square-root iteration ``T = (3I - ZY)/2, Y <- YT, Z <- TZ`` from
    ``Y = D``, ``Z = I``, for symmetric ``0 ⪯ D ⪯ I``. On each eigenvalue ``x`` it gives ``√(x u_k)`` with
    ``u_{k+1} = u_k(3 - u_k)²/4``, ``u_0 = x``, which increases to 1 and never exceeds it: so ``S² ⪯ D`` for every
    ``k`` (the completion stays feasible) and ``S → D^{1/2}``, fast where ``x`` is not small (``u`` grows by 9/4 per
    step near 0)."""
    eye = torch.eye(D.shape[-1], dtype=D.dtype, device=D.device)
    Y, Z = D, eye.expand_as(D)
    for _ in range(steps):
        T = 0.5 * (3 * eye - Z @ Y)
        Y, Z = Y @ T, T @ Z
    return _sym(Y)


def completion_direction_matmul(W: torch.Tensor, G: torch.Tensor, orthogonalize, *, sqrt_steps: int = 12  # noqa: ANN001
                                ) -> StiefelSolution:
    """The completion by matrix products only (``route="newton_schulz"``: no eigendecomposition, so no host
    synchronisation on an accelerator, where ``torch.linalg.eigh`` synchronises), feasible by construction:

    * ``Ω₀ = [Wᵀ Q]_skew / h`` with ``Q = orthogonalize(P_W(G))`` and ``h = max(1, σ_max)`` of the schedule's output
      band (``orthogonalize.sigma_range``), so ``‖Ω₀‖₂ <= 1`` whatever the msign's accuracy;
    * ``S`` with ``S² ⪯ D = I + Ω₀²`` (``_sqrt_from_below``), and the normal part ``E = orthogonalize(G⊥S) S / h``,
      so ``EᵀE ⪯ S² ⪯ D``: ``Φ = WΩ₀ + E`` has ``‖Φ‖₂ <= 1`` and ``WᵀE = 0`` up to rounding.

    Its value is below the eigendecomposition route's by what the two approximate msigns and ``S`` lose (measured
    in ``tests/test_stiefel_completion.py``). Cost: two msigns of ``m × n`` matrices (Muon's kernel) and about
    ``3 sqrt_steps + 4`` n × n products. ``X`` and ``Y`` as :func:`completion_direction`; no certificate (``gap``
    is ``None``)."""
    dt = G.dtype
    A = W.mT @ G
    Gp = G - W @ A
    K = _skew(A)
    high = max(1.0, float(getattr(orthogonalize, "sigma_range", (0.0, 1.0))[1]))
    Q = orthogonalize(W @ K + Gp).to(dt)
    Omega = _skew(W.mT @ Q) / high
    D = _sym(torch.eye(Omega.shape[-1], dtype=dt, device=W.device) + Omega @ Omega)
    S = _sqrt_from_below(D, sqrt_steps)
    E = orthogonalize(Gp @ S).to(dt) @ S / high
    Phi = W @ Omega + E
    tangent_norm = torch.sqrt(torch.linalg.matrix_norm(K) ** 2 + torch.linalg.matrix_norm(Gp) ** 2).to(WORK_DTYPE)
    zero = torch.zeros(W.shape[:-2], dtype=_real(dt), device=W.device)
    S64 = _sym(A.to(WORK_DTYPE))
    return StiefelSolution(Phi, -S64, zero, 0, True, 2, 0, 0, tangent_norm, torch.zeros_like(S64), None)

