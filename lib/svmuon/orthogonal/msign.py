"""msign: the polar factor of a matrix, by SVD (exact reference) and by Newton–Schulz iterations.

For ``G = U diag(s) Vᵀ`` of rank r, ``msign(G) = U_r V_rᵀ`` keeps the singular vectors of the r non-zero
singular values and replaces those values by 1 (equation eq-msign of the chapter "Steepest descent under the
spectral norm"). It solves ``max tr(GᵀΦ) s.t. ‖Φ‖₂ ≤ 1`` with value ``‖G‖_*`` (su2025orthogonal,
bernstein2024old), which makes ``-msign(G)`` the steepest-descent direction under the spectral norm and the
update of Muon (jordan2024muon).

Two routes, picked with ``method=``:

* ``"svd"``: ``torch.linalg.svd`` in the input's dtype (float16/bfloat16 inputs are computed in float32).
  Singular values ``s_i <= rcond * s_max`` are treated as zero, so the rank-deficient and the zero matrix
  get their exact minimal polar factor (``msign(0) = 0``).
* ``"newton_schulz"``: odd matrix polynomials ``X <- a X + b (X Xᵀ) X + c (X Xᵀ)² X`` applied to
  ``X = G / ‖G‖_F`` (bjorck1971iterative, higham2008functions, jordan2024muon, amsel2025polar); schedules
  live in :mod:`svmuon.orthogonal.coefficients`.

:func:`msign` is the checked public function. An optimizer resolves its options once into an
:class:`Orthogonalizer`, a callable ``X -> msign(X)`` with the route, the schedule and the compute dtype
fixed, which runs the unchecked kernels below with no host synchronisation (the hot path; its input is
the optimizer's own finite-checked update).

Both routes first divide ``G`` by the power of two nearest above ``max|G|`` (an exact operation in binary
floating point), so ``msign(c G) == msign(G)`` for every ``c > 0`` representable in the dtype, tiny or
huge, with no additive epsilon; for ``c`` a power of two the results are bitwise equal.
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any, Sequence

import torch

from svmuon._validation import as_tensor, check_dtype, check_finite, check_float, check_int, check_matrix
from svmuon.orthogonal._polar_grad import polar_factor_svd
from svmuon.orthogonal.coefficients import default_steps, output_max, resolve_coefficients

__all__ = ["msign", "Orthogonalizer", "power_of_two_scale"]

_METHODS = ("svd", "newton_schulz")
_UNSET: Any = object()  # sentinel of the deprecated spellings steps= / coefficients=


def msign(
    G: Any,
    *,
    method: str = "svd",
    ns_steps: int | None = None,
    ns_coefficients: str | Sequence[Sequence[float]] | None = None,
    compute_dtype: torch.dtype | None = None,
    rcond: float | None = None,
    steps: Any = _UNSET,
    coefficients: Any = _UNSET,
) -> Any:
    """Polar factor ``U_r V_rᵀ`` of a real matrix or a batch of matrices (eq-msign).

    Gradients: ``method="svd"`` has its own backward (``svmuon.orthogonal._polar_grad``), finite also at
    repeated singular values (every orthogonal matrix): for full-rank ``G = U Σ Vᵀ`` and incoming gradient C,
    ``U Γ Vᵀ`` with ``Γ_ij = (A_ij - A_ji)/(σ_i + σ_j)``, ``A = Uᵀ C V``, plus ``(I - UUᵀ) C V Σ⁻¹ Vᵀ`` (tall)
    or ``U Σ⁻¹ Uᵀ C (I - VVᵀ)`` (wide). At rank-deficient ``G`` msign has no derivative (it jumps when a zero
    singular value becomes positive); the backward is then the derivative of the computed map, which keeps the
    triplets above the ``rcond`` cutoff: msign restricted to matrices of that rank. Second derivatives raise
    ``RuntimeError``. ``method="newton_schulz"`` is differentiated by autograd through its matrix products.

    Args:
        G: tensor or NumPy array of shape ``(..., m, n)``, real floating dtype (float16, bfloat16, float32,
            float64); tall (m > n), wide (m < n) and square inputs; leading dimensions are a batch and each
            matrix is treated on its own (batched results equal per-matrix results).
        method: ``"svd"`` (exact reference, default) or ``"newton_schulz"``.
        ns_steps: Newton–Schulz iterations, >= 0 (``method="newton_schulz"`` only; 0 returns ``G / ‖G‖_F``);
            default per schedule, see :func:`svmuon.orthogonal.coefficients.default_steps`. Schedules
            shorter than ``ns_steps`` repeat their last triple.
        ns_coefficients: ``method="newton_schulz"`` only: a schedule name (``"polar_express"``, the default;
            ``"keller_jordan"``; ``"cubic"``) or explicit ``(a, b, c)`` triples of finite reals: a sequence
            (list, tuple) of them, one bare triple, or a NumPy array / tensor of shape ``(k, 3)`` or ``(3,)``
            (:func:`~svmuon.orthogonal.coefficients.resolve_coefficients`, the rule the optimizers share).
        compute_dtype: dtype of the Newton–Schulz matmuls: float16, bfloat16, float32 or float64 (float8,
            integer and complex dtypes are refused). Default: bfloat16 on CUDA; on CPU float64 for
            float64 inputs and float32 otherwise (bf16 matmuls are tens of times slower than fp32 on a CPU
            without native bf16 arithmetic, and only about twice as fast on one with it). The
            normalisation ``G / ‖G‖_F`` is always done in float32 or float64, whichever is wider than the
            input. Ignored by ``method="svd"``.
        rcond: ``method="svd"`` only: relative cutoff; singular values ``<= rcond * s_max`` map to 0.
            Default ``max(m, n) * eps`` of the SVD's dtype (e.g. 2.2e-16 for float64), the usual numerical
            rank threshold (as in ``numpy.linalg.matrix_rank``).
        steps, coefficients: deprecated spellings of ``ns_steps`` and ``ns_coefficients`` (a
            ``DeprecationWarning``; the package spells these options as ``torch.optim.Muon`` does).

    Returns:
        Same type (tensor or NumPy array), shape, dtype and device as ``G``. With ``method="svd"`` the
        exact polar factor up to rounding; with ``"newton_schulz"`` an approximation whose accuracy
        depends on the schedule, the number of steps and the spectrum (``"keller_jordan"`` does not
        converge: after its 5 steps the singular values lie in
        :data:`~svmuon.orthogonal.coefficients.KELLER_JORDAN_BAND` ``[0.4705, 1.2024]`` for those of
        ``G / ‖G‖_F`` in ``[1e-3, 1]``).

    Raises:
        TypeError: ``G`` is not a tensor/array, or is complex or integer (complex input is refused:
            the polar factor of a complex matrix needs the conjugate transpose, which this book never
            uses); ``compute_dtype`` is not float16, bfloat16, float32 or float64; bad
            ``ns_steps``/``ns_coefficients`` types.
        ValueError: ``G`` has fewer than 2 dimensions, is empty, holds NaN/Inf, or is a meta tensor; unknown
            ``method``; ``rcond`` negative or not finite; options given to the method that does not use them; a
            Newton–Schulz schedule that diverges on (0, 1] or overflows the compute dtype.

    References:
        su2025orthogonal, bernstein2024old, higham2008functions (polar decomposition, Newton–Schulz),
        bjorck1971iterative, jordan2024muon, amsel2025polar.
    """
    ns_steps = _deprecated("steps", steps, "ns_steps", ns_steps)
    ns_coefficients = _deprecated("coefficients", coefficients, "ns_coefficients", ns_coefficients)
    T, was_numpy = as_tensor(G, "G")
    check_float(T, "G")
    check_matrix(T, "G")
    check_finite(T, "G")
    if method == "svd":  # rcond is checked by the SVD kernel itself
        if ns_steps is not None or ns_coefficients is not None or compute_dtype is not None:
            raise ValueError("ns_steps, ns_coefficients and compute_dtype apply to method='newton_schulz' only")
        out = _msign_svd(T, rcond)
    else:
        out = Orthogonalizer(method, ns_steps=ns_steps, ns_coefficients=ns_coefficients,
                             compute_dtype=compute_dtype, rcond=rcond)(T)
        if not bool(torch.isfinite(out).all()):  # finite input, so the schedule overflowed the compute dtype
            raise ValueError(f"msign: the Newton–Schulz iteration overflowed {compute_dtype or 'its compute dtype'} "
                             f"(ns_coefficients={ns_coefficients!r}, ns_steps={ns_steps!r}): its polynomials grow "
                             "beyond the dtype's range on [0, 1]; use a bounded schedule or a wider compute_dtype")
    return out.numpy() if was_numpy else out


def _deprecated(old: str, value: Any, new: str, current: Any) -> Any:
    if value is _UNSET:
        return current
    if current is not None:
        raise TypeError(f"give either {new} or its deprecated spelling {old}, not both")
    warnings.warn(f"msign: {old}= is deprecated, use {new}=", DeprecationWarning, stacklevel=3)
    return value


class Orthogonalizer:
    """``X -> msign(X)`` with every option resolved once: the hot-path form of :func:`msign`.

    The constructor checks the options and resolves the Newton–Schulz schedule into its triples; a call
    runs the unchecked kernel on a tensor ``(..., m, n)`` (any real float dtype, tall or wide) and returns
    the same shape, dtype and device. A call performs no host synchronisation and no input check: it is
    meant for callers that check finiteness themselves (an optimizer's update). Non-finite entries give
    a non-finite output with Newton–Schulz, and are read as zeros by the SVD route (so that
    ``torch.linalg.svd`` cannot fail).

    Args:
        method: ``"newton_schulz"`` (default) or ``"svd"``.
        ns_steps, ns_coefficients, compute_dtype: as for :func:`msign` (``method="newton_schulz"``
            only; the schedule defaults to ``"polar_express"``).
        rcond: as for :func:`msign` (``method="svd"`` only; checked at the first call).

    Attributes:
        method, ns_steps (int), schedule (tuple of ``(a, b, c)``), compute_dtype, rcond.
        sigma_range: ``(lo, hi)`` such that every singular value of an output is 0 or lies in
            ``[lo, hi]``: ``(1, 1)`` for the SVD route; ``(0, output_max)`` for Newton–Schulz, where
            ``output_max`` is the maximum of the composed scalar polynomial over (0, 1]
            (:func:`svmuon.orthogonal.coefficients.output_max`; 1.2024 for Keller Jordan's 5 steps, the
            upper end of :data:`~svmuon.orthogonal.coefficients.KELLER_JORDAN_BAND`) and 0 because a
            tiny input singular value gives a tiny output. A manifold uses it to bound the drift its
            retraction may cause.

    Raises:
        ValueError, TypeError: as :func:`msign` for bad options.

    Example:
        >>> orth = Orthogonalizer("newton_schulz", ns_coefficients="keller_jordan", ns_steps=5)
        >>> O = orth(torch.randn(64, 32))  # no checks, no synchronisation

    References:
        jordan2024muon, amsel2025polar, higham2008functions.
    """

    def __init__(self, method: str = "newton_schulz", *, ns_steps: int | None = None,
                 ns_coefficients: Any = None, compute_dtype: torch.dtype | None = None,
                 rcond: float | None = None) -> None:
        if method not in _METHODS:
            raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
        self.method = method
        self.rcond = rcond
        if method == "svd":
            if ns_steps is not None or ns_coefficients is not None or compute_dtype is not None:
                raise ValueError("ns_steps, ns_coefficients and compute_dtype apply to method='newton_schulz' only")
            self.ns_steps, self.ns_coefficients, self.schedule, self.compute_dtype = None, None, (), None
            self.sigma_range = (1.0, 1.0)
            return
        if rcond is not None:
            raise ValueError("rcond applies to method='svd' only")
        if ns_coefficients is None:
            ns_coefficients = "polar_express"
        if ns_steps is None:
            ns_steps = default_steps(ns_coefficients)
        self.ns_steps = check_int(ns_steps, "ns_steps", minimum=0)
        self.schedule = tuple(resolve_coefficients(ns_coefficients, self.ns_steps))
        self.ns_coefficients = ns_coefficients if isinstance(ns_coefficients, str) else self.schedule
        if compute_dtype is not None:  # float8 runs on CPU but returns singular values far from 1
            check_dtype(compute_dtype, "compute_dtype")
        self.compute_dtype = compute_dtype
        self.sigma_range = (0.0, output_max(self.schedule))
        if not math.isfinite(self.sigma_range[1]):
            raise ValueError(f"ns_coefficients diverge: {self.ns_steps} steps of {ns_coefficients!r} map singular "
                             "values in (0, 1] beyond the float64 range; use a schedule whose polynomials stay "
                             "bounded on [0, 1] (e.g. 'polar_express')")

    def __call__(self, X: torch.Tensor) -> torch.Tensor:
        """``msign(X)`` for a tensor ``(..., m, n)``, unchecked (see the class docstring)."""
        if self.method == "svd":  # zeros for NaN/Inf, so that the SVD cannot fail; the caller checks its input
            return _msign_svd(X.nan_to_num(0.0, 0.0, 0.0), self.rcond)
        return _msign_newton_schulz(X, self.schedule, self.compute_dtype)

    def __repr__(self) -> str:
        if self.method == "svd":
            return f"Orthogonalizer('svd', rcond={self.rcond!r})"
        return (f"Orthogonalizer('newton_schulz', ns_steps={self.ns_steps}, ns_coefficients={self.ns_coefficients!r}, "
                f"compute_dtype={self.compute_dtype})")


def power_of_two_scale(T: torch.Tensor) -> torch.Tensor:
    """Per-matrix power of two ``2^e > max|T|`` (shape ``(..., 1, 1)``; 1 where ``T == 0``).

    Dividing by it is exact in binary floating point and leaves ``max|T / 2^e|`` in ``[0.5, 1)``, so a
    later ``‖T‖_F`` can neither underflow nor overflow: msign's invariance ``msign(cT) = msign(T)`` over
    the whole float range needs no additive epsilon. Where ``2^e`` itself is beyond the dtype's range
    (``max|T| >= 2^127`` in float32, ``>= 2^1023`` in float64) the scale is ``2^(e-1)`` and the quotient's
    maximum lies in ``[1, 2)``. No host synchronisation.

    Args:
        T: tensor ``(..., m, n)``, real floating dtype.

    Returns:
        Tensor ``(..., 1, 1)`` of ``T``'s dtype and device.
    """
    amax = T.abs().amax(dim=(-2, -1), keepdim=True)
    # amax = mantissa * 2**exponent, mantissa in [0.5, 1); frexp(0) has exponent 0, so the scale of T = 0 is 1, and
    # the exponent of the largest binade is lowered by one, where 2^e itself would overflow
    exponent = torch.frexp(amax).exponent.clamp_max(math.frexp(torch.finfo(amax.dtype).max)[1] - 1)
    return torch.ldexp(torch.ones_like(amax), exponent)


_power_of_two_scale = power_of_two_scale  # the kernels' name for it


def _msign_svd(T: torch.Tensor, rcond: float | None) -> torch.Tensor:
    """Exact route: ``U diag(1[s > rcond s_max]) Vᵀ`` from ``torch.linalg.svd`` (eq-msign)."""
    work = T if T.dtype in (torch.float32, torch.float64) else T.float()
    m, n = work.shape[-2:]
    if rcond is None:
        rcond = max(m, n) * torch.finfo(work.dtype).eps
    else:
        if isinstance(rcond, bool) or not isinstance(rcond, numbers.Real):  # NumPy scalars are Real
            raise TypeError(f"rcond must be a real number, got {type(rcond).__name__}")
        try:
            rcond = float(rcond)  # NumPy float32/int64 alike; then compared and multiplied as a Python float
        except OverflowError:
            raise ValueError("rcond must be finite and >= 0, got an integer beyond the float64 range") from None
        if not (0 <= rcond < float("inf")):
            raise ValueError(f"rcond must be finite and >= 0, got {rcond}")
    X = work / _power_of_two_scale(work)
    out = polar_factor_svd(X, rcond)  # U diag(1[S > rcond s_max]) Vh; backward finite at repeated S
    return out.to(T.dtype)


def _default_compute_dtype(T: torch.Tensor) -> torch.dtype:
    if T.device.type == "cuda":
        return torch.bfloat16
    return torch.float64 if T.dtype == torch.float64 else torch.float32


def _msign_newton_schulz(
    T: torch.Tensor, schedule: Sequence[tuple[float, float, float]], compute_dtype: torch.dtype | None
) -> torch.Tensor:
    """Newton–Schulz route: normalise in fp32/fp64, iterate the resolved triples on the small Gram side."""
    if compute_dtype is None:
        compute_dtype = _default_compute_dtype(T)
    norm_dtype = torch.float64 if torch.float64 in (T.dtype, compute_dtype) else torch.float32
    X = T.to(norm_dtype)
    X = X / _power_of_two_scale(X)  # exact; now max|X| in [0.5, 1], so ‖X‖_F cannot under/overflow
    fro = torch.linalg.matrix_norm(X, keepdim=True)  # 'fro'; > 0 unless X == 0
    X = X / torch.where(fro > 0, fro, torch.ones_like(fro))  # X == 0 stays 0: odd polynomials fix 0
    tall = X.shape[-2] > X.shape[-1]
    if tall:
        X = X.mT  # iterate on the wide side: X Xᵀ is the smaller Gram matrix
    X = _iterate(X.to(compute_dtype), schedule)
    if tall:
        X = X.mT
    return X.to(T.dtype)


def _iterate(X: torch.Tensor, schedule: Sequence[tuple[float, float, float]]) -> torch.Tensor:
    """``X <- a X + (b A + c A²) X`` with ``A = X Xᵀ`` for each ``(a, b, c)`` (eq-newton-schulz)."""
    two_d = X.ndim == 2
    for a, b, c in schedule:
        A = X @ X.mT
        if c == 0:  # cubic step: X <- a X + b A X, one matmul fewer
            X = torch.addmm(X, A, X, beta=a, alpha=b) if two_d else torch.baddbmm(
                X.flatten(0, -3), A.flatten(0, -3), X.flatten(0, -3), beta=a, alpha=b).reshape(X.shape)
        elif two_d:  # addmm: the same kernels as torch.optim.Muon, so bf16 results match it closely
            B = torch.addmm(A, A, A, beta=b, alpha=c)
            X = torch.addmm(X, B, X, beta=a)
        else:
            B = torch.baddbmm(A.flatten(0, -3), A.flatten(0, -3), A.flatten(0, -3), beta=b, alpha=c)
            X = torch.baddbmm(X.flatten(0, -3), B, X.flatten(0, -3), beta=a).reshape(X.shape)
    return X
