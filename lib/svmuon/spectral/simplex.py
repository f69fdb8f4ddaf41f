"""Uniform sampling of the probability simplex Δ^{n-1} = {p in R^n : p_i >= 0, Σ p_i = 1}.

If x_1, ..., x_n are i.i.d. Exp(1), then p = x / Σ_j x_j is uniform on Δ^{n-1} (book
``thm-exp-simplex``): the joint density e^{-Σ x_i} depends on x only through its "length" Σ x_i, just as
the Gaussian density depends only on ‖x‖ and so makes x / ‖x‖ uniform on the sphere. This is the flat
Dirichlet(1, ..., 1) distribution, drawn without naming it.

References: su2025entropy, devroye1986nonuniform (chapter V), kotz2000continuous.
"""

from __future__ import annotations

from typing import Any

import torch

from svmuon._validation import check_int

__all__ = ["sample_simplex"]

_MAX_NUMEL = 2**63 - 1  # torch indexes tensor entries with int64


def _short(k: int) -> str:
    """An integer for an error message: in full if short, else its number of digits."""
    text = str(k)
    return text if len(text) <= 20 else f"an integer with {len(text)} digits"


def _check_device(device: Any, name: str = "device") -> torch.device:
    """``device`` as an available ``torch.device``; ValueError naming ``name`` if torch cannot use it here."""
    try:
        parsed = torch.device(device)
        torch.empty(0, device=parsed)  # an unavailable device (no CUDA, bad index) fails here, cheaply
    except (RuntimeError, TypeError, ValueError, AssertionError) as exc:  # torch asserts "not compiled with CUDA"
        raise ValueError(f"{name} must name an available torch device (e.g. 'cpu', 'cuda:0'), got {device!r}: "
                         f"{exc}") from exc
    return parsed



def sample_simplex(
    n: int,
    size: int,
    *,
    generator: torch.Generator | None = None,
    device: Any = None,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """Draw ``size`` points uniformly from the simplex Δ^{n-1} by normalising i.i.d. Exp(1) draws.

    Args:
        n: Number of coordinates, n >= 1 (n = 1 gives the single point (1,)).
        size: Number of points, size >= 0.
        generator: Optional ``torch.Generator`` for reproducible draws. The draws are made on the
            generator's device and then moved to ``device``.
        device: Device of the result; default the generator's device, else the CPU.
        dtype: ``torch.float32`` or ``torch.float64`` (default). Half precision is refused: its 11-bit
            mantissa makes Exp(1) draws too coarse for a density on Δ^{n-1}.

    Returns:
        Tensor of shape ``(size, n)``: each row non-negative and summing to 1 (to rounding), the rows i.i.d.
        uniform on Δ^{n-1}.

    Raises:
        TypeError: ``n``/``size`` not integers, ``dtype`` not float32/float64, ``generator`` not a Generator.
        ValueError: n < 1 or size < 0, n or n·size above 2^63 - 1 (more entries than a tensor can index), or
            ``device`` is not a torch device name (or not available here, e.g. "cuda" on a CPU-only build).

    References:
        su2025entropy, devroye1986nonuniform.
    """
    n = check_int(n, "n", minimum=1)
    size = check_int(size, "size", minimum=0)
    if dtype not in (torch.float32, torch.float64):
        raise TypeError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    if n * size > _MAX_NUMEL or n > _MAX_NUMEL:  # each dimension is an int64 too (size = 0 included)
        raise ValueError(f"n·size must be at most 2^63 - 1 (the most entries a tensor can index), got n={_short(n)} "
                         f"and size={_short(size)}")
    if device is not None:
        device = _check_device(device)
    draw_device = generator.device if generator is not None else (device if device is not None else torch.device("cpu"))
    target = device if device is not None else torch.device(draw_device)
    x = torch.empty((size, n), dtype=dtype, device=draw_device).exponential_(1.0, generator=generator)
    # Exp(1) draws are > 0 almost surely, so every row sum is positive (eq. of thm-exp-simplex).
    p = x / x.sum(dim=-1, keepdim=True)
    return p.to(target)
