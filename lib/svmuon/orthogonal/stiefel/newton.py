"""The book's exact solver: damped Newton–CG on the smoothed reduced dual, with continuation in ε.

The smoothed dual ``f_ε(Y) = tr((M + ε²I)^{1/2})`` (the nuclear norm of ``[G + WX; εI]``) has an exactly tangent
``Φ_ε = (G + WX)(M + ε²I)^{-1/2}`` at every stationary point, with tangent residual ``2‖∇f_ε(Y)‖_F`` elsewhere and
a value below the optimum by at most ``0.31 k ε`` (eq-stiefel-smoothing-gap). This module holds its Hessian
(eq-stiefel-hessian), the preconditioned CG for the damped Newton system, and the outer iteration:

* Newton step: PCG on ``(Hess + μP)x = -∇f_ε`` in the eigenbasis of ``M`` (``_pcg``); ``μ`` is a
  Levenberg–Marquardt trust parameter (ratio ``ρ`` of actual to predicted decrease: accept if ``ρ > 1e-4``; ``μ``
  shrinks by 4 if ``ρ > 0.75``, grows to ``max(4μ, 0.01)`` if ``ρ < 0.25``).
* Continuation where the start (or, once, a later iterate) is near a singular ``M`` (``√λ_min < 0.1 σ̄``): ``ε``
  starts at ``σ̄ · clamp(r, smoothing, 1e-2)`` (``r`` the residual then) and drops by 100 whenever the residual is
  below ``ε/σ̄``, down to ``smoothing · σ̄``. Elsewhere ``ε = smoothing · σ̄`` throughout.
* Stop: residual <= ``tol`` at the final ``ε``, or ``max_iter`` outer iterations.

A float32 problem whose ``M`` is near-singular is solved in float64 (``_in_float64``). Each iteration reads
its convergence flags on the host; this solver is the exact reference, not the hot path.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch

from svmuon.orthogonal.stiefel.hessian import _hessian_parts, _hessian_vector, _pcg  # noqa: F401
from svmuon.orthogonal.stiefel.reduction import (
    WORK_DTYPE,
    StiefelSolution,
    _assemble,
    _exact_factor,
    _real,
    _record,
    _reduce,
    _Reduced,
    _residual,
    _Spectrum,
    _spectrum,
    _sym,
)

__all__ = ["newton"]

_EPS_START = 1e-2  # continuation: the largest starting ε/σ̄
_EPS_SHRINK = 100.0  # continuation: ε drops by this factor per stage


def _start(red: _Reduced, X0: torch.Tensor | None, warm: torch.Tensor | None,
           Y0: torch.Tensor | None = None) -> torch.Tensor:
    """``Y₀`` (given), or ``[A]_sym + X0``, where warm (default everywhere if one is given), else ``0``
    (``X = -[A]_sym``, the orthogonal group's multiplier)."""
    if Y0 is not None:
        Y = Y0.to(WORK_DTYPE)
    elif X0 is None:
        return torch.zeros_like(red.S)
    else:
        Y = red.S + X0.to(WORK_DTYPE)
    return Y if warm is None else torch.where(warm[..., None, None], Y, torch.zeros_like(Y))


def _where(mask: torch.Tensor, new: _Spectrum, old: _Spectrum) -> _Spectrum:
    return _Spectrum(*(torch.where(mask[(...,) + (None,) * (a.dim() - mask.dim())], a_new, a)
                       for a, a_new in zip(old, new)))


@dataclass
class _Run:
    """The state of one Newton solve (a batch of problems)."""

    red: _Reduced
    Y: torch.Tensor
    sp: _Spectrum
    eps_rel: torch.Tensor  # ε/σ̄ per matrix
    sigma2: torch.Tensor  # σ̄², (..., 1, 1), 1 where G = 0
    cont: torch.Tensor  # continuation active, per matrix
    mu: torch.Tensor  # Levenberg–Marquardt damping
    R: torch.Tensor | None = None  # RᵀR = C once the SVD route is on
    factorizations: int = 1
    products: int = 0

    def eps2(self) -> torch.Tensor:
        return (self.eps_rel * self.eps_rel)[..., None, None] * self.sigma2

    def rescale(self) -> None:
        """New ``s = √(λ + ε²)`` after a change of ε (the eigenvectors do not depend on ε)."""
        self.sp = _Spectrum(self.sp.V, self.sp.lam, torch.sqrt(self.sp.lam + self.eps2()[..., 0]))

    def gradient(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(b, g, r)``: ``b = Vᵀ(Y + K)V``, ``∇f_ε = g`` in the eigenbasis, residual ``r = 2‖g‖_F``."""
        b = self.sp.V.mT @ (self.Y + self.red.K) @ self.sp.V
        g = _sym(b / self.sp.s[..., None, :])  # [WᵀΦ_ε]_sym
        return b, g, 2 * torch.linalg.matrix_norm(g)


def _begin(W: torch.Tensor, red: _Reduced, X0, Y0, warm, smoothing: float) -> _Run:  # noqa: ANN001
    """The start: the warm start unless it is far (residual near its bound 2√n) and worse than the cold one by
    dual value (from very far, damped Newton can stall); continuation where ``M`` is near-singular there."""
    sigma2 = torch.where(red.sigma2 > 0, red.sigma2, torch.ones_like(red.sigma2))  # G = 0: Φ = 0 for any ε > 0
    eps_rel = torch.full(W.shape[:-2], smoothing, dtype=WORK_DTYPE, device=W.device)
    Y = _start(red, X0, warm, Y0)
    run = _Run(red, Y, _spectrum(Y, red, eps_rel[..., None, None] ** 2 * sigma2, None), eps_rel, sigma2,
               torch.zeros(W.shape[:-2], dtype=torch.bool, device=W.device), torch.zeros_like(red.sigma2))
    _, _, r0 = run.gradient()
    if X0 is not None or Y0 is not None:
        suspect = r0 > 0.5 * math.sqrt(W.shape[-1])
        if bool(suspect.any()):
            cold = _spectrum(torch.zeros_like(Y), red, run.eps2(), None)
            run.factorizations += 1
            use = suspect & (cold.s.sum(-1) < run.sp.s.sum(-1))
            run.Y = torch.where(use[..., None, None], torch.zeros_like(Y), Y)
            run.sp = _where(use, cold, run.sp)
            _, _, r0 = run.gradient()
    run.cont = run.sp.lam.amin(dim=-1).sqrt() < 0.1 * torch.sqrt(sigma2[..., 0, 0])
    run.eps_rel = torch.where(run.cont, torch.clamp(torch.maximum(r0, eps_rel), max=max(_EPS_START, smoothing)),
                              eps_rel)
    run.rescale()
    return run


def _stage(run: _Run, tol: float, smoothing: float, float32: bool) -> tuple[Any, torch.Tensor]:
    """Bookkeeping before a Newton step: switch to the SVD route near a singular ``M``, start the continuation
    late (once) where the iterate heads for a singular optimum, shrink ε where the residual allows. Returns
    ``(b, g, r)``, or ``None`` in place of it where a float32 solve must restart in float64."""
    if run.R is None and _needs_svd(run.sp, run.eps2(), torch.finfo(WORK_DTYPE).eps):
        run.R = _exact_factor(run.red)
        run.red = run.red._replace(C=run.R.mT @ run.R)
        run.sp = _spectrum(run.Y, run.red, run.eps2(), run.R)
        run.factorizations += 1
    b, g, r = run.gradient()
    late = ~run.cont & (run.sp.lam.amin(dim=-1).sqrt() < 0.1 * torch.sqrt(run.sigma2[..., 0, 0])) & (r > tol)
    if bool(late.any()):
        if float32:  # near-singular after all, in float32: restart in float64
            return None, r
        run.cont = run.cont | late
        run.eps_rel = torch.where(late, torch.clamp(torch.maximum(r, run.eps_rel), max=max(_EPS_START, smoothing)),
                                  run.eps_rel)
        run.rescale()
        b, g, r = run.gradient()
    shrink = (r <= run.eps_rel) & (run.eps_rel > smoothing)
    if bool(shrink.any()):  # next stage of the continuation for those matrices
        run.eps_rel = torch.where(shrink, torch.clamp(run.eps_rel / _EPS_SHRINK, min=smoothing), run.eps_rel)
        run.mu = torch.where(shrink[..., None, None], torch.zeros_like(run.mu), run.mu)
        run.rescale()
        b, g, r = run.gradient()
    return (b, g), r


def _step(run: _Run, b: torch.Tensor, g: torch.Tensor, r: torch.Tensor, active: torch.Tensor, tol: float,
          max_cg: int) -> None:
    """One damped Newton step with the trust adjustments (usually the first trial is accepted).

    Inexact Newton: CG to relative accuracy ``r`` (quadratic convergence); where no continuation runs, no finer
    than the next residual needs to reach ``tol`` (the last step then costs a few products instead of ~15).
    Near a singular optimum a loose CG step loses the quadratic rate (measured: 26 iterations became 50+ on a
    7×5 instance), so there the accuracy stays ``r``."""
    c, d = _hessian_parts(run.sp.s)
    relaxed = torch.where(run.cont, r, torch.maximum(r, 0.5 * tol / r))
    forcing = torch.clamp(relaxed, max=0.1)[..., None, None]
    f0 = run.sp.s.sum(-1)
    unit = torch.finfo(WORK_DTYPE).eps
    pending = active.clone()
    for _ in range(20):
        x, model, k = _pcg(b, c, d, run.mu, -g, pending, forcing, max_cg)
        run.products += k
        trial_Y = _sym(run.Y + run.sp.V @ x @ run.sp.V.mT)  # re-symmetrised: rounding of a large step is not
        trial = _spectrum(trial_Y, run.red, run.eps2(), run.R)
        run.factorizations += 1
        actual, predicted = f0 - trial.s.sum(-1), -model
        rho = torch.where(predicted > 0, actual / torch.where(predicted > 0, predicted, torch.ones_like(predicted)),
                          -torch.ones_like(predicted))
        negligible = (predicted.abs() <= 1e3 * unit * f0) & (actual >= -1e3 * unit * f0)
        accept = pending & ((rho > 1e-4) | negligible)
        m3 = pending[..., None, None]
        mu = run.mu
        mu = torch.where(m3 & (rho > 0.75)[..., None, None], torch.where(mu > 1e-3, mu / 4, torch.zeros_like(mu)), mu)
        run.mu = torch.where(m3 & (rho < 0.25)[..., None, None], torch.clamp(4 * mu, min=1e-2), mu)
        run.Y = torch.where(accept[..., None, None], trial_Y, run.Y)
        run.sp = _where(accept, trial, run.sp)
        pending = pending & ~accept
        if not bool(pending.any()):
            break


def _finish(run: _Run, W: torch.Tensor, G: torch.Tensor, r: torch.Tensor, iterations: int, tol: float,
            exact_residual: bool) -> StiefelSolution:
    """Assemble ``Φ_ε``; near a singular ``M`` measure ``‖Φ‖₂`` and divide by it where it exceeds 1.

    There ``(M + ε²I)^{-1/2}`` multiplies the rounding of the reduction (and a float32 ``W``'s ``WᵀW - I``) by up to
    ``1/ε²``, so ``‖Φ‖₂ <= 1`` and the n × n residual no longer hold for the assembled ``Φ`` (measured in float32:
    ``‖Φ‖₂`` up to 1.3); dividing keeps ``Φ`` as tangent as it was, and the exact residual is reported."""
    X = run.Y - run.red.S
    Phi = _assemble(W, G, X, run.sp)
    dt = G.dtype
    near_singular = bool(run.cont.any())
    if near_singular:
        top = torch.linalg.eigvalsh(_sym((Phi.mT @ Phi).to(WORK_DTYPE))).amax(dim=-1).clamp_min(1.0)
        Phi = Phi / torch.sqrt(top).to(dt)[..., None, None]
    residual = _residual(W, Phi) if exact_residual or near_singular else r.to(_real(dt))
    return StiefelSolution(Phi, X, residual, iterations, bool((residual <= tol).all()), 0, run.products,
                           run.factorizations, run.red.tangent_norm, run.Y)


def newton(W: torch.Tensor, G: torch.Tensor, X0: torch.Tensor | None = None, *, tol: float, max_iter: int,
           smoothing: float, max_cg: int, exact_residual: bool = True, warm: torch.Tensor | None = None,
           trace: list | None = None, Y0: torch.Tensor | None = None, red: _Reduced | None = None
           ) -> StiefelSolution:
    """Damped Newton–CG on ``f_ε`` for tall ``(..., m, n)`` batches (module docstring); unchecked kernel.

    ``X0``/``Y0``: warm start in ``X`` or in the reduced multiplier ``Y`` (at most one), used where ``warm``
    (bool ``(...)``) is True. ``exact_residual=False`` reports the n × n residual ``2‖∇f_ε‖_F`` instead of
    measuring ``‖WᵀΦ + ΦᵀW‖_F`` (one m × n × n product less). ``red``: the reduction of ``(W, G)`` if the caller
    has formed it."""
    red = _reduce(W, G) if red is None else red
    float32 = W.dtype != WORK_DTYPE
    run = _begin(W, red, X0, Y0, warm, smoothing)
    if float32 and bool(run.cont.any()):  # near-singular in float32: solve in float64 (see _in_float64)
        return _in_float64(W, G, X0, Y0, warm, tol=tol, max_iter=max_iter, smoothing=smoothing, max_cg=max_cg,
                           exact_residual=exact_residual, trace=trace)
    t0, iterations = time.perf_counter(), 0
    for iterations in range(max_iter + 1):
        bg, r = _stage(run, tol, smoothing, float32)
        if bg is None:
            return _in_float64(W, G, X0, Y0, warm, tol=tol, max_iter=max_iter, smoothing=smoothing, max_cg=max_cg,
                               exact_residual=exact_residual, trace=trace)
        active = (r > tol) | (run.eps_rel > smoothing)
        _record(trace, t0, r, iterations, 0, run.factorizations, run.products)
        if iterations == max_iter or not bool(active.any()):
            break
        _step(run, *bg, r, active, tol, max_cg)
    return _finish(run, W, G, r, iterations, tol, exact_residual)


def _in_float64(W: torch.Tensor, G: torch.Tensor, X0: torch.Tensor | None, Y0: torch.Tensor | None,
                warm: torch.Tensor | None, *, tol: float, max_iter: int, smoothing: float, max_cg: int,
                exact_residual: bool, trace: list | None) -> StiefelSolution:
    """Newton in float64 for a float32 problem whose ``M`` is near-singular, returned in float32.

    There ``(M + ε²I)^{-1/2}`` multiplies the reduction's float32 rounding, and the float32 point's ``WᵀW - I``
    (about 1e-7), by up to ``1/ε²``: the float32 iteration stalls far from the optimum (measured on random float32
    instances with singular optima: residuals up to 0.7 after 50 iterations, values 20 % off). One Björck step
    makes ``W`` orthonormal in float64; the direction is exact there and tangent at the float32 ``W`` to its
    rounding."""
    dt = G.dtype
    W64 = W.to(WORK_DTYPE)
    W64 = W64 + 0.5 * W64 @ (torch.eye(W64.shape[-1], dtype=WORK_DTYPE, device=W64.device) - W64.mT @ W64)
    sol = newton(W64, G.to(WORK_DTYPE), X0, tol=tol, max_iter=max_iter, smoothing=smoothing, max_cg=max_cg,
                 exact_residual=False, warm=warm, trace=trace, Y0=Y0)
    sol.Phi = sol.Phi.to(dt)
    sol.residual = _residual(W, sol.Phi) if exact_residual else sol.residual.to(_real(dt))
    sol.converged = bool((sol.residual <= tol).all())
    return sol


def _needs_svd(sp: _Spectrum, eps2: torch.Tensor, unit: float) -> bool:
    """True if some ``s² = λ + ε²`` sits within 1e6 rounding units of ``λ_max`` (eigh loses it there)."""
    floor = 1e6 * unit * sp.lam.amax(dim=-1)
    return bool(((sp.lam.amin(dim=-1) + eps2[..., 0, 0]) < floor).any())
