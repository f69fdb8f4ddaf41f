"""Muon: momentum, then the steepest-descent direction under the spectral norm, msign (jordan2024muon).

A thin :class:`torch.optim.Optimizer` shell over :func:`svmuon.orthogonal.msign` with the hyperparameter
names and conventions of ``torch.optim.Muon`` (PyTorch >= 2.9, ``torch/optim/_muon.py``):

* momentum buffer ``B <- mu B + (1 - mu) g`` (an exponential average, ``B.lerp_(g, 1 - mu)``);
* Nesterov: ``U = (1 - mu) g + mu B`` (``g.lerp(B, mu)``), else ``U = B``;
* ``O = msign(U)`` by Newton–Schulz (eq-msign; default coefficients: the Keller Jordan quintic, 5 steps);
* decoupled weight decay ``W <- (1 - lr * weight_decay) W`` (loshchilov2019decoupled), then
  ``W <- W - lr' O`` with ``lr' = adjust_lr_fn(lr, shape)``.

Where svmuon differs from ``torch.optim.Muon`` (documented, tested):

* precision follows the device (``compute_dtype``): float32 on CPU, bfloat16 on CUDA; torch's always
  iterates in bfloat16 (30-35x slower than float32 on a CPU). With ``compute_dtype=torch.bfloat16`` the
  updates agree with torch's within bfloat16 rounding.
* normalisation: msign divides by ``‖U‖_F`` after an exact power-of-two rescaling, so the direction is
  invariant under ``U -> c U`` for every ``c > 0``; torch divides by ``max(‖U‖_F, eps)`` in bfloat16. Here
  ``eps`` only damps the step of a vanishing momentum: ``O`` is multiplied by ``min(1, ‖U‖_F / eps)``, so
  both optimizers take no orthogonalised step for ``U = 0`` and identical steps whenever
  ``‖U‖_F >= eps``; ``eps=0`` gives the purely scale-invariant update.
* matrices of the same shape, dtype and device in a group are orthogonalised in one batched msign call.
* non-finite gradients raise ``ValueError`` before anything (parameter or state) is changed.
* FSDP2/DTensor-sharded parameters: the update is gathered once, orthogonalised whole and cut back into
  this rank's block (``svmuon.optim._distributed``), since the msign of a row block is not the row block
  of msign; the finiteness check is agreed on by every rank. Plain tensors (and DDP) pay nothing for it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Callable, Iterable

import torch

from svmuon.optim._checks import check_hyper, check_param, first_nonfinite_gradient
from svmuon.optim._distributed import apply_whole, is_dtensor
from svmuon.orthogonal.coefficients import resolve_coefficients
from svmuon.orthogonal.msign import msign

__all__ = ["Muon", "adjust_lr"]

KELLER_JORDAN = (3.4445, -4.7750, 2.0315)  # jordan2024muon; torch.optim.Muon's default


def adjust_lr(lr: float, adjust_lr_fn: str | None, shape: tuple[int, ...]) -> float:
    """Learning rate of a ``(m, n)`` matrix after the named shape rule (torch.optim.Muon's ``_adjust_lr``).

    * ``None`` or ``"original"`` (jordan2024muon): ``lr * sqrt(max(1, m / n))``. Since ``‖msign(U)‖₂ = 1``,
      this is a step of spectral norm ``lr`` per unit of ``sqrt(max(1, m/n))``, the "spectral norm per
      step" reading: a step whose size as an operator (``‖ΔW‖₂``, the norm of eq-steepest) is
      ``lr * sqrt(m/n)`` for tall matrices, ``lr`` otherwise.
    * ``"match_rms_adamw"`` (liu2025moonlight): ``0.2 * lr * sqrt(max(m, n))``. A full-rank ``msign`` of an
      ``(m, n)`` matrix has RMS entry ``sqrt(min(m, n) / (m n)) = 1 / sqrt(max(m, n))``; this rule makes the
      update's RMS 0.2 ``lr``, the typical RMS of an AdamW update, so AdamW's lr and weight decay carry over.

    Raises:
        ValueError: unknown rule.
    """
    m, n = shape[:2]
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        return lr * math.sqrt(max(1.0, m / n))
    if adjust_lr_fn == "match_rms_adamw":
        return lr * 0.2 * math.sqrt(max(m, n))
    raise ValueError(f"adjust_lr_fn must be None, 'original' or 'match_rms_adamw', got {adjust_lr_fn!r}")


def _check_options(o: dict[str, Any]) -> None:
    """Check one param group's options (constructor defaults merged with the group's own)."""
    lr, weight_decay, momentum, eps = o["lr"], o["weight_decay"], o["momentum"], o["eps"]
    ns_steps, ns_coefficients, adjust_lr_fn, compute_dtype = (
        o["ns_steps"], o["ns_coefficients"], o["adjust_lr_fn"], o["compute_dtype"])
    check_hyper("lr", lr)
    check_hyper("weight_decay", weight_decay)
    check_hyper("momentum", momentum, upper=1.0)
    check_hyper("eps", eps)
    if isinstance(ns_steps, bool) or not isinstance(ns_steps, int) or ns_steps < 1:
        raise ValueError(f"ns_steps must be an integer >= 1, got {ns_steps!r}")
    resolve_coefficients(ns_coefficients, 1)  # raises on a bad schedule
    adjust_lr(1.0, adjust_lr_fn, (1, 1))  # raises on an unknown rule
    if compute_dtype is not None and not (isinstance(compute_dtype, torch.dtype) and compute_dtype.is_floating_point):
        raise TypeError(f"compute_dtype must be None or a floating torch.dtype, got {compute_dtype!r}")


class Muon(torch.optim.Optimizer):
    """Muon for 2-D parameters (jordan2024muon), mirroring ``torch.optim.Muon`` (see the module docstring).

    Args:
        params: iterable of 2-D tensors or of param-group dicts.
        lr: learning rate (>= 0), before ``adjust_lr_fn``.
        weight_decay: decoupled weight decay (>= 0); the parameter is multiplied by ``1 - lr * weight_decay``.
        momentum: ``mu`` in [0, 1).
        nesterov: use ``(1 - mu) g + mu B`` instead of ``B``.
        ns_coefficients: one ``(a, b, c)`` triple, a sequence of triples, or a schedule name of
            :mod:`svmuon.orthogonal.coefficients` (``"keller_jordan"``, ``"polar_express"``, ``"cubic"``).
        eps: momentum norms below ``eps`` shrink the step by ``‖U‖_F / eps`` (0 disables; see module doc).
        ns_steps: Newton–Schulz steps (>= 1).
        adjust_lr_fn: ``None``/``"original"`` or ``"match_rms_adamw"`` (:func:`adjust_lr`).
        compute_dtype: dtype of the Newton–Schulz matmuls; default float32 on CPU, bfloat16 on CUDA.

    Raises:
        ValueError: a parameter that is not 2-D (use ``torch.optim.AdamW`` for biases, gains and other
            non-matrix parameters), bad hyperparameters; at ``step()``, a NaN/Inf gradient (nothing is
            changed then).
        TypeError: sparse or complex gradients.

    References:
        jordan2024muon, liu2025moonlight, loshchilov2019decoupled, paszke2019pytorch (torch.optim.Muon).
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        *,
        weight_decay: float = 0.1,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_coefficients: Any = KELLER_JORDAN,
        eps: float = 1e-7,
        ns_steps: int = 5,
        adjust_lr_fn: str | None = None,
        compute_dtype: torch.dtype | None = None,
    ) -> None:
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=bool(nesterov),
                        ns_coefficients=ns_coefficients, eps=eps, ns_steps=ns_steps,
                        adjust_lr_fn=adjust_lr_fn, compute_dtype=compute_dtype)
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group after checking its hyperparameters and that every parameter is a 2-D matrix."""
        _check_options({**self.defaults, **param_group})
        params = param_group["params"]
        params = [params] if isinstance(params, torch.Tensor) else list(params)
        for i, p in enumerate(params):
            check_param(p, i, "Muon")
            if p.ndim != 2:
                raise ValueError(
                    f"Muon optimises 2-D matrices only; parameter {i} of this group has shape {tuple(p.shape)}. "
                    "Optimise biases, gains, embeddings and other non-matrix parameters with torch.optim.AdamW "
                    "in a second optimizer (jordan2024muon)."
                )
        super().add_param_group({**param_group, "params": params})

    def _validate_grads(self) -> None:
        bad = first_nonfinite_gradient(self.param_groups, "Muon")
        if bad is not None:
            raise ValueError(f"gradient of a parameter of shape {tuple(bad[1].shape)} holds NaN or Inf; "
                             "no parameter was changed")

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One Muon step on every parameter with a gradient; parameters without one are untouched."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._validate_grads()
        for group in self.param_groups:
            self._step_group(group)
        return loss

    def _step_group(self, group: dict[str, Any]) -> None:
        mu, lr = group["momentum"], group["lr"]
        batches: dict[tuple, list[tuple[torch.Tensor, torch.Tensor]]] = defaultdict(list)
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = torch.zeros_like(p.grad, memory_format=torch.preserve_format)
            buf = state["momentum_buffer"]
            buf.lerp_(p.grad, 1 - mu)  # B <- mu B + (1 - mu) g
            update = p.grad.lerp(buf, mu) if group["nesterov"] else buf.clone()
            key = ("dtensor", id(p)) if is_dtensor(update) else (tuple(p.shape), update.dtype, update.device)
            batches[key].append((p, update))
        orthogonalise = lambda U: self._orthogonalise(U, group)  # noqa: E731
        for items in batches.values():
            if is_dtensor(items[0][1]):  # gathered, orthogonalised whole, sharded back (one per batch)
                Os = [apply_whole(orthogonalise, items[0][1])]
            else:  # same-shape plain matrices: one batched msign call
                Os = orthogonalise(torch.stack([u for _, u in items])).unbind(0)
            for (p, _), o in zip(items, Os):
                p.mul_(1 - lr * group["weight_decay"])
                p.add_(o.to(p.dtype), alpha=-adjust_lr(lr, group["adjust_lr_fn"], tuple(p.shape)))

    @staticmethod
    def _orthogonalise(U: torch.Tensor, group: dict[str, Any]) -> torch.Tensor:
        """``msign(U)`` by Newton–Schulz, damped by ``min(1, ‖U‖_F / eps)`` (module docstring); ``(..., m, n)``."""
        O = msign(U, method="newton_schulz", steps=group["ns_steps"],
                  coefficients=group["ns_coefficients"], compute_dtype=group["compute_dtype"])
        if group["eps"] > 0:  # exactly 1 when ‖U‖_F >= eps
            fro = torch.linalg.matrix_norm(U.to(torch.float64), keepdim=True)
            O = O * torch.clamp(fro / group["eps"], max=1.0).to(O.dtype)
        return O
