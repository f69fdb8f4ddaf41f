"""The model of the fixed-entropy experiment (:mod:`svmuon.experiments.fixed_entropy`): a linear layer whose
weight matrix has singular-value entropy exactly h, the MLP built from it, and the optimizers of each arm.

References: su2025entropy, he2015delving, jordan2024muon, kingma2015adam, loshchilov2019decoupled.
"""

from __future__ import annotations

import math
import numbers

import torch

STARTS = ("he", "unit")  # the fixed-entropy layers' initial scales (Net)
OTHER_LR = 3e-3  # Adam on z, the scale, the biases, the output layer and the embedding in the constrained arms


def _orthonormal(rows: int, cols: int, gen: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    """A Haar point of St(rows, cols), rows >= cols: the values of ``Stiefel().random(rows, cols, generator=gen,
    dtype=dtype)``, kept in QR's column-major layout. The recorded runs trained from this layout, and float32
    products round differently with another one (the recorded Stiefel defects moved in the 10th digit)."""
    Q, R = torch.linalg.qr(torch.randn(rows, cols, generator=gen, dtype=torch.float64))
    return (Q * torch.sign(torch.diagonal(R))).to(dtype)


class FixedEntropyLinear(torch.nn.Module):
    """``x -> x Wᵀ + b`` with ``W = U diag(σ) Vᵀ`` of singular-value entropy exactly ``log k - delta``.

    Args:
        n_in, n_out: the shape of ``W`` (n_out × n_in); ``k = min(n_in, n_out)``.
        delta: ``log k - h`` >= 0 (0: all singular values equal).
        power: normalisation power r (1: p ∝ σ, 2: p ∝ σ²).
        learn_spectrum: learn ``z`` (arm ``level_set``) or keep the exponential profile (arm ``shape``).
        gen: seeded generator for ``U`` and ``V``. dtype: float32 (experiment) or float64 (tests).
        bias: add a learned bias ``b`` (default True; the transformer of ``svmuon.experiments.gpt`` has none).
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


class Net(torch.nn.Module):
    """MLP ``sizes[0] -> sizes[1] -> ... -> sizes[-1]`` (ReLU after each hidden layer); the hidden matrices (all
    but the output layer) plain ``Linear`` (``arm=None``) or :class:`FixedEntropyLinear`; ``embed``: an
    embedding of ``context`` tokens in front. ``start``: the fixed-entropy layers' initial scale, ``"he"``
    (``‖W‖_F² = 2 n_out``, He's ReLU scale, he2015delving) or ``"unit"`` (``‖W‖_F² = k``, a Stiefel matrix's);
    ValueError for another."""

    def __init__(self, sizes: tuple[int, ...], seed: int, arm: str | None = None, delta: float = 0.0,
                 power: float = 1, context: int = 0, embed: int = 0, dtype: torch.dtype = torch.float32,
                 start: str = "he") -> None:
        super().__init__()
        if start not in STARTS:
            raise ValueError(f"start must be one of {STARTS}, got {start!r}")
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)
        pairs = list(zip(sizes[:-2], sizes[1:-1]))  # (n_in, n_out) of each hidden matrix
        self.embedding = torch.nn.Embedding(97, embed, dtype=dtype) if embed else None
        if arm is None:
            self.hidden = torch.nn.ModuleList([torch.nn.Linear(a, b, dtype=dtype) for a, b in pairs])
        else:
            learn = arm == "level_set"
            # "he": ‖W‖_F² = 2 n_out (gain 2); "unit": ‖W‖_F² = k, a Stiefel matrix's (every σ = 1 at δ = 0)
            self.hidden = torch.nn.ModuleList([
                FixedEntropyLinear(a, b, delta, power, learn, gen, dtype, gain=2.0 if start == "he" else min(a, b) / b)
                for a, b in pairs])
        self.out = torch.nn.Linear(sizes[-2], sizes[-1], dtype=dtype)

    def weights(self) -> list[torch.Tensor]:
        return [m.weight() if isinstance(m, FixedEntropyLinear) else m.weight for m in self.hidden]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embedding is not None:
            x = self.embedding(x).flatten(1)
        for layer in self.hidden:
            x = torch.relu(layer(x))
        return self.out(x)


def make_optimizers(net: Net, method: str, lr: float) -> list[torch.optim.Optimizer]:
    """The optimizers of one arm: ManifoldMuon on U, V + Adam (constrained arms), Muon + AdamW, or AdamW."""
    if method == "adamw":
        return [torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=0.01)]
    hidden = [m.weight for m in net.hidden] if method == "muon" else [p for m in net.hidden for p in (m.U, m.V)]
    ids = {id(p) for p in hidden}
    rest = [p for p in net.parameters() if id(p) not in ids]
    if method == "muon":
        from svmuon.optim.muon import Muon

        return [Muon(hidden, lr=lr, weight_decay=0.01, momentum=0.95, adjust_lr_fn="match_rms_adamw",
                     compute_dtype=torch.float32), torch.optim.AdamW(rest, lr=OTHER_LR, weight_decay=0.01)]
    from svmuon.optim.manifold_muon import ManifoldMuon
    from svmuon.orthogonal.stiefel import Stiefel

    return [ManifoldMuon(hidden, lr=lr, momentum=0.9, manifold=Stiefel()),
            torch.optim.Adam(rest, lr=OTHER_LR)]



def layer_entropies(net: Net, power: float) -> list[float]:
    """Singular-value entropy (nats, normalisation power ``power``) of each hidden matrix, from its SVD."""
    from svmuon.spectral.entropy import singular_value_entropy

    with torch.no_grad():
        return [float(singular_value_entropy(W.detach().double(), power=power)) for W in net.weights()]


def stiefel_defect(m: FixedEntropyLinear) -> float:
    """The larger Stiefel defect ``‖QᵀQ - I‖_max`` of the layer's ``U`` and ``V``."""
    from svmuon.orthogonal.stiefel import Stiefel

    return max(float(Stiefel().defect(Q.detach())) for Q in (m.U, m.V))
