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
* :func:`all_finite` -- whether every entry of every shard is finite, the same answer on every rank (a
  ``bool`` of a sharded DTensor reduction reads only the local shard, so a NaN on one rank would make that
  rank raise while the others went on into a collective and hung);
* :func:`apply_whole_spread` -- the same for a list of matrices, with the work spread over the ranks one
  matrix each (round robin); each result is scattered (DTensor) or broadcast (plain tensor) from the rank
  that computed it.

References:
    paszke2019pytorch (torch.distributed, DTensor, FSDP2), jordan2024muon, higham2008functions (polar
    factor).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

__all__ = ["is_dtensor", "whole", "shard_like", "apply_whole", "apply_whole_spread", "all_finite"]

try:  # torch >= 2.4 exposes DTensor publicly; the book pins a newer torch, so this only guards old installs
    from torch.distributed.tensor import DTensor, distribute_tensor
except ImportError:  # pragma: no cover
    DTensor = None  # type: ignore[assignment,misc]
    distribute_tensor = None  # type: ignore[assignment]


def is_dtensor(x: Any) -> bool:
    """True when ``x`` is a ``torch.distributed.tensor.DTensor`` (e.g. a parameter after ``fully_shard``)."""
    return DTensor is not None and isinstance(x, DTensor)


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
    return distribute_tensor(full, ref.device_mesh, ref.placements, src_data_rank=None)


def all_finite(x: torch.Tensor) -> bool:
    """True iff no entry of ``x`` is NaN or ±Inf, on all shards of a DTensor (one all-reduce of a flag).

    ``bool(torch.isfinite(dt).all())`` on a row-sharded DTensor gives a ``Partial`` result whose ``bool`` is
    this rank's local answer; here the flag is reduced first (``full_tensor()``), so every rank agrees.

    Args:
        x: tensor or DTensor, any shape, floating dtype.

    Returns:
        A Python ``bool``, equal on every rank.
    """
    return bool(whole(torch.isfinite(x).all()))


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


def apply_whole_spread(
    fn: Callable[..., torch.Tensor],
    items: Sequence[Sequence[torch.Tensor]],
    group: Any = None,
) -> list[torch.Tensor]:
    """``[apply_whole(fn, *args) for args in items]`` with the calls of ``fn`` spread over the ranks.

    Rank ``r`` of ``W`` computes items ``r, r + W, r + 2W, ...``; item ``i``'s result then travels from its
    owner ``i % W``: scattered into the placements of the item's first DTensor (``distribute_tensor`` with
    ``src_data_rank=owner``, a rank of the item's 1-D device mesh) or broadcast whole (plain tensors, e.g. under DDP). Each rank does ``1/W`` of
    the matrix work and receives the rest; whether that pays depends on the ratio of matmul time to
    communication time (chapter "Performance and scale"). Without an initialised process group, or with
    one rank, it is :func:`apply_whole` in a loop.

    Args:
        fn: as for :func:`apply_whole`; it must return the same shape and dtype on every rank.
        items: one argument tuple per matrix; the same sequence, in the same order, on every rank.
        group: process group for plain tensors (default: the world); DTensors use their own mesh.

    Returns:
        One result per item, placed like the item's first DTensor (plain if it has none).

    Raises:
        ValueError: an item is empty, or a DTensor lives on a mesh of more than one dimension (HSDP; the
            owner arithmetic here assumes one process group spanning the mesh).
    """
    if any(len(args) == 0 for args in items):
        raise ValueError("every item of items must hold at least one tensor")
    if not (dist.is_available() and dist.is_initialized()):
        return [apply_whole(fn, *args) for args in items]
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    if size == 1:
        return [apply_whole(fn, *args) for args in items]
    out = []
    for i, args in enumerate(items):
        owner = i % size
        ref = next((t for t in args if is_dtensor(t)), args[0])
        if is_dtensor(ref) and ref.device_mesh.ndim != 1:
            raise ValueError(f"apply_whole_spread supports 1-D device meshes, got {ref.device_mesh.ndim}-D")
        fulls = [whole(t) for t in args]  # DTensor: all-gather (every rank must take part)
        if rank == owner:
            result = fn(*fulls).to(ref.dtype).contiguous()
        else:  # placeholder with the result's shape and dtype; its values are overwritten by the owner's
            result = torch.empty(ref.shape, dtype=ref.dtype, device=fulls[0].device)
        if is_dtensor(ref):
            out.append(distribute_tensor(result, ref.device_mesh, ref.placements, src_data_rank=owner))
        else:
            dist.broadcast(result, src=dist.get_global_rank(group, owner) if group is not None else owner,
                           group=group)
            out.append(result)
    return out
