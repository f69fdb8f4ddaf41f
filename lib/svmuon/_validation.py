"""Input checks shared by every public function of :mod:`svmuon`.

Each check raises a ``TypeError`` or ``ValueError`` whose message names the argument and says what was
expected, so a bad input never turns into a silent NaN further down. The checks never modify their input.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def as_tensor(x: Any, name: str) -> tuple[torch.Tensor, bool]:
    """Return ``(tensor, was_numpy)`` for a torch tensor or a NumPy array ``x``.

    NumPy arrays are wrapped without a copy where possible; the flag lets a caller hand back a NumPy
    result. Anything else raises ``TypeError`` naming ``name``.
    """
    if isinstance(x, torch.Tensor):
        return x, False
    if isinstance(x, np.ndarray):
        if x.dtype.kind == "c":
            raise TypeError(f"{name} must be a real floating array, got complex dtype {x.dtype}")
        if x.dtype.kind != "f":
            raise TypeError(f"{name} must be a floating-point array, got dtype {x.dtype}")
        return torch.from_numpy(np.ascontiguousarray(x)), True
    raise TypeError(f"{name} must be a torch.Tensor or numpy.ndarray, got {type(x).__name__}")


def check_float(x: torch.Tensor, name: str, dtypes: tuple[torch.dtype, ...] = FLOAT_DTYPES) -> None:
    """Raise ``TypeError`` unless ``x`` has one of the real floating dtypes ``dtypes``."""
    if x.is_complex():
        raise TypeError(f"{name} must be real; complex dtype {x.dtype} is not supported")
    if x.dtype not in dtypes:
        allowed = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"{name} must have a floating dtype ({allowed}), got {x.dtype}")


def check_dtype(dtype: Any, name: str, dtypes: tuple[torch.dtype, ...] = FLOAT_DTYPES) -> None:
    """Raise ``TypeError`` unless ``dtype`` is one of the torch dtypes ``dtypes`` (e.g. a ``compute_dtype`` option:
    float8, integer and complex dtypes are floating or torch dtypes too, but no kernel here supports them)."""
    if not (isinstance(dtype, torch.dtype) and dtype in dtypes):
        allowed = ", ".join(str(d) for d in dtypes)
        raise TypeError(f"{name} must be one of {allowed}, got {dtype!r}")


def check_device(x: torch.Tensor, name: str) -> None:
    """Raise ``ValueError`` if ``x`` is a meta tensor, which has a shape but no values to compute with."""
    if x.device.type == "meta":
        raise ValueError(f"{name} is a meta tensor (no values); expected a tensor on a real device (e.g. cpu, cuda), "
                         "such as one materialised with to_empty() and initialised")


def check_finite(x: torch.Tensor, name: str) -> None:
    """Raise ``ValueError`` if ``x`` holds a NaN or an infinity, or is a meta tensor (:func:`check_device`)."""
    check_device(x, name)
    if not bool(torch.isfinite(x).all()):
        n_nan = int(torch.isnan(x).sum())
        n_inf = int(torch.isinf(x).sum())
        raise ValueError(f"{name} must be finite, but it holds {n_nan} NaN and {n_inf} infinite entries")


def check_matrix(x: torch.Tensor, name: str, *, square: bool = False) -> None:
    """Raise ``ValueError`` unless ``x`` has shape ``(..., m, n)`` with m, n >= 1 (and m == n if ``square``)."""
    if x.ndim < 2:
        raise ValueError(f"{name} must have shape (..., m, n) with at least 2 dimensions, got shape {tuple(x.shape)}")
    if x.numel() == 0:
        raise ValueError(f"{name} must not be empty, got shape {tuple(x.shape)}")
    if square and x.shape[-1] != x.shape[-2]:
        raise ValueError(f"{name} must be square (..., n, n), got shape {tuple(x.shape)}")


def check_order(q: Any, name: str = "q") -> float:
    """Return the Rényi order ``q`` as a float in [0, inf]; raise for NaN, negatives and non-numbers.

    A number beyond the float range (an ``int`` such as ``10**400``) is ``inf``: H_q differs from H_∞ by less
    than log k / (q - 1), far below float64 resolution there."""
    if isinstance(q, bool) or not isinstance(q, numbers.Real):
        raise TypeError(f"{name} must be a real number in [0, inf], got {type(q).__name__}")
    try:
        q = float(q)
    except OverflowError:
        if q < 0:
            raise ValueError(f"{name} must be a real number in [0, inf], got a negative number beyond the float "
                             "range") from None
        q = math.inf
    if math.isnan(q) or q < 0:
        raise ValueError(f"{name} must be a real number in [0, inf], got {q}")
    return q


def check_int(n: Any, name: str, minimum: int = 1) -> int:
    """Return ``n`` as an int >= ``minimum``; raise ``TypeError``/``ValueError`` naming ``name`` otherwise."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"{name} must be an integer >= {minimum}, got {type(n).__name__}")
    if n < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {n}")
    return int(n)
