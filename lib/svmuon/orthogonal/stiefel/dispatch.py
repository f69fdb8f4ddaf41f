"""The one dispatcher behind both entry points (:func:`~svmuon.orthogonal.stiefel.api.stiefel_direction` and the
optimizer's :meth:`~svmuon.orthogonal.stiefel.Stiefel.direction`): the square case, the batch of one, the solver,
the rank reduction and the warm starts, on unchecked tall ``(..., m, n)`` tensors.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from svmuon.orthogonal.stiefel.completion import completion_direction, completion_direction_matmul
from svmuon.orthogonal.stiefel.newton import newton
from svmuon.orthogonal.stiefel.options import StiefelOptions
from svmuon.orthogonal.stiefel.published import dual_ascent, fixed_point, fixed_point_reduced
from svmuon.orthogonal.stiefel.rank import deficient_rank, with_rank_reduction
from svmuon.orthogonal.stiefel.reduction import (
    WORK_DTYPE,
    StiefelSolution,
    _real,
    _reduce,
    _residual,
    _skew,
    _sym,
    _tangent_part,
)

__all__ = ["solve", "resolve_route"]

Orthogonalize = Callable[[torch.Tensor], torch.Tensor]


def _exact_msign() -> Orthogonalize:
    from svmuon.orthogonal.msign import Orthogonalizer

    return Orthogonalizer("svd")


def _square(W: torch.Tensor, G: torch.Tensor, orthogonalize: Orthogonalize | None,
            exact_residual: bool = False) -> StiefelSolution:
    """m = n: the orthogonal group's closed form ``Φ = W msign([WᵀG]_skew)`` (eq-orth-direction), re-projected
    onto skew matrices (msign maps skew to skew, thm-skew-msign; rounding or bf16 may not)."""
    A = W.mT @ G
    K = _skew(A)
    O = _skew((orthogonalize or _exact_msign())(K).to(W.dtype))
    Phi = W @ O
    zero = torch.zeros(W.shape[:-2], dtype=_real(G.dtype), device=W.device)
    A64 = A.to(WORK_DTYPE)
    return StiefelSolution(Phi, -_sym(A64), _residual(W, Phi) if exact_residual else zero, 0, True, 1, 0, 0,
                           torch.linalg.matrix_norm(K.to(WORK_DTYPE)), torch.zeros_like(A64), zero.to(WORK_DTYPE))


def _one(sol: StiefelSolution) -> StiefelSolution:
    """Give every tensor field of a 2-D problem's solution the batch dimension of one back."""
    def up(v):  # noqa: ANN001, ANN202
        return v.unsqueeze(0) if isinstance(v, torch.Tensor) else v
    return dataclasses.replace(sol, **{f.name: up(getattr(sol, f.name)) for f in dataclasses.fields(sol)})


def _newton(W: torch.Tensor, G: torch.Tensor, options: StiefelOptions, tol: float, X0, Y0, warm,  # noqa: ANN001
            exact_residual: bool, trace: list | None, unit_start: bool) -> StiefelSolution:
    """Newton, wrapped in the rank reduction where ``G`` is rank-deficient at ``rank_rtol`` (prop-stiefel-rank)."""
    red = _reduce(W, G)
    if unit_start and Y0 is not None:
        Y0 = Y0 * red.tangent_norm[..., None, None]
    opts = dict(smoothing=options.smoothing, max_cg=options.max_cg)
    A = red.S + red.K
    if deficient_rank(G, A.mT @ A + red.C, options.rank_rtol):
        if Y0 is not None:  # the row-space reduction takes X
            X0 = Y0.to(WORK_DTYPE) - red.S
        full = lambda W_, G_, X0_, *, tol, max_iter: newton(W_, G_, X0_, tol=tol, max_iter=max_iter,  # noqa: E731
                                                             exact_residual=False, trace=trace, **opts)
        return with_rank_reduction(W, G, X0, red.S, red.tangent_norm, solve_full=full, warm=warm, tol=tol,
                                   max_iter=options.iterations(), exact_residual=exact_residual,
                                   rank_rtol=options.rank_rtol)
    return newton(W, G, X0, tol=tol, max_iter=options.iterations(), exact_residual=exact_residual, warm=warm,
                  trace=trace, Y0=Y0, red=red, **opts)


def resolve_route(options: StiefelOptions, device: torch.device) -> str:
    """The completion's route on ``device``: ``options.route``, or for ``"auto"`` ``"eigh"`` on the CPU and wherever
    ``work_dtype=torch.float32`` asks for the float32 eigh route by name (it exists on no other route), else
    ``"newton_schulz"`` (no host synchronisation on an accelerator)."""
    if options.route != "auto":
        return options.route
    return "eigh" if device.type == "cpu" or options.work_dtype == torch.float32 else "newton_schulz"


def _completion(W: torch.Tensor, G: torch.Tensor, options: StiefelOptions, orthogonalize: Orthogonalize | None,
                exact_residual: bool) -> StiefelSolution:
    """``solver="completion"`` by its route (:func:`resolve_route`)."""
    if options.work_dtype == torch.float32 and G.dtype == torch.float64:
        raise TypeError("work_dtype=torch.float32 needs float32 points and gradients, got float64: a float64 "
                        "gradient's small tangent part would be lost to float32 rounding (and the eps rule, set "
                        "for float64, would not see it); pass float32 tensors or keep the default work_dtype")
    if resolve_route(options, W.device) == "eigh":
        return completion_direction(W, G, exact_residual=exact_residual, work_dtype=options.work_dtype)
    sol = completion_direction_matmul(W, G, orthogonalize or _exact_msign())
    sol.residual = _residual(W, sol.Phi) if exact_residual else sol.residual
    return sol


def solve(W: torch.Tensor, G: torch.Tensor, options: StiefelOptions, *, tol: float | None = None,
          X0: torch.Tensor | None = None, Y0: torch.Tensor | None = None, warm: torch.Tensor | None = None,
          orthogonalize: Orthogonalize | None = None, exact_residual: bool = True,
          trace: list | None = None, unit_start: bool = False) -> StiefelSolution:
    """The unchecked kernel behind both entry points, for tall ``(..., m, n)`` tensors of one shape and dtype.

    ``tol`` overrides the options' tolerance. ``X0``/``Y0``: warm start in ``X`` or in the reduced multiplier
    ``Y = [WᵀG]_sym + X`` (at most one), used where ``warm`` (bool ``(...)``) is True. ``orthogonalize``: the msign
    of the square case and of the msign-based solvers (default: exact, by SVD). ``exact_residual=False`` lets a
    solver report its own residual estimate and save one m × n × n product. ``trace``: one dict per iteration
    (it synchronises)."""
    if X0 is not None and Y0 is not None:
        raise ValueError("pass X0 or Y0, not both")
    m, n = W.shape[-2:]
    if m == n:
        return _square(W, G, orthogonalize, exact_residual)
    if W.ndim == 3 and W.shape[0] == 1:  # a single matrix: 2-D products (mm) are much cheaper than bmm for small n
        sq = lambda T: None if T is None else T[0]  # noqa: E731
        return _one(solve(W[0], G[0], options, tol=tol, X0=sq(X0), Y0=sq(Y0), warm=sq(warm),
                          orthogonalize=orthogonalize, exact_residual=exact_residual, trace=trace,
                          unit_start=unit_start))
    tol = options.tolerance(G.dtype, n) if tol is None else tol
    solver, max_iter = options.solver, options.iterations()
    if solver == "completion":
        return _completion(W, G, options, orthogonalize, exact_residual)
    if solver == "newton":
        return _newton(W, G, options, tol, X0, Y0, warm, exact_residual, trace, unit_start)
    if unit_start and Y0 is not None:
        Y0 = Y0 * _reduce(W, G).tangent_norm[..., None, None]
    if solver == "fixed_point_reduced":
        return fixed_point_reduced(W, G, X0, tol=tol, max_iter=max_iter, smoothing=options.smoothing, warm=warm,
                                   trace=trace, Y0=Y0)
    if Y0 is not None:  # the msign-based solvers iterate on X itself
        X0 = Y0.to(WORK_DTYPE) - _sym((W.mT @ G).to(WORK_DTYPE))
    orth = orthogonalize or _exact_msign()
    if solver == "fixed_point":
        sol = fixed_point(W, G, X0, tol=tol, max_iter=max_iter, orthogonalize=orth, warm=warm, trace=trace)
    else:  # "dual_ascent", and "amortized": the same iteration with a budget of max_iter (default 1) warm steps
        sol = dual_ascent(W, G, X0, tol=tol, max_iter=max_iter, orthogonalize=orth, alpha=options.alpha, warm=warm,
                          trace=trace)
    sol.Y = _sym((W.mT @ G).to(WORK_DTYPE)) + sol.X
    sol.tangent_norm = torch.linalg.matrix_norm(_tangent_part(W, G).to(_real(G.dtype)))
    return sol
