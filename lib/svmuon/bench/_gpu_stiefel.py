"""The ``stiefel`` section of ``python -m svmuon.bench gpu``: one ``ManifoldMuon(Stiefel())`` step at real layer
shapes against one ``svmuon.Muon`` step (the baseline) and, for square shapes, one ``OrthogonalMuon`` step.

Shapes (count × m × n): 4 × 1024×256 and 4 × 4096×1024 (tall projections, the completion solver) and 2 × 4096×4096
(square: the orthogonal group's closed form). Parameters float32 (master weights); each optimizer with its CUDA
defaults. Where bf16 is used: only in Newton–Schulz msign (``compute_dtype`` bfloat16 on CUDA): Muon's update and the
square case's ``msign([WᵀU]_skew)``, whose result is re-projected onto skew matrices, so rounding there cannot take
the step off the tangent space (thm-skew-msign). The tall case uses no msign at all: the completion's products and
its two n × n eigendecompositions run in float64 (:mod:`svmuon.orthogonal.stiefel.completion`: its normal part has
entries up to ~1e6 where ``G⊥`` is nearly rank-deficient, and float32 rounding there became tangent residuals of
order 1, so neither bf16 nor float32 is safe there); the polar retraction runs in the parameter's dtype.

Times: the median of ``repeats`` steps after ``warmup`` steps, each by CUDA events around ``step()`` (on the CPU,
the wall clock), with a device synchronisation before reading them. Per row: the step times, ``*_over_muon`` (ratio
of the medians), the host reads of one Stiefel step (counted as the tests count them), the largest
``‖WᵀW - I‖_max`` after the timed steps, and the completion's certificate (the largest ``info["gap"]``).
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch

from svmuon.bench._common import host_syncs, synchronize

__all__ = ["FULL", "SMOKE", "bench_stiefel"]

FULL = [(4, 1024, 256), (4, 4096, 1024), (2, 4096, 4096)]
SMOKE = [(2, 24, 8), (2, 12, 12)]


def time_step(fn: Callable[[], Any], repeats: int, warmup: int, device: torch.device) -> float:
    """Median seconds of ``fn()``: CUDA events around each call on a GPU (read after one synchronisation), the wall
    clock on the CPU."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    if device.type != "cuda":
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize(device)
    return statistics.median(start.elapsed_time(end) / 1e3 for start, end in events)


def _points(count: int, m: int, n: int, device: torch.device) -> torch.Tensor:
    gen = torch.Generator(device=device).manual_seed(11)
    Q = torch.linalg.qr(torch.randn(count, m, n, generator=gen, device=device)).Q  # drawn on the device
    return Q.contiguous()


def _makers(compute_dtype: torch.dtype, square: bool) -> dict[str, Callable]:
    from svmuon.optim.manifold_muon import ManifoldMuon, OrthogonalMuon
    from svmuon.optim.muon import Muon
    from svmuon.orthogonal.stiefel import Stiefel

    makers = {"muon": lambda ps: Muon(ps, lr=0.02, momentum=0.95, weight_decay=0.0, compute_dtype=compute_dtype),
              "manifold_muon_stiefel": lambda ps: ManifoldMuon(ps, lr=0.02, momentum=0.95, manifold=Stiefel(),
                                                               compute_dtype=compute_dtype)}
    if square:
        makers["orthogonal_muon"] = lambda ps: OrthogonalMuon(ps, lr=0.02, momentum=0.95, compute_dtype=compute_dtype)
    return makers


def _row(count: int, m: int, n: int, compute_dtype: torch.dtype, device: torch.device, cfg: dict) -> dict[str, Any]:
    from svmuon.orthogonal.stiefel import Stiefel

    W0 = _points(count, m, n, device)
    gen = torch.Generator(device=device).manual_seed(12)
    G = torch.randn(count, m, n, generator=gen, device=device)
    row: dict[str, Any] = {"count": count, "m": m, "n": n, "param_dtype": "float32",
                           "msign_dtype": str(compute_dtype).replace("torch.", ""),
                           "solver": "square closed form" if m == n else "completion (float64 n x n work)"}
    for name, make in _makers(compute_dtype, m == n).items():
        params = [torch.nn.Parameter(w.clone()) for w in W0.unbind(0)]
        for p, g in zip(params, G.unbind(0)):
            p.grad = g.clone()
        opt = make(params)
        row[f"{name}_s"] = time_step(opt.step, cfg["repeats"], cfg["warmup"], device)
        if name == "manifold_muon_stiefel":
            with host_syncs() as calls:
                opt.step()
            synchronize(device)
            row["host_syncs_per_step"] = len(calls)
            row["defect"] = max(float(Stiefel().defect(p.detach())) for p in params)
            gaps = [float(opt.state[p]["info"]["gap"]) for p in params if "gap" in opt.state[p]["info"]]
            row["certificate_max"] = max(gaps) if gaps else None
        del opt, params
    for name in ("manifold_muon_stiefel", "orthogonal_muon"):
        if f"{name}_s" in row:
            row[f"{name}_over_muon"] = row[f"{name}_s"] / row["muon_s"]
    return row


def bench_stiefel(sets: list[tuple[int, int, int]], compute_dtype: torch.dtype, device: torch.device,
                  cfg: dict) -> list[dict[str, Any]]:
    """One row per ``(count, m, n)`` of ``sets`` (module docstring)."""
    rows = []
    for count, m, n in sets:
        rows.append(_row(count, m, n, compute_dtype, device, cfg))
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows
