"""Hyperparameter and parameter checks shared by the optimizers (run for every param group)."""

from __future__ import annotations

import math
from typing import Any

import torch

from svmuon.optim._distributed import all_finite


def check_hyper(name: str, value: Any, *, upper: float = math.inf) -> float:
    """Return ``value`` as a float in ``[0, upper)``; TypeError/ValueError naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    if math.isnan(value) or not (0.0 <= value < upper):
        raise ValueError(f"{name} must lie in [0, {upper}), got {value}")
    return float(value)


def check_param(p: Any, i: int, optimizer: str) -> None:
    """A parameter must be a non-empty real floating tensor (before any shape rule of the optimizer)."""
    if not isinstance(p, torch.Tensor):
        raise TypeError(f"{optimizer}: parameter {i} must be a torch.Tensor, got {type(p).__name__}")
    if p.is_complex() or not p.is_floating_point():
        raise TypeError(f"{optimizer}: parameter {i} must have a real floating dtype, got {p.dtype}")
    if p.numel() == 0:
        raise ValueError(f"{optimizer}: parameter {i} is empty (shape {tuple(p.shape)})")


def first_nonfinite_gradient(param_groups: list[dict[str, Any]], optimizer: str) -> tuple[dict, torch.Tensor] | None:
    """The first ``(group, parameter)`` whose gradient holds NaN/Inf, or None; checked before any change.

    Sparse and complex gradients raise ``TypeError``. For a sharded (DTensor) gradient the flag is
    all-reduced, so that every rank gets the same answer and none waits on another that raised.
    """
    for group in param_groups:
        for p in group["params"]:
            g = p.grad
            if g is None:
                continue
            if g.is_sparse or g.is_complex():
                raise TypeError(f"{optimizer} does not support sparse or complex gradients")
            if not all_finite(g):
                return group, p
    return None
