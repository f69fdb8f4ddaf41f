"""Every option of the Stiefel direction, with its default, held once: :class:`StiefelOptions`.

:class:`~svmuon.orthogonal.stiefel.manifold.Stiefel` keeps one (frozen) instance, :func:`~svmuon.orthogonal.stiefel.api.stiefel_direction`
builds one from its keyword arguments; the solvers read it. The msign route is not here: it belongs to whoever
calls (the optimizer's ``msign_method``/``ns_*`` options, or the ``orthogonalize`` argument of the public
functions), so it is owned once.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["ROUTES", "SOLVERS", "StiefelOptions", "default_tol"]

#: the steepest-direction solvers (``solver=``); see the package docstring
SOLVERS = ("completion", "newton", "fixed_point", "fixed_point_reduced", "dual_ascent", "amortized")
#: how the completion evaluates its matrix functions (``route=``)
ROUTES = ("auto", "eigh", "newton_schulz")
DEFAULT_MAX_ITER = {"completion": 0, "newton": 50, "fixed_point": 100, "fixed_point_reduced": 200, "dual_ascent": 100,
                    "amortized": 1}


def _positive(value: Any, name: str, *, allow_zero: bool = False, upper: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    try:
        v = float(value)
    except OverflowError:
        raise ValueError(f"{name} must be a finite number, got an integer beyond the float64 range") from None
    low_ok = v >= 0 if allow_zero else v > 0
    if not (math.isfinite(v) and low_ok and v < upper):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number {bound}" + (f" and < {upper}" if upper < math.inf else "")
                         + f", got {value!r}")
    return v


def _integer(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if int(value) < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class StiefelOptions:
    """The options of the Stiefel direction solvers (validated at construction; frozen).

    Attributes:
        solver: ``"completion"`` (default: two closed-form stages, feasible, within 0.64 % of the optimum at the
            benchmark's sampled steps of real training, up to 13 % on random rank-one gradients; no iterations, no
            host synchronisation), ``"newton"``
            (exact: the book's Newton method on the reduced dual, to tangent tolerance ``tol``), ``"fixed_point"``
            (su2025stiefel), ``"fixed_point_reduced"`` or ``"dual_ascent"`` (bernstein2025stiefel), or ``"amortized"`` (su2025dual: dual ascent with a budget of
            ``max_iter = 1`` step per call, started from the multiplier the optimizer carries over from the previous
            training step; measured in the Stiefel chapter, section sec-stiefel-cost).
        tol: tangent-residual tolerance ``‖WᵀΦ + ΦᵀW‖_F`` of the iterative solvers; ``None``: :func:`default_tol`
            of the dtype (1e-6, or for float32 ``8 eps √n``).
        max_iter: the iterative solvers' cap (``None``: 50 for Newton, 100 / 200 / 100 for the published ones, 1
            for ``"amortized"``).
        smoothing: ``ε/σ̄`` of the smoothed dual (Newton, fixed_point_reduced); ``σ̄ = ‖P_W(G)‖_F/√n``.
        max_cg: Hessian-vector products per Newton iteration at most.
        rank_rtol: Newton: singular values of ``G`` below ``rank_rtol · σ_max`` count as zero, and a rank-deficient
            ``G`` is solved on its row space (prop-stiefel-rank); in [0, 1).
        alpha: the dual-ascent step, in units of ``σ̄``, as published.
        transpose_wide: accept wide matrices (orthonormal rows) as their transposes.
        route: how ``"completion"`` evaluates its matrix functions: ``"eigh"`` (two n × n eigendecompositions, in
            ``work_dtype``; exact), ``"newton_schulz"`` (matrix products only: two msigns by the caller's
            ``orthogonalize``, which must converge, e.g. Polar Express; no host synchronisation on an accelerator,
            where ``torch.linalg.eigh`` synchronises), or ``"auto"`` (default: ``"eigh"`` on the CPU,
            ``"newton_schulz"`` elsewhere, except with ``work_dtype=torch.float32``, which names the eigh route).
        work_dtype: the dtype of the completion's eigh route: ``torch.float64`` (default; feasible and within
            0.64 % of the optimum at the benchmark's sampled steps) or ``torch.float32`` (every product and both
            eigendecompositions in float32: a cheaper step that loses value, measured in the chapter "The Stiefel
            case", section sec-stiefel-cost), for float32 points and gradients only (float64 ones raise a
            TypeError when solved: their small tangent parts would be lost to float32 rounding). Only for
            ``solver="completion"`` with ``route="eigh"`` or ``"auto"`` (``"auto"`` then takes the eigh route on an
            accelerator too: the option is not ignored there; its eigh synchronises with the host). A per-call override of
            ``solver`` or ``route`` (``steepest_direction(..., solver="newton")``) drops an inherited float32
            ``work_dtype`` where it no longer applies (:meth:`~svmuon.orthogonal.stiefel.options.StiefelOptions.override`).

    Raises:
        ValueError: unknown ``solver``; ``tol``, ``smoothing``, ``alpha`` not finite and > 0; ``rank_rtol`` outside
            [0, 1); ``max_iter`` < 0, ``max_cg`` < 1; unknown ``route``; ``work_dtype=torch.float32`` with another
            solver or ``route="newton_schulz"``. TypeError: options of the wrong type (``work_dtype`` not
            ``torch.float32`` or ``torch.float64``).
    """

    solver: str = "completion"
    tol: float | None = None
    max_iter: int | None = None
    smoothing: float = 1e-6
    max_cg: int = 100
    rank_rtol: float = 1e-6
    alpha: float = 0.01
    transpose_wide: bool = True
    route: str = "auto"
    work_dtype: torch.dtype = torch.float64

    def override(self, **changes: Any) -> StiefelOptions:
        """These options with ``changes`` (a per-call override), checked as at construction. An inherited
        ``work_dtype=torch.float32`` is dropped (to float64) where the changed ``solver`` or ``route`` has no float32
        route; given in ``changes`` it is kept and checked."""
        merged = {**{k: getattr(self, k) for k in self.__dataclass_fields__}, **changes}
        inapplicable = merged["solver"] != "completion" or merged["route"] == "newton_schulz"
        if "work_dtype" not in changes and merged["work_dtype"] == torch.float32 and inapplicable:
            merged["work_dtype"] = torch.float64
        return StiefelOptions(**merged)

    def __post_init__(self) -> None:
        if not isinstance(self.solver, str) or self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}, got {self.solver!r}")
        if not isinstance(self.route, str) or self.route not in ROUTES:
            raise ValueError(f"route must be one of {ROUTES}, got {self.route!r}")
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731  (frozen)
        if self.tol is not None:
            set_("tol", _positive(self.tol, "tol"))
        if self.max_iter is not None:
            set_("max_iter", _integer(self.max_iter, "max_iter", 0))
        set_("smoothing", _positive(self.smoothing, "smoothing"))
        set_("max_cg", _integer(self.max_cg, "max_cg", 1))
        set_("rank_rtol", _positive(self.rank_rtol, "rank_rtol", allow_zero=True, upper=1.0))
        set_("alpha", _positive(self.alpha, "alpha"))
        if self.work_dtype not in (torch.float32, torch.float64):
            raise TypeError(f"work_dtype must be torch.float32 or torch.float64, got {self.work_dtype!r}")
        if self.work_dtype == torch.float32 and (self.solver != "completion" or self.route == "newton_schulz"):
            raise ValueError(f"work_dtype=torch.float32 applies to solver='completion' with route 'eigh' or 'auto' "
                             f"only, got solver={self.solver!r}, route={self.route!r}")
        if not isinstance(self.transpose_wide, bool):
            raise TypeError(f"transpose_wide must be a bool, got {type(self.transpose_wide).__name__}")

    def iterations(self) -> int:
        """The iteration cap of the chosen solver."""
        return DEFAULT_MAX_ITER[self.solver] if self.max_iter is None else self.max_iter

    def tolerance(self, dtype: torch.dtype, n: int) -> float:
        """``tol``, or :func:`default_tol` for this dtype and column count."""
        return default_tol(dtype, n) if self.tol is None else self.tol


def default_tol(dtype: torch.dtype, n: int) -> float:
    """The iterative solvers' default tangent tolerance ``‖WᵀΦ + ΦᵀW‖_F`` for a ``Φ`` of ``dtype`` with n columns.

    1e-6 in float64; in float32 ``max(1e-6, 8 eps √n)`` (eps = 2^-23; 1.5e-5 at n = 256), about twice the tangent
    residual that assembling ``Φ`` in float32 leaves by itself (measured ``3-4 eps √n``,
    ``tests/test_stiefel.py::test_float32_floor_of_the_assembled_direction``), so that a solver does not spend an
    iteration on accuracy the output cannot carry.

    Args:
        dtype: ``torch.float32`` or ``torch.float64``, the dtype of ``Φ`` (the parameter's).
        n: number of columns of the tall orientation (``min(m, n)`` of the matrix), an int >= 1.

    Returns:
        The tolerance, a float.

    Raises:
        TypeError: another dtype, or a non-integer ``n``. ValueError: ``n < 1``.

    References:
        The chapter "The Stiefel case", section "The solvers side by side".
    """
    if dtype not in (torch.float32, torch.float64):
        raise TypeError(f"dtype must be torch.float32 or torch.float64, got {dtype!r}")
    n = _integer(n, "n", 1)
    if dtype == torch.float64:
        return 1e-6
    return max(1e-6, 8 * torch.finfo(torch.float32).eps * math.sqrt(n))
