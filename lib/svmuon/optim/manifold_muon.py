"""OrthogonalMuon: Muon whose square matrices stay on the orthogonal group (su2025orthogonal).

A thin :class:`torch.optim.Optimizer` shell over :class:`svmuon.orthogonal.manifolds.Orthogonal`. For each
parameter ``W`` (shape ``(..., n, n)``, ``WᵀW = I``) with Euclidean gradient ``g`` one step is

1. momentum in ambient space, with ``torch.optim.Muon``'s conventions: ``B <- mu B + (1 - mu) g``
   (``B.lerp_(g, 1 - mu)``), ``U = (1 - mu) g + mu B`` with Nesterov, else ``U = B``;
2. the manifold direction ``O = [msign([WᵀU]_skew)]_skew`` (eq-orth-direction; the outer ``[·]_skew``
   removes the symmetric residue that rounding or a bf16 Newton–Schulz leaves);
3. the closed-form retraction ``W <- W(I - lr O)(I - OᵀO + OᵀO/√(1+lr²))`` (eq-orth-retraction), so
   ``lr`` is the spectral-norm length η of the step;
4. drift control: every ``polar_every`` steps one Björck step ``W <- W(3I - WᵀW)/2`` (two matmuls).

Why momentum lives in ambient space. The tangent space ``{WΩ : Ω skew}`` moves with ``W``, so a tangent
momentum would need a vector transport after every step. Keeping ``B`` as a plain average of Euclidean
gradients and re-projecting it through ``[WᵀB]_skew`` at the current point *is* the projection vector
transport of embedded submanifolds (absil2008optimization, §8.1.3): the tangent component of ``B`` at the
new point is exactly what enters msign, and the normal component (``W [WᵀB]_sym``, the part the Lagrange
multiplier absorbs) is discarded each step instead of being carried along. It also keeps the buffer
identical to ``torch.optim.Muon``'s, so a model can switch between the two optimizers without a state
conversion, and it is cheap (no extra matmul: ``WᵀU`` is needed anyway).

Why the drift control, and why every step by default (measured, see the chapter's drift table and
``experiments/results/orthogonal-drift.json``). With an exact msign, ``OᵀO`` is a projector and the
retraction is orthogonal up to rounding, but rounding accumulates: without correction float32 ends at
``‖WᵀW - I‖_max`` between 4e-6 and 1.7e-5 after 10,000 steps (n = 4, 5, a few seeds), i.e. at or above the
1e-5 target. A Newton–Schulz ``O`` whose
singular values ``σ`` are not all 0 or 1 (Keller Jordan's quintic, which keeps them in about
[0.68, 1.12]; a Polar Express spectrum with a pair below its design range; bf16 on CUDA) scales an
eigen-direction of the step by ``√(1 + σ²(σ²-1)(s-1)²)``, ``s = 1/√(1+η²)``, a drift of order
``η⁴/4`` per step: ``2e-2`` after 10,000 steps at η = 0.1 with the quintic. One Björck step maps an error
``ε`` to ``≈ 3ε²/4``, so a per-step correction holds every schedule at rounding level, for two n×n matmuls
against 15–30 in the Newton–Schulz msign itself. ``polar_every=0`` switches it off (float64 with an exact
msign does not need it: ~3e-14 after 10,000 steps).

Hard targets (tests/test_manifold_muon.py): ``‖WᵀW - I‖_max <= 1e-5`` after 10,000 steps in float32 and
``<= 1e-12`` in float64, for even and odd n, with ``msign_method="svd"`` and with the converging
Newton–Schulz schedules (``"polar_express"``, ``"cubic"``), and with ``"keller_jordan"`` thanks to the
correction.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Callable, Iterable

import torch

from svmuon.optim._checks import check_hyper, check_param, first_nonfinite_gradient
from svmuon.optim._distributed import shard_like, whole
from svmuon.orthogonal.coefficients import resolve_coefficients
from svmuon.orthogonal.manifolds import Orthogonal, _polar_correction, _retract, _skew
from svmuon.orthogonal.msign import msign

__all__ = ["OrthogonalMuon"]

_NAN_POLICIES = ("raise", "skip")


def _check_options(o: dict[str, Any]) -> None:
    """Check one param group's options (constructor defaults merged with the group's own)."""
    check_hyper("lr", o["lr"])
    check_hyper("momentum", o["momentum"], upper=1.0)
    if o["msign_method"] not in ("svd", "newton_schulz"):
        raise ValueError(f"msign_method must be 'svd' or 'newton_schulz', got {o['msign_method']!r}")
    if o["msign_method"] == "newton_schulz":
        resolve_coefficients(o["ns_coefficients"], 1)  # raises on a bad schedule
    ns_steps, polar_every, compute_dtype = o["ns_steps"], o["polar_every"], o["compute_dtype"]
    if ns_steps is not None and (isinstance(ns_steps, bool) or not isinstance(ns_steps, int) or ns_steps < 1):
        raise ValueError(f"ns_steps must be None or an integer >= 1, got {ns_steps!r}")
    if isinstance(polar_every, bool) or not isinstance(polar_every, int) or polar_every < 0:
        raise ValueError(f"polar_every must be an integer >= 0, got {polar_every!r}")
    if o["nan_policy"] not in _NAN_POLICIES:
        raise ValueError(f"nan_policy must be one of {_NAN_POLICIES}, got {o['nan_policy']!r}")
    if o["atol"] is not None:
        # a start point off the group by 1e-2 or more is not orthogonal in any useful sense
        check_hyper("atol", o["atol"], upper=1e-2)
    if compute_dtype is not None and not (isinstance(compute_dtype, torch.dtype) and compute_dtype.is_floating_point):
        raise TypeError(f"compute_dtype must be None or a floating torch.dtype, got {compute_dtype!r}")


class OrthogonalMuon(torch.optim.Optimizer):
    """Muon on the orthogonal group: every parameter stays an orthogonal matrix (see the module docstring).

    Args:
        params: iterable of tensors of shape ``(..., n, n)`` (float32 or float64, each matrix orthogonal,
            e.g. from :meth:`svmuon.orthogonal.manifolds.Orthogonal.project`), or of param-group dicts.
        lr: spectral-norm step length η >= 0.
        momentum: ``mu`` in [0, 1). nesterov: Nesterov momentum (as ``torch.optim.Muon``).
        msign_method: ``"newton_schulz"`` (default) or ``"svd"`` (exact, float64-ready).
        ns_steps: Newton–Schulz steps (``None``: the schedule's default, 10 for Polar Express).
        ns_coefficients: ``"polar_express"`` (default), ``"cubic"``, ``"keller_jordan"`` or triples.
        compute_dtype: dtype of the Newton–Schulz matmuls; ``None``: float32/float64 on CPU, bfloat16 on
            CUDA (the fast path: msign in bf16, ``W`` and the retraction in the parameter's dtype).
        polar_every: a Björck correction every this many steps (0: never). Default 1 (module docstring).
        nan_policy: ``"raise"`` (default): a NaN/Inf gradient raises ``ValueError``; ``"skip"``: the whole
            step is skipped (counted in ``skipped_steps``). In both cases no parameter or state changes.
        atol: tolerance of the starting-point check ``‖WᵀW - I‖_max <= atol`` (default ``√eps``: 3.5e-4 in
            float32, 1.5e-8 in float64).

    Raises:
        ValueError: a parameter that is not square ``(..., n, n)`` or not orthogonal (the message names
            ``Orthogonal.project``), bad hyperparameters; at ``step()``, a NaN/Inf gradient (``"raise"``).
        TypeError: a parameter that is not float32/float64, sparse or complex gradients.

    References:
        su2025orthogonal, jordan2024muon, absil2008optimization, bjorck1971iterative, amsel2025polar.
    """

    def __init__(self, params: Iterable[Any], lr: float = 0.02, *, momentum: float = 0.95,
                 nesterov: bool = True, msign_method: str = "newton_schulz", ns_steps: int | None = None,
                 ns_coefficients: Any = None, compute_dtype: torch.dtype | None = None,
                 polar_every: int = 1, nan_policy: str = "raise", atol: float | None = None) -> None:
        if msign_method == "newton_schulz" and ns_coefficients is None:
            ns_coefficients = "polar_express"
        if msign_method == "svd" and (ns_steps is not None or ns_coefficients is not None or compute_dtype is not None):
            raise ValueError("ns_steps, ns_coefficients and compute_dtype apply to msign_method='newton_schulz' only")
        self.skipped_steps = 0
        defaults = dict(lr=lr, momentum=momentum, nesterov=bool(nesterov), msign_method=msign_method,
                        ns_steps=ns_steps, ns_coefficients=ns_coefficients, compute_dtype=compute_dtype,
                        polar_every=polar_every, nan_policy=nan_policy, atol=atol)
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group after checking that every parameter is a square orthogonal float32/float64 matrix."""
        options = {**self.defaults, **param_group}
        _check_options(options)
        params = param_group["params"]
        params = [params] if isinstance(params, torch.Tensor) else list(params)
        atol = options["atol"]
        for i, p in enumerate(params):
            _check_start(p, i, atol)
        super().add_param_group({**param_group, "params": params})

    def _finite_grads(self) -> bool:
        bad = first_nonfinite_gradient(self.param_groups, "OrthogonalMuon")
        if bad is None:
            return True
        group, p = bad
        if group["nan_policy"] == "skip":
            return False
        raise ValueError(f"gradient of a parameter of shape {tuple(p.shape)} holds NaN or Inf; no parameter or "
                         "optimizer state was changed (nan_policy='skip' skips such steps instead)")

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One step on every parameter with a gradient; the others are untouched."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if not self._finite_grads():
            self.skipped_steps += 1
            return loss
        for group in self.param_groups:
            self._step_group(group)
        return loss

    def _step_group(self, group: dict[str, Any]) -> None:
        mu = group["momentum"]
        batches: dict[tuple, list[tuple[torch.Tensor, torch.Tensor]]] = defaultdict(list)
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = torch.zeros_like(p.grad, memory_format=torch.preserve_format)
                state["step"] = 0
            buf = state["momentum_buffer"]
            buf.lerp_(p.grad, 1 - mu)  # B <- mu B + (1 - mu) g, ambient space (module docstring)
            U = p.grad.lerp(buf, mu) if group["nesterov"] else buf
            state["step"] += 1
            key = (tuple(p.shape), p.dtype, p.device, state["step"] % max(group["polar_every"], 1) == 0)
            batches[key].append((p, U))
        for (_, _, _, correct), items in batches.items():
            W = torch.stack([whole(p) for p, _ in items])  # FSDP2/DTensor shards gathered whole (_distributed)
            U = torch.stack([whole(u) for _, u in items]).to(W.dtype)
            O = self._direction(W, U, group)
            W_new = _retract(W, O, group["lr"])  # eq-orth-retraction
            if correct and group["polar_every"] > 0:
                W_new = _polar_correction(W_new)
            for (p, _), w in zip(items, W_new.unbind(0)):
                p.copy_(shard_like(w, p))

    @staticmethod
    def _direction(W: torch.Tensor, U: torch.Tensor, group: dict[str, Any]) -> torch.Tensor:
        """``msign([WᵀU]_skew)`` in the parameter dtype (eq-orth-direction); ``_retract`` re-projects it to skew."""
        A = _skew(W.mT @ U)
        if group["msign_method"] == "svd":
            O = msign(A, method="svd")
        else:
            O = msign(A, method="newton_schulz", steps=group["ns_steps"],
                      coefficients=group["ns_coefficients"], compute_dtype=group["compute_dtype"])
        return O.to(W.dtype)


def _check_start(p: torch.Tensor, i: int, atol: float | None) -> None:
    hint = ("; start from a point of the group, e.g. W.data.copy_(svmuon.Orthogonal().project(W)) "
            "(Orthogonal.project: the nearest orthogonal matrix)")
    check_param(p, i, "OrthogonalMuon")
    if p.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"parameter {i} must be float32 or float64 (master weights), got {p.dtype}")
    if p.ndim < 2 or p.shape[-1] != p.shape[-2] or p.numel() == 0:
        raise ValueError(f"OrthogonalMuon needs square matrices (..., n, n); parameter {i} has shape "
                         f"{tuple(p.shape)}{hint}")
    tol = math.sqrt(torch.finfo(p.dtype).eps) if atol is None else atol
    err = Orthogonal().orthogonality_error(whole(p.detach())).max()
    if not bool(err <= tol):  # also catches NaN
        raise ValueError(f"parameter {i} is not orthogonal: max|WᵀW - I| = {float(err):.3g} > atol = {tol:.3g}{hint}")
