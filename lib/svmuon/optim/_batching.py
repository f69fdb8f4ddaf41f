"""Batching helpers of the functional core (:mod:`svmuon.optim.functional`): same-shape parameters stacked into one
batch, their momentum, the lists' checks and labels. Private; no param-group dicts here either."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Sequence

import torch

from svmuon.optim.distributed import is_dtensor, whole

def _stack(tensors: list[torch.Tensor]) -> torch.Tensor:
    """A ``(k, ...)`` batch; a view for ``k = 1``."""
    return tensors[0].unsqueeze(0) if len(tensors) == 1 else torch.stack(tensors)


def _check_lengths(**lists: Sequence[Any] | None) -> None:
    """``ValueError`` unless every given list has the length of the first (``zip`` would silently truncate)."""
    given = {name: len(v) for name, v in lists.items() if v is not None}
    if len(set(given.values())) > 1:
        raise ValueError(f"the per-parameter lists must have equal lengths, got {given}")


def _label(labels: Sequence[Any] | None, i: int) -> Any:
    return labels[i] if labels is not None else f"parameter {i}"


def _batches(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], extra: Sequence[Any] = ()) -> list[list[int]]:
    """Indices grouped by (shape, dtype, device, *extra); a DTensor is a batch of its own."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, (p, g) in enumerate(zip(params, grads)):
        key = ("dtensor", i) if is_dtensor(g) else (tuple(p.shape), g.dtype, p.dtype, g.device,
                                                    *(e[i] for e in extra))
        groups[key].append(i)
    return list(groups.values())


def _momentum(G: torch.Tensor, B: torch.Tensor, momentum: float, nesterov: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(B', U)``: ``B' = μB + (1-μ)G`` out of place, ``U = (1-μ)G + μB'`` (Nesterov) or ``B'`` (torch.optim.Muon)."""
    new_B = B.lerp(G, 1 - momentum)
    return new_B, (G.lerp(new_B, momentum) if nesterov else new_B)


def _batch_momentum(idx: list[int], grads: Sequence[torch.Tensor], buffers: Sequence[torch.Tensor], momentum: float,
                    nesterov: bool) -> tuple[list[torch.Tensor], torch.Tensor]:
    """``([B'_j], U)`` for a batch: ``U`` stacked ``(k, m, n)``, a plain tensor (a DTensor's gathered whole:
    orthogonalising it whole is the only correct way, see :mod:`svmuon.optim.distributed`)."""
    if is_dtensor(grads[idx[0]]):  # a batch of one FSDP2 shard: momentum on the shard, then gather U
        new_B, U = _momentum(grads[idx[0]], buffers[idx[0]], momentum, nesterov)
        return [new_B], whole(U).unsqueeze(0)
    new_B, U = _momentum(_stack([grads[i] for i in idx]), _stack([buffers[i] for i in idx]), momentum, nesterov)
    return list(new_B.unbind(0)), U


def check_disjoint(items: Iterable[tuple[Any, str]]) -> None:
    """``ValueError`` naming two of the labelled tensors that are the same memory, or two contiguous ones that
    overlap: a step writes each in place, so one would overwrite the other. Strided views (column blocks of one
    matrix) may interleave without overlapping: only their exact aliases are refused. Metadata only, no host read."""
    spans: dict[tuple, list[tuple[int, int, bool, tuple, str]]] = defaultdict(list)
    for t, label in items:
        if not isinstance(t, torch.Tensor) or is_dtensor(t) or t.numel() == 0:
            continue
        size = t.element_size()
        start = t.storage_offset() * size
        end = start + (1 + sum((n - 1) * abs(st) for n, st in zip(t.shape, t.stride()))) * size
        layout = (start, tuple(t.shape), t.stride())
        spans[(t.device, t.untyped_storage().data_ptr())].append((start, end, t.is_contiguous(), layout, label))
    for rows in spans.values():
        if len(rows) < 2:
            continue
        rows.sort(key=lambda r: r[0])
        seen: dict[tuple, str] = {}
        reach, owner = -1, ""
        for start, end, contiguous, layout, label in rows:
            other = seen.get(layout) or (owner if contiguous and start < reach else None)
            if other is not None:
                raise ValueError(f"{other} and {label} share memory: a step writes each in place, so one would "
                                 "overwrite the other (give every parameter its own buffer and drift)")
            seen[layout] = label
            if contiguous and end > reach:
                reach, owner = end, label
