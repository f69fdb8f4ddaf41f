"""The Hessian of the smoothed reduced dual and the preconditioned CG for the damped Newton system (eq-stiefel-hessian).

In the eigenbasis of ``M = V diag(s²) Vᵀ`` with ``b = Vᵀ(Y + K)V``, the Hessian of ``f_ε`` applied to a symmetric ``h``
is ``½ c∘h - ½(T + Tᵀ)``, ``T = (d∘(hb + bᵀh)) bᵀ``, ``c_ij = 1/s_i + 1/s_j``, ``d_ij = 1/((s_i + s_j) s_i s_j)``;
``P = ½c`` is a diagonal majorant of it (``0 ⪯ ∇²f ⪯ P``, prop-stiefel-hessian) and the preconditioner.
"""

from __future__ import annotations

import torch

from svmuon.orthogonal.stiefel.reduction import _dot

__all__ = []


def _hessian_parts(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(c, d)`` with ``c_ij = 1/s_i + 1/s_j`` and ``d_ij = 1/((s_i + s_j) s_i s_j)`` (eq-stiefel-hessian)."""
    si, sj = s[..., :, None], s[..., None, :]
    return 1.0 / si + 1.0 / sj, 1.0 / ((si + sj) * si * sj)


def _hessian_vector(h: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor,
                    diag: torch.Tensor | None = None) -> torch.Tensor:
    """Hessian of ``f_ε`` applied to a symmetric ``h``, all in the eigenbasis of M (eq-stiefel-hessian):
    ``½ c∘h - ½ (T + Tᵀ)`` with ``E = hb + (hb)ᵀ``, ``F = d∘E``, ``T = F bᵀ``; ``diag`` replaces ``½c``
    (the damped system passes ``½(1 + μ)c``). Two n × n products and five elementwise passes."""
    E = h @ b
    F = (E + E.mT).mul_(d)
    T = F @ b.mT
    return torch.addcmul((T + T.mT).mul_(-0.5), 0.5 * c if diag is None else diag, h)


def _pcg(b: torch.Tensor, c: torch.Tensor, d: torch.Tensor, mu: torch.Tensor, rhs: torch.Tensor,
         active: torch.Tensor, forcing: torch.Tensor, max_cg: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Preconditioned CG for the damped Newton system ``(Hess + μP) x = rhs`` with ``P = ½c`` (the diagonal
    majorant of the Hessian, eq-stiefel-hessian), stopped when the preconditioned residual has dropped by
    ``forcing`` (per matrix). Returns ``(x, model, products)`` with ``model = -⟨rhs, x⟩ + ½⟨x, (Hess+μP)x⟩``
    (the damped quadratic model's change; ``-model`` is the predicted decrease)."""
    diag = (0.5 + 0.5 * mu) * c  # (1 + μ)P: the damped diagonal, which is also the preconditioner
    inv = 1.0 / diag
    hv = lambda h: _hessian_vector(h, b, c, d, diag)  # noqa: E731
    x, r = torch.zeros_like(rhs), rhs.clone()
    z = r * inv
    p, rz = z.clone(), _dot(r, z)
    target = forcing * forcing * rz
    done = ~active[..., None, None]
    products = 0
    for _ in range(max_cg):
        Ap = hv(p)
        products += 1
        pAp = _dot(p, Ap)
        bad = ~(pAp > 0)  # rounding at a (numerically) singular Hessian
        done = done | bad
        alpha = torch.where(done, torch.zeros_like(rz), rz / torch.where(bad, torch.ones_like(pAp), pAp))
        x, r = x + alpha * p, r - alpha * Ap
        z = r * inv
        rz_new = _dot(r, z)
        done = done | (rz_new <= target)
        if bool(done.all()):
            break
        p = z + torch.where(done, torch.zeros_like(rz), rz_new / torch.where(rz > 0, rz, torch.ones_like(rz))) * p
        rz = rz_new
    # CG keeps its residual orthogonal to the search directions, so the model value is -½⟨rhs, x⟩; where
    # CG made no progress at all, take the preconditioned gradient step (the fixed point's) instead
    model = -0.5 * _dot(rhs, x)
    stuck = (_dot(x, x) == 0) & active[..., None, None]
    if bool(stuck.any()):
        x = torch.where(stuck, rhs * inv, x)
        model = torch.where(stuck, -_dot(rhs, x) + 0.5 * _dot(x, hv(x)), model)
        products += 1
    return x, model[..., 0, 0], products


