"""A linear layer whose weight matrix has a prescribed singular-value entropy, exactly, at every step.

``W = U diag(σ) Vᵀ`` with ``U ∈ St(n_out, k)``, ``V ∈ St(n_in, k)``, ``k = min(n_in, n_out)`` and
``σ = c · p^{1/r}``, ``p = tempered_softmax(z, h)`` (book eq. ``eq-fixed-entropy-layer``): since ``U`` and
``V`` have orthonormal columns this *is* an SVD, so the normalised spectrum ``σ^r / Σσ^r`` is ``p`` and the
singular-value entropy of ``W`` is ``h`` whatever ``U``, ``V``, ``z`` and ``c`` are
(:mod:`svmuon.spectral.level_set`). Train ``U`` and ``V`` with :class:`svmuon.ManifoldMuon` on the Stiefel
manifold, everything else (``z``, the log-scale, the bias) with Adam.

The layer was built for the chapter "Holding the entropy fixed" (the MLP experiment
``svmuon.experiments.fixed_entropy``) and is shared with the transformer experiment ``svmuon.experiments.gpt``.

References: su2025entropy, he2015delving.
"""

from __future__ import annotations

import math
import numbers

import torch

__all__ = ["FixedEntropyLinear"]


def _orthonormal(rows: int, cols: int, gen: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    """A ``rows × cols`` matrix with orthonormal columns (QR of a seeded Gaussian, R's signs moved into Q)."""
    Q, R = torch.linalg.qr(torch.randn(rows, cols, generator=gen, dtype=torch.float64))
    return (Q * torch.sign(torch.diagonal(R))).to(dtype)


class FixedEntropyLinear(torch.nn.Module):
    """``x -> x Wᵀ + b`` with ``W = U diag(σ) Vᵀ`` of singular-value entropy exactly ``log k - delta``.

    Args:
        n_in, n_out: the shape of ``W`` (n_out × n_in); ``k = min(n_in, n_out)``.
        delta: ``log k - h`` >= 0 (0: all singular values equal).
        power: normalisation power r (1: p ∝ σ, 2: p ∝ σ²).
        learn_spectrum: learn ``z`` (arm ``level_set``) or keep the exponential profile ``z_i = -i/(k-1)``
            (arm ``shape``).
        gen: seeded generator for ``U`` and ``V``. dtype: float32 (experiments) or float64 (tests).
        bias: add a learned bias ``b`` (default True; a transformer's projections have none).
        gain: the initial scale gives ``‖W‖_F² = gain · n_out``; the default 2 is He's ReLU initialisation
            (he2015delving), ``std² · n_in`` matches Gaussian entries of standard deviation ``std``.

    Raises:
        ValueError: ``delta`` outside ``[0, log k)`` (the profile ``z`` has one largest entry, so every
            ``h = log k - δ`` in ``(0, log k]`` is reachable, and no other); ``gain`` not a positive finite
            number.
    """

    def __init__(self, n_in: int, n_out: int, delta: float, power: float, learn_spectrum: bool,
                 gen: torch.Generator, dtype: torch.dtype = torch.float32, *, bias: bool = True,
                 gain: float = 2.0) -> None:
        super().__init__()
        k = min(n_in, n_out)
        if isinstance(delta, bool) or not isinstance(delta, numbers.Real) or not (
                0 <= delta < math.log(k) or (k == 1 and delta == 0)):
            # outside [0, log k) the unchecked kernel would silently give entropy log k (δ < 0) or 0 (δ >= log k)
            raise ValueError(f"delta must lie in [0, log k) = [0, {math.log(k):.4g}) for a {n_out}×{n_in} matrix, "
                             f"got {delta!r}")
        if isinstance(gain, bool) or not isinstance(gain, numbers.Real) or not 0 < gain < math.inf:
            raise ValueError(f"gain must be a positive finite number (‖W‖_F² = gain · n_out at the start), got {gain!r}")
        self.k, self.power = k, float(power)
        self.h = math.log(k) - float(delta)
        self.U = torch.nn.Parameter(_orthonormal(n_out, k, gen, dtype))
        self.V = torch.nn.Parameter(_orthonormal(n_in, k, gen, dtype))
        z = -torch.linspace(0.0, 1.0, k, dtype=torch.float64)
        if learn_spectrum:
            self.z = torch.nn.Parameter(z.to(dtype))
        else:
            self.register_buffer("z", z.to(dtype))
        self.register_buffer("h_t", torch.tensor([self.h], dtype=torch.float64))
        with torch.no_grad():
            p = self._p()
            energy = float((p ** (2 / self.power)).sum())
        self.log_scale = torch.nn.Parameter(torch.tensor(0.5 * math.log(gain * n_out / energy), dtype=dtype))
        if bias:
            self.bias = torch.nn.Parameter(torch.zeros(n_out, dtype=dtype))
        else:
            self.register_parameter("bias", None)

    def _p(self) -> torch.Tensor:
        from svmuon.spectral.level_set import _tempered_softmax

        return _tempered_softmax(self.z.to(torch.float64).unsqueeze(0), self.h_t.view(1, 1)).squeeze(0)

    def sigma(self) -> torch.Tensor:
        """The singular values ``c · p^{1/r}``, shape ``(k,)``."""
        return self.log_scale.exp() * self._p().to(self.U.dtype) ** (1.0 / self.power)

    def weight(self) -> torch.Tensor:
        """``W = U diag(σ) Vᵀ``, shape ``(n_out, n_in)``, differentiable in ``U, V, z, c``."""
        return (self.U * self.sigma()) @ self.V.T

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = ((x @ self.V) * self.sigma()) @ self.U.T
        return y if self.bias is None else y + self.bias
