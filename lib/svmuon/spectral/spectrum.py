"""Singular values of a batch of matrices and the probability distributions they define.

The spectrum of ``W`` with shape ``(..., m, n)`` is the vector of its ``k = min(m, n)`` singular values
σ_1 >= ... >= σ_k >= 0. Normalising a power of it gives a point of the simplex Δ^{k-1} (book, eq.
``eq-normalisations``)::

    p_i = σ_i^power / Σ_j σ_j^power,   power = 1 (Roy–Vetterli) or 2 (the Moonlight report); the source offers both.

Dtypes: float32 and float64 are computed in their own precision; float16 and bfloat16 inputs are computed in
float32 (``torch.linalg.svdvals`` has no half-precision kernels) and the result is cast back to the input dtype.
Device: the result lies on the input's device. NumPy arrays in give NumPy arrays out.

References: su2025entropy, roy2007effective, liu2025moonlight.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
import torch

from svmuon._validation import as_tensor, check_finite, check_float, check_matrix

__all__ = ["singular_values", "spectral_distribution"]

_WORK_DTYPES = (torch.float32, torch.float64)


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the computation runs in: float32 for half-precision inputs, else the input dtype."""
    return dtype if dtype in _WORK_DTYPES else torch.float32


def _prepare_matrix(W: Any, name: str = "W") -> tuple[torch.Tensor, torch.dtype, bool]:
    """Validate a matrix argument; return ``(W in its working dtype, input dtype, was_numpy)``.

    Raises ``TypeError`` for a non-tensor or non-float input and ``ValueError`` for a shape that is not
    ``(..., m, n)`` with m, n >= 1 or for NaN/Inf entries. ``W`` itself is never modified.
    """
    t, was_numpy = as_tensor(W, name)
    check_float(t, name)
    check_matrix(t, name)
    check_finite(t, name)
    return t.to(_work_dtype(t.dtype)), t.dtype, was_numpy


def _finish(x: torch.Tensor, dtype: torch.dtype, was_numpy: bool) -> torch.Tensor | np.ndarray:
    """Cast a result back to the input dtype and container (NumPy in, NumPy out)."""
    x = x.to(dtype)
    return x.cpu().numpy() if was_numpy else x


def _check_power(power: Any) -> float:
    """Return ``power`` as a positive finite float; raise TypeError/ValueError naming ``power``."""
    if isinstance(power, bool) or not isinstance(power, numbers.Real):
        raise TypeError(f"power must be a positive real number (1 or 2 in the book), got {type(power).__name__}")
    power = float(power)
    if not (math.isfinite(power) and power > 0):
        raise ValueError(f"power must be a positive finite real number (1 or 2 in the book), got {power}")
    return power


def _svdvals(W: torch.Tensor) -> torch.Tensor:
    """Singular values of an already validated ``(..., m, n)`` tensor in its working dtype, descending."""
    return torch.linalg.svdvals(W)


def singular_values(W: Any) -> torch.Tensor | np.ndarray:
    """Singular values of a matrix or a batch of matrices, in descending order.

    Args:
        W: Tensor or NumPy array of shape ``(..., m, n)`` with m, n >= 1, real floating dtype (float16,
            bfloat16, float32, float64), finite entries.

    Returns:
        Shape ``(..., k)`` with ``k = min(m, n)``: σ_1 >= ... >= σ_k >= 0 of each matrix, computed by
        ``torch.linalg.svdvals``. Same dtype and device as ``W`` (half-precision inputs are computed in
        float32 and cast back); a NumPy array if ``W`` is one.

    Raises:
        TypeError: ``W`` is not a tensor/array, or has an integer, bool or complex dtype.
        ValueError: ``W`` has fewer than 2 dimensions, is empty, or holds NaN/Inf.

    References:
        su2025entropy (book chapter "Singular values and their entropy").
    """
    work, dtype, was_numpy = _prepare_matrix(W, "W")
    return _finish(_svdvals(work), dtype, was_numpy)


def _distribution(sigma: torch.Tensor, power: float, shape: tuple[int, ...], rtol: float | None) -> torch.Tensor:
    """p = σ^power / Σ σ^power along the last dimension of a validated spectrum ``sigma`` (descending).

    Singular values below ``rtol * σ_1`` are set to zero first (``rtol=None``: ``max(m, n) * eps``, the
    threshold of ``numpy.linalg.matrix_rank``). Dividing by σ_1 before raising to ``power`` avoids
    overflow and underflow. Raises ValueError if some matrix of the batch is zero.
    """
    top = sigma[..., :1]
    if bool((top == 0).any()):
        bad = int((top.reshape(-1) == 0).nonzero()[0])
        raise ValueError(
            "W must not be the zero matrix: its singular values are all 0, so the spectral distribution "
            f"sigma^power / sum(sigma^power), and with it the singular-value entropy, is undefined "
            f"(batch element {bad} of shape {tuple(shape)})"
        )
    if rtol is None:
        rtol = max(shape[-2:]) * torch.finfo(sigma.dtype).eps
    ratio = sigma / top
    ratio = torch.where(ratio > rtol, ratio, torch.zeros_like(ratio))
    powered = ratio**power
    return powered / powered.sum(dim=-1, keepdim=True)


def _check_rtol(rtol: Any) -> float | None:
    if rtol is None:
        return None
    if isinstance(rtol, bool) or not isinstance(rtol, numbers.Real):
        raise TypeError(f"rtol must be None or a real number in [0, 1), got {type(rtol).__name__}")
    rtol = float(rtol)
    if not (0.0 <= rtol < 1.0):
        raise ValueError(f"rtol must be None or a real number in [0, 1), got {rtol}")
    return rtol


def spectral_distribution(W: Any, power: float = 1, *, rtol: float | None = None) -> torch.Tensor | np.ndarray:
    """The normalised spectrum p_i = σ_i^power / Σ_j σ_j^power of each matrix (book eq. ``eq-normalisations``).

    ``power=1`` is the normalisation of Roy and Vetterli (σ / Σσ); ``power=2`` is the one of the Moonlight report
    (σ² / Σσ², the share of the squared Frobenius norm); the source article offers both. Any positive
    finite power is accepted.

    Singular values at or below ``rtol * σ_1`` count as exact zeros. The default ``rtol=None`` uses
    ``max(m, n) * eps`` of the working dtype, the threshold of ``numpy.linalg.matrix_rank`` and of
    ``torch.linalg.matrix_rank``: below it a singular value is rounding noise of the SVD, so a rank-r matrix
    gets exactly r non-zero p_i. Pass ``rtol=0.0`` to keep every singular value.

    Args:
        W: Shape ``(..., m, n)``, m, n >= 1, real floating dtype, finite; no matrix of the batch may be zero.
        power: Positive real exponent; 1 or 2 in the book.
        rtol: None or a relative threshold in [0, 1) below which σ_i / σ_1 is set to 0.

    Returns:
        Shape ``(..., k)``, ``k = min(m, n)``, non-negative, summing to 1 along the last dimension and
        descending. Dtype and device of ``W`` (half precision computed in float32); NumPy in, NumPy out.

    Raises:
        TypeError: bad container or dtype of ``W``; ``power`` or ``rtol`` not a real number.
        ValueError: bad shape, NaN/Inf entries, a zero matrix (its entropy is undefined), power <= 0 or
            not finite, rtol outside [0, 1).

    References:
        roy2007effective, liu2025moonlight, su2025entropy.
    """
    power = _check_power(power)
    rtol = _check_rtol(rtol)
    work, dtype, was_numpy = _prepare_matrix(W, "W")
    p = _distribution(_svdvals(work), power, tuple(work.shape), rtol)
    return _finish(p, dtype, was_numpy)
