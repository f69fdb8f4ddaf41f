"""How good a Stiefel direction is, on the problems met in training: optimality gaps against an exact reference.

For a point ``W`` of St(m, n) and an update ``U``, the optimal value is ``v* = max ⟨U, Φ⟩`` over tangent ``Φ``
with ``‖Φ‖₂ <= 1`` (eq-stiefel-problem). Every figure here is computed in float64 on the instance
``(W₆₄, U₆₄)``, ``W₆₄`` the polar factor of the recorded float32 ``W`` (a point to float64 rounding) and
``U₆₄ = U``:

* **feasible form** of a direction ``Φ`` (:func:`feasible`): its tangent part ``P_W(Φ)`` divided by its spectral
  norm, a feasible point of the problem whatever ``Φ`` was (a solver that is not exactly tangent, as the
  amortized dual ascent, is judged by what it would be worth made feasible; its tangent residual before is
  reported beside);
* **reference** (:func:`reference`): Newton to tangent residual 1e-10 with smoothing 1e-9, made feasible:
  ``p_ref = ⟨U, Φ_ref⟩``, a lower bound on ``v*``; its **certificate** is the dual value at its multiplier,
  ``d_ref = ‖U + W X_ref‖_*`` (thm-stiefel-reduction: every ``X`` gives an upper bound), so
  ``v* ∈ [p_ref, d_ref]`` and ``(d_ref - p_ref) / p_ref`` bounds the reference's own relative error;
* **relative gap** of a feasible ``Φ``: ``gap = 1 - ⟨U, Φ⟩ / p_ref``, the relative gap measured against the
  reference (the true relative gap ``1 - ⟨U, Φ⟩ / v*`` lies between ``gap`` and ``gap_max = 1 - ⟨U, Φ⟩ / d_ref``).

On slices small enough for the SDP (:func:`sdp_slice`), the reference is checked against
:func:`svmuon.stiefel_direction_sdp` (cvxpy, CLARABEL): ``c`` columns of ``(W, U)``, a point of St(m, c) with its
update, compressed exactly onto the ``2c``-dimensional column space of ``[W U]`` (the optimal direction lies there,
and the compression preserves the feasible set's value: the optimum of the slice is that of the compressed problem).

References: su2025stiefel, bernstein2025stiefel, su2025dual, diamond2016cvxpy.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["feasible", "value", "reference", "gap", "completion_row", "amortized_row", "sdp_slice", "sdp_row",
           "newton_costs"]

REFERENCE_TOL = 1e-10  # tangent residual of the reference (float64)
REFERENCE_SMOOTHING = 1e-9  # ε/σ̄ of the reference: the smoothed value is below the optimum by <= 0.31 k ε


def _sym(T: torch.Tensor) -> torch.Tensor:
    return (T + T.mT) / 2


def point64(W: torch.Tensor) -> torch.Tensor:
    """The nearest float64 point (the polar factor) of a float32 point of St(m, n), ``(..., m, n)``."""
    U, _, Vh = torch.linalg.svd(W.double(), full_matrices=False)
    return U @ Vh


def feasible(W: torch.Tensor, Phi: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
    """``(P_W(Φ) / ‖P_W(Φ)‖₂, facts)`` in float64 for a 2-D ``W`` (a float64 point) and ``Φ``; ``facts``: the tangent
    residual ``‖WᵀΦ + ΦᵀW‖_F`` and ``‖Φ‖₂`` before, and ``‖P_W(Φ)‖₂``."""
    P64 = Phi.double()
    T = W.mT @ P64
    tangent = P64 - W @ _sym(T)
    norm = float(torch.linalg.matrix_norm(tangent, ord=2))
    facts = {"residual_before": float(torch.linalg.matrix_norm(T + T.mT)),
             "spectral_norm_before": float(torch.linalg.matrix_norm(P64, ord=2)), "tangent_spectral_norm": norm}
    return (tangent / norm if norm > 0 else tangent), facts


def value(U: torch.Tensor, Phi: torch.Tensor) -> float:
    """``⟨U, Φ⟩`` in float64."""
    return float((U.double() * Phi.double()).sum())


def reference(W: torch.Tensor, U: torch.Tensor) -> dict[str, Any]:
    """The exact reference on one float64 instance (module docstring): lower bound ``p``, certificate ``d``."""
    from svmuon.orthogonal.stiefel import stiefel_direction

    sol = stiefel_direction(W, U, solver="newton", tol=REFERENCE_TOL, max_iter=200, smoothing=REFERENCE_SMOOTHING)
    Phi, _ = feasible(W, sol.Phi)
    p = value(U, Phi)
    d = float(torch.linalg.svdvals(U.double() + W @ sol.X.double()).sum())
    return {"Phi": Phi, "p": p, "d": d, "certificate": (d - p) / p if p > 0 else 0.0,
            "iterations": sol.iterations, "converged": bool(sol.converged), "residual": float(sol.residual)}


def gap(U: torch.Tensor, Phi: torch.Tensor, ref: dict[str, Any]) -> dict[str, float]:
    """``gap`` and ``gap_max`` of a feasible ``Φ`` against the reference ``ref`` (module docstring)."""
    a = value(U, Phi)
    if ref["p"] <= 0:
        return {"gap": 0.0, "gap_max": 0.0}
    return {"gap": 1.0 - a / ref["p"], "gap_max": 1.0 - a / ref["d"]}


def completion_row(W32: torch.Tensor, U32: torch.Tensor) -> dict[str, Any]:
    """The completion solver on one recorded matrix: its gap in float64 and in float32 (as the optimizer computes
    it), its own certificate ``gap`` beside the measured one, the reference's facts, and the gaps of Newton as the
    optimizer runs it (float32, its default tolerance) and of the completion by matrix products
    (``route="newton_schulz"`` with the optimizer's msign, float32), and of the completion computed in float32
    (``work_dtype=torch.float32``) as the optimizer's step runs it (its unchecked kernel: no division by
    ``‖Φ‖₂``, whose value before :func:`feasible` is recorded)."""
    from svmuon.orthogonal.stiefel import stiefel_direction
    from svmuon.orthogonal.stiefel.completion import completion_direction

    W, U = point64(W32), U32.double()
    ref = reference(W, U)
    sol = stiefel_direction(W, U)  # float64
    Phi, _ = feasible(W, sol.Phi)
    sol32 = stiefel_direction(W32, U32)  # float32, the optimizer's precision
    Phi32, facts32 = feasible(W, sol32.Phi)
    newton32 = stiefel_direction(W32, U32, solver="newton")
    PhiN, factsN = feasible(W, newton32.Phi)
    matmul32 = stiefel_direction(W32, U32, route="newton_schulz", orthogonalize=_optimizer_msign())
    PhiM, factsM = feasible(W, matmul32.Phi)
    low = completion_direction(W32[None], U32[None], work_dtype=torch.float32)
    PhiL, factsL = feasible(W, low.Phi[0])
    return {"reference_certificate": ref["certificate"], "reference_iterations": ref["iterations"],
            "reference_converged": ref["converged"], "reference_residual": ref["residual"],
            **gap(U, Phi, ref), "certificate": float(sol.gap),
            "float32": {**gap(U, Phi32, ref), "certificate": float(sol32.gap), "residual": facts32["residual_before"]},
            "newton_float32": {**gap(U, PhiN, ref), "iterations": newton32.iterations,
                               "residual": factsN["residual_before"]},
            "matmul_float32": {**gap(U, PhiM, ref), "residual": factsM["residual_before"],
                               "spectral_norm": factsM["spectral_norm_before"]},
            "work_float32": {**gap(U, PhiL, ref), "residual": factsL["residual_before"],
                                "spectral_norm": factsL["spectral_norm_before"], "certificate": float(low.gap[0])}}


def _optimizer_msign():
    """ManifoldMuon's default msign on the CPU (Polar Express, its default steps, float32), which the completion's
    ``route="newton_schulz"`` uses inside the optimizer."""
    from svmuon.orthogonal.msign import Orthogonalizer

    return Orthogonalizer("newton_schulz", ns_coefficients="polar_express")


def amortized_row(W32: torch.Tensor, U32: torch.Tensor, Phi32: torch.Tensor) -> dict[str, Any]:
    """The amortized dual ascent's direction ``Φ`` (as its optimizer returned it) on one recorded matrix: its tangent
    residual and norm before, and the gap of its feasible form."""
    W, U = point64(W32), U32.double()
    ref = reference(W, U)
    Phi, facts = feasible(W, Phi32)
    return {"reference_certificate": ref["certificate"], **gap(U, Phi, ref), **facts}


def sdp_slice(W: torch.Tensor, U: torch.Tensor, columns: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``columns`` evenly spaced columns of a float64 instance, compressed onto the column space of ``[W_s U_s]``:
    ``(QᵀW_s, QᵀU_s)``, ``(2c, c)`` (module docstring)."""
    n = W.shape[-1]
    cols = torch.linspace(0, n - 1, min(columns, n)).round().long().unique()
    Ws, Us = W[:, cols], U[:, cols]
    Q = torch.linalg.qr(torch.cat([Ws, Us], dim=1)).Q  # range(Q) ⊇ range([Ws Us]) even where that is rank-deficient
    return point64(Q.mT @ Ws), Q.mT @ Us


def sdp_row(W32: torch.Tensor, U32: torch.Tensor, columns: int) -> dict[str, Any]:
    """The SDP against the reference and the completion on one slice of a recorded matrix."""
    from svmuon.orthogonal.references import stiefel_direction_sdp
    from svmuon.orthogonal.stiefel import stiefel_direction

    W, U = sdp_slice(point64(W32), U32.double(), columns)
    _, v_sdp = stiefel_direction_sdp(W.numpy(), U.numpy())
    ref = reference(W, U)
    Phi, _ = feasible(W, stiefel_direction(W, U).Phi)
    completion = value(U, Phi)
    return {"shape": list(W.shape), "sdp_value": v_sdp, "reference_value": ref["p"],
            "reference_certificate": ref["certificate"], "reference_vs_sdp": 1.0 - ref["p"] / v_sdp,
            "completion_gap_vs_sdp": 1.0 - completion / v_sdp, "completion_gap": 1.0 - completion / ref["p"]}


def newton_costs(W32: torch.Tensor, U32: torch.Tensor, previous: tuple[torch.Tensor, torch.Tensor]) -> dict[str, Any]:
    """Newton as the optimizer runs it (float32, its default tolerance) on one recorded matrix: cold, and warm from
    the previous step's solution (its reduced multiplier per unit tangent norm, rescaled, as ``Stiefel.direction``
    does)."""
    from svmuon.orthogonal.stiefel import stiefel_direction

    prev = stiefel_direction(*previous, solver="newton")
    U64, W64 = U32.double(), W32.double()
    tangent_norm = torch.linalg.matrix_norm(U64 - W64 @ _sym(W64.mT @ U64))  # ‖P_W(U)‖_F
    out = {}
    for start, Y0 in (("cold", None), ("warm", prev.Y / prev.tangent_norm * tangent_norm)):
        sol = stiefel_direction(W32, U32, solver="newton", Y0=Y0)
        out[start] = {"iterations": sol.iterations, "cg_products": sol.cg_iterations,
                      "factorizations": sol.factorizations, "converged": bool(sol.converged),
                      "residual": float(sol.residual)}
    return out
