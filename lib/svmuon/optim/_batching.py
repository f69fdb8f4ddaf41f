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


def shares_entries(t: torch.Tensor) -> bool:
    """Whether two entries of ``t`` are one memory location (a stride 0 along a dimension longer than 1, as
    ``expand`` makes): an in-place write into it raises inside torch, which would come in the middle of a
    step's commit, after other tensors were written."""
    return any(st == 0 and n > 1 for st, n in zip(t.stride(), t.shape))


def check_disjoint(items: Iterable[tuple[Any, str, str]]) -> None:
    """``ValueError`` naming two of the ``(tensor, label, kind)`` items that share a memory location, or one whose
    own entries do (stride 0): a step writes each in place, so one write would land on another. Two items of kind
    ``"param"`` are not compared (parameters are the caller's; they may be views of one buffer, or one tied
    parameter listed twice). Metadata only (no device read); tensors sharing a storage whose spans meet are
    compared element by element on the host (strided views may interleave without overlapping)."""
    spans: dict[tuple, list[tuple[int, int, torch.Tensor, str, str]]] = defaultdict(list)
    for t, label, kind in items:
        if not isinstance(t, torch.Tensor) or is_dtensor(t) or t.numel() == 0 or t.is_meta:
            continue
        if kind != "param" and shares_entries(t):
            raise ValueError(f"{label} has entries that share memory (stride {t.stride()}: an expand()ed tensor?), "
                             "which a step cannot write in place; pass a contiguous copy (.clone())")
        ptr = t.untyped_storage().data_ptr()
        if ptr == 0:
            continue
        size = t.element_size()
        start = t.storage_offset() * size
        end = start + (1 + sum((n - 1) * abs(st) for n, st in zip(t.shape, t.stride()))) * size
        spans[(t.device, ptr)].append((start, end, t, label, kind))
    for rows in spans.values():
        rows.sort(key=lambda r: r[0])
        for i, (_, end, a, label_a, kind_a) in enumerate(rows):
            for start_b, _, b, label_b, kind_b in rows[i + 1:]:
                if start_b >= end:  # sorted by start: no later row reaches back into this one
                    break
                if (kind_a, kind_b) != ("param", "param") and _overlap(a, b):
                    raise ValueError(f"{label_a} and {label_b} share memory: a step writes each in place, so one "
                                     "write would land on the other")


def _overlap(a: torch.Tensor, b: torch.Tensor, chunk: int = 1 << 20) -> bool:
    """Whether two tensors of one storage whose spans meet share an element. Exact where ``b``'s layout is a
    strided view of a dense block (each stride at least the extent of the dimensions inside it: slices, transposes,
    permutations): each element offset of ``a`` is decomposed along ``b``'s strides, largest first, on the host in
    chunks of ``chunk`` elements (memory bounded whatever the sizes). Other layouts count as overlapping."""
    if a.is_contiguous() and b.is_contiguous():
        return True
    if a.element_size() != b.element_size():
        return True  # a reinterpretation of one storage: treated as overlapping
    dims = sorted(((st, n) for st, n in zip(b.stride(), b.shape) if n > 1), reverse=True)
    inner = 1
    for st, n in reversed(dims):  # innermost first: each stride must clear the block inside it
        if st < inner:
            return True
        inner = st * (n - 1) + inner
    index = torch.arange(a.numel())
    for start in range(0, a.numel(), chunk):
        flat, offset = index[start:start + chunk], torch.full((min(chunk, a.numel() - start),), a.storage_offset())
        for n, st in zip(reversed(a.shape), reversed(a.stride())):  # a's element offsets, from its flat indices
            offset += (flat % n) * st
            flat = flat // n
        rest, inside = offset - b.storage_offset(), torch.ones_like(offset, dtype=torch.bool)
        for st, n in dims:
            q = torch.div(rest, st, rounding_mode="floor")
            inside &= (q >= 0) & (q < n)
            rest = rest - q * st
        if bool((inside & (rest == 0)).any()):
            return True
    return False
