"""The ``stiefel`` section of ``python -m svmuon.bench gpu``: one ``ManifoldMuon(Stiefel())`` step at real layer
shapes against one ``svmuon.Muon`` step (the baseline) and, for square shapes, one ``OrthogonalMuon`` step.

Shapes (count × m × n): 4 × 1024×256 and 4 × 4096×1024 (tall projections, the completion solver) and 2 × 4096×4096
(square: the orthogonal group's closed form). Parameters float32 (master weights); each optimizer with its CUDA
defaults, and for the tall shapes the completion by both routes:

* ``manifold_muon_stiefel``: ``Stiefel()``, whose completion takes ``route="auto"``, i.e. ``"newton_schulz"`` on an
  accelerator (``"eigh"`` on the CPU): matrix products only, two msigns by the optimizer's orthogonaliser;
* ``manifold_muon_stiefel_eigh``: ``Stiefel(route="eigh")``: two float64 n × n eigendecompositions and float64
  products (:mod:`svmuon.orthogonal.stiefel.completion`: its normal part has entries up to ~1e6 where ``G⊥`` is nearly
  rank-deficient, and float32 rounding there became tangent residuals of order 1);
* ``manifold_muon_stiefel_eigh32``: ``Stiefel(route="eigh", work_dtype=torch.float32)``: the same in float32 (its
  Gram shift keeps it feasible, at a larger gap: measured on the CPU by ``python -m svmuon.bench stiefel``).

Where bf16 is used: only in Newton–Schulz msign (the optimizers' ``compute_dtype``, bfloat16 on CUDA): Muon's update,
the square case's ``msign([WᵀU]_skew)`` (re-projected onto skew matrices, thm-skew-msign, so its rounding cannot take
the step off the tangent space) and the two msigns of the ``"newton_schulz"`` completion, whose feasibility does not
rest on their accuracy (the rotation is divided by the schedule's largest output singular value, the normal part is
built below ``D^{1/2}``); what bf16 costs there in optimality is measured on the CPU in float32 by
``python -m svmuon.bench stiefel`` (``matmul_float32``), not here. The polar retraction runs in the parameter's dtype.

Times: the median of ``repeats`` steps after ``warmup`` steps, each by CUDA events around ``step()`` (on the CPU,
the wall clock), with a device synchronisation before reading them. Per row: the step times, ``*_over_muon`` (ratio
of the medians), the host reads of one step of each Stiefel optimizer (counted as the tests count them) and, on a
GPU, the synchronisations CUDA reports for one more step (:func:`cuda_syncs`), the largest
``‖WᵀW - I‖_max`` after the timed steps, and the ``"eigh"`` completion's certificate (the largest ``info["gap"]``).
"""

from __future__ import annotations

import statistics
import time
import warnings
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


def cuda_syncs(fn: Callable[[], Any], device: torch.device) -> int | None:
    """Synchronisations of one call of ``fn`` as CUDA sees them (``torch.cuda.set_sync_debug_mode("warn")``, as
    ``tests/test_muon.py`` counts them; it also sees those inside kernels such as ``eigh``'s error check, which the
    host-read count cannot); ``None`` on the CPU."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return len([w for w in caught if "synchroniz" in str(w.message)])


def _points(count: int, m: int, n: int, device: torch.device) -> torch.Tensor:
    gen = torch.Generator(device=device).manual_seed(11)
    Q = torch.linalg.qr(torch.randn(count, m, n, generator=gen, device=device)).Q  # drawn on the device
    return Q.contiguous()


def _makers(compute_dtype: torch.dtype, square: bool) -> dict[str, Callable]:
    from svmuon.optim.manifold_muon import ManifoldMuon, OrthogonalMuon
    from svmuon.optim.muon import Muon
    from svmuon.orthogonal.stiefel import Stiefel

    def stiefel(**options):  # noqa: ANN003, ANN202
        return lambda ps: ManifoldMuon(ps, lr=0.02, momentum=0.95, manifold=Stiefel(**options),
                                       compute_dtype=compute_dtype)

    makers = {"muon": lambda ps: Muon(ps, lr=0.02, momentum=0.95, weight_decay=0.0, compute_dtype=compute_dtype),
              "manifold_muon_stiefel": stiefel()}
    if square:
        makers["orthogonal_muon"] = lambda ps: OrthogonalMuon(ps, lr=0.02, momentum=0.95, compute_dtype=compute_dtype)
    else:
        makers["manifold_muon_stiefel_eigh"] = stiefel(route="eigh")
        makers["manifold_muon_stiefel_eigh32"] = stiefel(route="eigh", work_dtype=torch.float32)
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
        if name.startswith("manifold_muon_stiefel"):
            with host_syncs() as calls:
                opt.step()
            synchronize(device)
            suffix = name.removeprefix("manifold_muon_stiefel")
            row[f"host_syncs_per_step{suffix}"] = len(calls)
            row[f"cuda_syncs_per_step{suffix}"] = cuda_syncs(opt.step, device)
            row[f"defect{suffix}"] = max(float(Stiefel().defect(p.detach())) for p in params)
            gaps = [float(opt.state[p]["info"]["gap"]) for p in params if "gap" in opt.state[p]["info"]]
            row[f"certificate_max{suffix}"] = max(gaps) if gaps else None
        del opt, params
    for name in ("manifold_muon_stiefel", "manifold_muon_stiefel_eigh", "manifold_muon_stiefel_eigh32",
                 "orthogonal_muon"):
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
