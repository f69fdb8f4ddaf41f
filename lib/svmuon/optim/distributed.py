"""Orthogonalise each matrix whole under torch.distributed: DDP, and FSDP2/DTensor-sharded parameters.

msign is not an entrywise map: ``msign([G₁; G₂]) ≠ [msign(G₁); msign(G₂)]`` for row blocks ``G₁, G₂`` of
``G`` (the polar factor of a block is orthogonal on its own rows, the block of the polar factor is not).
So a Muon or OrthogonalMuon step on a parameter that FSDP2 has sharded into row blocks (a ``DTensor``
with ``Shard(0)`` placement, ``torch.distributed.fsdp.fully_shard``) must gather the matrix, compute on
the whole, and keep only this rank's block of the result. Under DDP every rank already holds every whole
matrix and the same all-reduced gradient, so nothing has to be done (every rank computes the same step).

The helpers here do exactly that and nothing else; they leave plain tensors untouched (no copy, no
communication), so single-process code pays nothing:

* :func:`whole` -- the full matrix of a ``DTensor`` (``DTensor.full_tensor()``, an all-gather), a plain
  tensor as it is;
* :func:`shard_like` -- a full matrix, identical on every rank, cut into ``ref``'s placements with no
  communication (``distribute_tensor(..., src_data_rank=None)``: each rank keeps its own block);
* :func:`apply_whole` -- ``shard_like(fn(*map(whole, tensors)), first DTensor)``;

Every rank then computes the same whole result from the same gathered inputs, so a finiteness flag
computed from it is the same on every rank: the optimizers' single check before a step agrees across
ranks without a collective of its own (a flag read from one rank's shard alone would not: that rank would
raise while the others went on into the next collective and waited forever).

References:
    paszke2019pytorch (torch.distributed, DTensor, FSDP2), jordan2024muon, higham2008functions (polar
    factor).
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import torch

__all__ = ["is_dtensor", "whole", "shard_like", "apply_whole"]


def is_dtensor(x: Any) -> bool:
    """True when ``x`` is a ``torch.distributed.tensor.DTensor`` (e.g. a parameter after ``fully_shard``).

    Reads ``sys.modules`` instead of importing ``torch.distributed.tensor`` (a second or more of import
    time): no DTensor can exist before that module has been imported by whoever made it.
    """
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and isinstance(x, module.DTensor)


def whole(x: torch.Tensor) -> torch.Tensor:
    """The full (global) tensor: ``x.full_tensor()`` for a DTensor (all-gather; every rank must call it),
    ``x`` itself (same object, no copy) otherwise.

    Args:
        x: tensor or DTensor of shape ``(..., m, n)``, any dtype.

    Returns:
        A plain tensor of the global shape, on ``x``'s device, dtype unchanged.
    """
    return x.full_tensor() if is_dtensor(x) else x


def shard_like(full: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Cut ``full`` into the placements of the DTensor ``ref``; return ``full`` unchanged if ``ref`` is plain.

    No communication: ``distribute_tensor(full, mesh, placements, src_data_rank=None)`` keeps this rank's
    block of its own copy of ``full``. That is right when every rank holds the same ``full``, which is the
    case here because every rank computed it from the same gathered inputs with the same kernels.

    Args:
        full: plain tensor of ``ref``'s global shape.
        ref: tensor or DTensor whose mesh and placements the result takes.

    Returns:
        A DTensor placed like ``ref`` (if ``ref`` is one), else ``full``.

    Raises:
        ValueError: ``full.shape`` differs from ``ref``'s global shape.
    """
    if tuple(full.shape) != tuple(ref.shape):
        raise ValueError(f"full must have ref's global shape {tuple(ref.shape)}, got {tuple(full.shape)}")
    if not is_dtensor(ref):
        return full
    from torch.distributed.tensor import distribute_tensor

    return distribute_tensor(full, ref.device_mesh, ref.placements, src_data_rank=None)


def apply_whole(fn: Callable[..., torch.Tensor], *tensors: torch.Tensor) -> torch.Tensor:
    """``fn`` on whole matrices: gather every DTensor argument, call ``fn``, shard the result back.

    The result is placed like the first DTensor among ``tensors``, so ``fn`` must return a tensor of that
    argument's global shape (an update for a parameter, a new parameter). With no DTensor argument this
    is exactly ``fn(*tensors)``.

    Args:
        fn: function of plain tensors ``(..., m, n)`` returning one tensor.
        *tensors: its arguments, plain tensors or DTensors (all on the same mesh).

    Returns:
        ``fn(*whole_tensors)``, placed like the first DTensor argument (plain if there is none).
    """
    ref = next((t for t in tensors if is_dtensor(t)), None)
    if ref is None:
        return fn(*tensors)
    return shard_like(fn(*(whole(t) for t in tensors)), ref)
