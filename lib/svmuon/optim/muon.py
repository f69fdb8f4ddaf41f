"""Muon: momentum, then the steepest-descent direction under the spectral norm, msign (jordan2024muon).

A thin :class:`torch.optim.Optimizer` shell over :func:`svmuon.optim.functional.muon_updates`, with the
hyperparameter names, defaults and conventions of ``torch.optim.Muon`` (PyTorch >= 2.9,
``torch/optim/_muon.py``):

* momentum buffer ``B <- mu B + (1 - mu) g`` (an exponential average, ``B.lerp_(g, 1 - mu)``);
* Nesterov: ``U = (1 - mu) g + mu B`` (``g.lerp(B, mu)``), else ``U = B``;
* ``O = msign(U)`` by Newton–Schulz (eq-msign; default coefficients: the Keller Jordan quintic, 5 steps,
  whose output singular values lie in :data:`~svmuon.orthogonal.coefficients.KELLER_JORDAN_BAND`
  ``[0.4705, 1.2024]``);
* decoupled weight decay ``W <- (1 - lr * weight_decay) W`` (loshchilov2019decoupled), then
  ``W <- W - lr' O`` with ``lr' = adjust_lr_fn(lr, shape)``.

It passes torch's generic optimizer tests wherever ``torch.optim.Muon`` does (``tests/test_torch_contract.py``:
Tensor ``lr`` and schedulers, named parameters, hooks, ``deepcopy``, state-dict casting and
``weights_only`` loading). Where svmuon differs (documented, tested):

* precision follows the device (``compute_dtype``): float32 on CPU, bfloat16 on CUDA; torch's always
  iterates in bfloat16 (27-33x slower than this float32 step on an older recorded CPU whose bf16 support was
  not recorded; about twice as fast on one with AVX512-BF16: ``python -m svmuon.bench msign``). With
  ``compute_dtype=torch.bfloat16`` the updates agree with torch's within bfloat16 rounding.
* normalisation: msign divides by ``‖U‖_F`` after an exact power-of-two rescaling, so the direction is
  invariant under ``U -> c U`` for every ``c > 0``; torch divides by ``max(‖U‖_F, eps)`` in bfloat16. Here
  ``eps`` damps the step of a vanishing update: ``O`` is multiplied by ``min(1, ‖U‖_F / eps)`` (the eps
  rule of :mod:`svmuon.optim.functional`, one meaning across the package), so both optimizers take no
  orthogonalised step for ``U = 0`` and identical steps whenever ``‖U‖_F >= eps``; ``eps=0`` gives the
  purely scale-invariant update.
* matrices of the same shape, dtype and device in a group are orthogonalised in one batched call; the
  orthogonaliser is resolved once per option set (no option parsing in a step).
* a step is atomic and costs one host synchronisation: all updates are computed, checked together, and
  only then written. A NaN/Inf gradient, a momentum that overflows, or a NaN buffer from a checkpoint
  raises :class:`~svmuon.optim.plan.NonFiniteUpdateError` naming the parameter (its name if the
  optimizer was given ``named_parameters()``), with nothing changed (``nan_policy="skip"`` skips the step
  instead and counts it in ``skipped_steps``); torch.optim.Muon writes the NaN into the weights.
* bad input is refused at construction with a message naming the parameter: non-2-D, complex, integer
  or empty parameters, bad hyperparameters; ``load_state_dict`` applies the same checks to what it loads
  (a torch.optim.Muon state dict loads: the options it lacks, ``compute_dtype`` and ``nan_policy``, keep
  this optimizer's values).
* FSDP2/DTensor-sharded parameters: the update is gathered once, orthogonalised whole and cut back into
  this rank's block (:mod:`svmuon.optim.distributed`), since the msign of a row block is not the row
  block of msign. Plain tensors (and DDP) pay nothing for it.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch

from svmuon._validation import check_int
from svmuon.optim._base import (NAN_POLICIES, Labels, MatrixOptimizer, check_bool, check_decay, check_hyper,
                               check_param)
from svmuon.optim.functional import StepPlan, adjust_lr, muon_updates

__all__ = ["Muon"]

KELLER_JORDAN = (3.4445, -4.7750, 2.0315)  # jordan2024muon; torch.optim.Muon's default


def _dtypes(params: Iterable[Any]) -> list[torch.dtype]:
    """The distinct floating dtypes among ``params`` (anything else is refused by the parameter checks)."""
    return list(dict.fromkeys(p.dtype for p in params if isinstance(p, torch.Tensor) and p.is_floating_point()))


class Muon(MatrixOptimizer):
    """Muon for 2-D parameters (jordan2024muon), behaving as ``torch.optim.Muon`` (see the module docstring).

    Args:
        params: iterable of 2-D tensors, of ``(name, tensor)`` pairs (``model.named_parameters()``), or of
            param-group dicts.
        lr: learning rate (>= 0, float or one-element tensor), before ``adjust_lr_fn``.
        weight_decay: decoupled weight decay (>= 0); the parameter is multiplied by ``1 - lr * weight_decay``.
        momentum: ``mu`` in [0, 1).
        nesterov: use ``(1 - mu) g + mu B`` instead of ``B``.
        ns_coefficients: one ``(a, b, c)`` triple, a sequence of triples (also a NumPy array or tensor of
            shape ``(k, 3)``, stored as lists), or a schedule name of :mod:`svmuon.orthogonal.coefficients`
            (``"keller_jordan"``, ``"polar_express"``, ``"cubic"``); msign's rule
            (:func:`~svmuon.orthogonal.coefficients.resolve_coefficients`).
        eps: update norms below ``eps`` shrink the step by ``‖U‖_F / eps`` (0 disables; see the module doc).
        ns_steps: Newton–Schulz steps (>= 1).
        adjust_lr_fn: ``None``/``"original"`` or ``"match_rms_adamw"`` (:func:`~svmuon.optim.functional.adjust_lr`).
        compute_dtype: dtype of the Newton–Schulz matmuls (float16, bfloat16, float32 or float64, as for
            msign); default float32 on CPU, bfloat16 on CUDA.
        nan_policy: ``"raise"`` (default) or ``"skip"`` (a step with a non-finite update is skipped
            whole and counted in ``skipped_steps``).

    Raises:
        ValueError: a parameter that is not 2-D (use ``torch.optim.AdamW`` for biases, gains and other
            non-matrix parameters), bad hyperparameters (also an ``lr`` and ``weight_decay`` whose decay factor
            ``1 - lr·weight_decay`` overflows a parameter's dtype: at construction, at ``load_state_dict()`` and
            at every step, a tensor ``lr`` within the step's one synchronisation); at ``step()``, a non-finite
            update (:class:`~svmuon.optim.plan.NonFiniteUpdateError`), an ``lr`` changed since construction to NaN,
            Inf or below 0 (a tensor one too, checked within the step's one synchronisation, whatever the
            ``nan_policy``) or a parameter whose shape or dtype changed since its state was created (nothing is
            changed then); at ``load_state_dict()``, a state dict with bad options or state entries, or one of
            another optimizer (the optimizer is left as it was).
        TypeError: complex, integer or non-tensor parameters, a ``nesterov`` that is not a bool, a
            non-integer ``ns_steps``, a ``compute_dtype`` outside the four above; sparse gradients at ``step()``.

    References:
        jordan2024muon, liu2025moonlight, loshchilov2019decoupled, paszke2019pytorch (torch.optim.Muon).
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float | torch.Tensor = 1e-3,
        weight_decay: float = 0.1,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_coefficients: Any = KELLER_JORDAN,
        eps: float = 1e-7,
        ns_steps: int = 5,
        adjust_lr_fn: str | None = None,
        *,
        compute_dtype: torch.dtype | None = None,
        nan_policy: str = "raise",
    ) -> None:
        if isinstance(lr, torch.Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov,
                        ns_coefficients=ns_coefficients, eps=eps, ns_steps=ns_steps, adjust_lr_fn=adjust_lr_fn,
                        compute_dtype=compute_dtype, nan_policy=nan_policy)
        super().__init__(params, defaults)

    _optional_options = ("compute_dtype", "nan_policy")  # svmuon's own: a torch.optim.Muon state dict lacks them

    def _check_group(self, group: dict[str, Any], index: int) -> None:
        self._check_options(group)
        labels = Labels(index, group, list(range(len(group["params"]))))
        for i, p in enumerate(group["params"]):
            check_param(p, labels[i], "Muon")
            if p.ndim != 2:
                raise ValueError(
                    f"Muon only supports 2D parameters whereas we found a parameter with size: {tuple(p.shape)} "
                    f"({labels[i]}). Optimise biases, gains, embeddings and other non-matrix parameters with "
                    "torch.optim.AdamW in a second optimizer (jordan2024muon).")

    def _check_options(self, group: dict[str, Any]) -> None:
        check_hyper("lr", group["lr"], tensor_ok=True)
        check_hyper("weight_decay", group["weight_decay"])
        check_decay(group["lr"], group["weight_decay"], _dtypes(group["params"]))
        check_hyper("momentum", group["momentum"], upper=1.0)
        check_hyper("eps", group["eps"])
        check_bool("nesterov", group["nesterov"])
        check_int(group["ns_steps"], "ns_steps", minimum=1)
        adjust_lr(1.0, group["adjust_lr_fn"], (1, 1))  # raises on an unknown rule
        if group["nan_policy"] not in NAN_POLICIES:
            raise ValueError(f"nan_policy must be one of {NAN_POLICIES}, got {group['nan_policy']!r}")
        self._group_orthogonalizer(group)  # resolves (and so checks) the msign options once

    @staticmethod
    def _check_step_decay(plan: StepPlan, lr: Any, weight_decay: float, params: list, index: int) -> None:
        """At a step, ``1 - lr·weight_decay`` finite in every parameter dtype (``lr`` or ``weight_decay`` may have
        changed since construction): a host ``lr`` at once (:func:`check_decay`), a tensor ``lr`` within the step's
        one synchronisation (computed as the step computes it, in ``lr``'s dtype, then cast). Nothing to check
        without weight decay (the factor is 1), Muon's default: no work added to that step."""
        if weight_decay == 0:
            return
        if not isinstance(lr, torch.Tensor):
            try:
                check_decay(lr, weight_decay, _dtypes(params))
            except ValueError as err:
                raise ValueError(f"Muon: param_groups[{index}]: {err}") from None
        else:
            decay = 1 - lr.detach() * weight_decay
            for dtype in _dtypes(params):
                plan.check_hyper(f"param_groups[{index}]: |1 - lr·weight_decay| (the decoupled decay factor) in "
                                 f"{dtype}", decay.to(dtype).abs())

    def _check_state(self, p: torch.Tensor, state: dict[str, Any], label: str) -> None:
        if state.get("momentum_buffer") is not None:  # None or absent: a fresh buffer at the next step
            self._check_buffer(p, state, "momentum_buffer", label)

    def _group_orthogonalizer(self, group: dict[str, Any]) -> Any:
        return self._orthogonalizer("newton_schulz", group["ns_steps"], group["ns_coefficients"],
                                    group["compute_dtype"])

    def _plan_group(self, plan: StepPlan, group: dict[str, Any], labels: Labels) -> None:
        params = [group["params"][k] for k in labels.positions]
        grads = [p.grad for p in params]
        if any(g.is_sparse for g in grads):
            raise TypeError("Muon does not support sparse gradients")
        buffers = []
        for j, p in enumerate(params):
            buf = self.state[p].get("momentum_buffer") if p in self.state else None  # {} once state[p] was read
            if buf is not None:
                self._check_replaced(p.grad, buf, labels, j)
            else:  # stored at commit only: a refused first step leaves no state behind
                buf = torch.zeros_like(p.grad, memory_format=torch.preserve_format)
                plan.on_commit(lambda p=p, b=buf: self.state[p].__setitem__("momentum_buffer", b))
            buffers.append(buf)
        lr = self._lr(group)
        self._check_step_decay(plan, lr, group["weight_decay"], params, labels.group_index)
        muon_updates(params, grads, buffers, lr=lr, weight_decay=group["weight_decay"],
                     momentum=group["momentum"], nesterov=group["nesterov"],
                     orthogonalize=self._group_orthogonalizer(group), eps=group["eps"],
                     adjust_lr_fn=group["adjust_lr_fn"], labels=labels, plan=plan)
