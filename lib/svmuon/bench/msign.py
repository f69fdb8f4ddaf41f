"""``python -m svmuon.bench msign``: msign by Newton–Schulz against its matmul floor and against the SVD.

For each size n (square n x n, float32 by default on CPU) it builds ``G = U diag(s) Vᵀ`` with random
orthogonal U, V and singular values spread uniformly over [0.1, 1] (condition number 10, so every schedule's
convergence region is reached and the distance to the polar factor measures the schedule, not the input),
whose exact polar factor ``U Vᵀ`` is known without an SVD. It measures, in the same run:

* ``svd_s``: ``msign(G, method="svd")`` (``torch.linalg.svd``), and its accuracy;
* per schedule (keller_jordan 5 steps, polar_express 10, cubic 30): ``ns_s`` the Newton–Schulz time,
  ``floor_s`` the time of the bare matmuls the iteration performs (same shapes, same count, no additions),
  ``ns_over_floor`` = ns_s / floor_s (goal <= 1.2 on CPU fp32), ``svd_over_ns``;
  ``orth_err`` = ``‖QᵀQ − I‖_F / sqrt(n)`` and ``polar_err`` = ``‖Q − U Vᵀ‖_F / sqrt(n)`` (RMS over the
  singular values, computed in float64);
* every time is the minimum over the repeats (the least disturbed run; 1 repeat above n = 512), and the
  load average of the machine is recorded with the result, since shared machines distort timings;
* Muon: one ``svmuon.optim.Muon`` step (default compute dtype: fp32 on CPU) against one
  ``torch.optim.Muon`` step (always bf16) on an n x n parameter, ``torch_over_svmuon`` (goal >= 25 on a CPU
  without native bf16 arithmetic, where bf16 products are emulated; on one with it, such as AVX512-BF16, a bf16
  product is faster than a float32 one and the ratio falls below 1: ``hardware.cpu_bf16`` says which), and
  ``torch_over_svmuon_bf16`` against ``svmuon``'s step with ``compute_dtype=torch.bfloat16``, like for like.

Options: ``--sizes 256 512 1024 2048``, ``--muon-sizes 256 512``, ``--repeats 3`` (1 above 512),
``--device cpu|cuda``, ``--dtype float32|bfloat16``, ``--threads N``, ``--output PATH``. On a loaded shared
machine, ``--threads 1`` avoids the stalls of multi-threaded BLAS waiting for a descheduled thread (which
made two-thread timings vary tenfold from call to call on the machine of the recorded run).
"""

from __future__ import annotations

import argparse
import math
import os
from typing import Any

import torch

from svmuon._cli import custom_options
from svmuon._cli import device as device_arg
from svmuon._cli import describe, output_file, positive_int
from svmuon.bench._common import output_path, parse_with_smoke, synchronize, time_call, write_result
from svmuon.orthogonal.coefficients import default_steps, resolve_coefficients
from svmuon.orthogonal.msign import msign

SCHEDULES = ("keller_jordan", "polar_express", "cubic")
SMOKE = dict(sizes=[16], muon_sizes=[8], repeats=1, device="cpu")  # every section at tiny sizes


def test_matrix(n: int, dtype: torch.dtype, device: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(G, U Vᵀ)``: n x n with singular values uniform on [0.1, 1], built in float64."""
    gen = torch.Generator().manual_seed(seed)
    # not Orthogonal().random: its sign correction changes G, and the recorded errors were measured on this G
    U, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    s = torch.linspace(0.1, 1.0, n, dtype=torch.float64)
    return ((U * s) @ V.T).to(device=device, dtype=dtype), (U @ V.T).to(device)


def _floor_fn(n: int, schedule: list, dtype: torch.dtype, device: str):
    """The bare matmuls of the iteration on an n x n input: X Xᵀ, A A (if c != 0), B X per step."""
    gen = torch.Generator().manual_seed(1)
    X = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    A = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)

    def run() -> None:
        for _, _, c in schedule:
            torch.mm(X, X.T, out=out)
            if c != 0:
                torch.mm(A, A, out=out)
            torch.mm(A, X, out=out)

    return run


def _errors(Q: torch.Tensor, exact: torch.Tensor) -> dict[str, float]:
    Q = Q.to(torch.float64)
    n = Q.shape[-1]
    eye = torch.eye(n, dtype=torch.float64, device=Q.device)
    return {
        "orth_err": float(torch.linalg.matrix_norm(Q.T @ Q - eye) / math.sqrt(n)),
        "polar_err": float(torch.linalg.matrix_norm(Q - exact) / math.sqrt(n)),
    }


def bench_size(n: int, dtype: torch.dtype, device: str, repeats: int) -> dict[str, Any]:
    G, exact = test_matrix(n, dtype, device)
    warm = 1 if n <= 512 else 0
    row: dict[str, Any] = {"n": n, "dtype": str(dtype).replace("torch.", ""), "device": device}
    svd_in = G if dtype != torch.bfloat16 else G.float()
    svd_t = time_call(lambda: msign(svd_in, method="svd"), repeats=repeats, warmup=warm, device=device)
    row["svd_s"] = svd_t["min_s"]
    row["svd"] = _errors(msign(svd_in, method="svd"), exact)
    for name in SCHEDULES:
        steps = default_steps(name)
        sched = resolve_coefficients(name, steps)
        fn = lambda: msign(G, method="newton_schulz", ns_coefficients=name, compute_dtype=dtype)  # noqa: E731
        ns = time_call(fn, repeats=repeats, warmup=warm, device=device)["min_s"]
        floor = time_call(_floor_fn(n, sched, dtype, device), repeats=repeats, warmup=warm, device=device)["min_s"]
        matmuls = steps * (2 if sched[0][2] == 0 else 3)
        row[name] = {"steps": steps, "matmuls": matmuls, "ns_s": ns, "floor_s": floor,
                     "ns_over_floor": ns / floor, "svd_over_ns": row["svd_s"] / ns, **_errors(fn(), exact)}
    return row


def bench_muon(n: int, device: str, repeats: int) -> dict[str, Any]:
    from svmuon.optim.muon import Muon

    gen = torch.Generator().manual_seed(2)
    grad = torch.randn(n, n, generator=gen).to(device)
    out: dict[str, Any] = {"n": n}
    makers = {"svmuon": lambda ps: Muon(ps, lr=0.02),
              "svmuon_bf16": lambda ps: Muon(ps, lr=0.02, compute_dtype=torch.bfloat16),
              "torch": lambda ps: torch.optim.Muon(ps, lr=0.02)}
    for label, make in makers.items():
        p = torch.zeros(n, n, device=device, requires_grad=True)
        opt = make([p])
        p.grad = grad
        out[f"{label}_step_s"] = time_call(opt.step, repeats=repeats, warmup=1, device=device)["min_s"]
    out["torch_over_svmuon"] = out["torch_step_s"] / out["svmuon_step_s"]
    out["torch_over_svmuon_bf16"] = out["torch_step_s"] / out["svmuon_bf16_step_s"]
    return out


def _print_table(rows: list[dict[str, Any]], muon: list[dict[str, Any]]) -> None:
    print(f"{'n':>5} {'schedule':>14} {'steps':>5} {'NS s':>8} {'floor s':>8} {'NS/floor':>8} {'SVD s':>8}"
          f" {'SVD/NS':>7} {'orth err':>9} {'polar err':>9}")
    for r in rows:
        print(f"{r['n']:>5} {'svd':>14} {'':>5} {'':>8} {'':>8} {'':>8} {r['svd_s']:>8.3f} {'':>7}"
              f" {r['svd']['orth_err']:>9.2e} {r['svd']['polar_err']:>9.2e}")
        for name in SCHEDULES:
            s = r[name]
            print(f"{r['n']:>5} {name:>14} {s['steps']:>5} {s['ns_s']:>8.3f} {s['floor_s']:>8.3f}"
                  f" {s['ns_over_floor']:>8.2f} {r['svd_s']:>8.3f} {s['svd_over_ns']:>7.2f}"
                  f" {s['orth_err']:>9.2e} {s['polar_err']:>9.2e}")
    for m in muon:
        print(f"Muon step n={m['n']}: svmuon {m['svmuon_step_s']:.4f} s, svmuon bf16 {m['svmuon_bf16_step_s']:.4f} s,"
              f" torch.optim.Muon {m['torch_step_s']:.4f} s, ratio {m['torch_over_svmuon']:.1f}x"
              f" (bf16 to bf16: {m['torch_over_svmuon_bf16']:.1f}x)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m svmuon.bench msign", description=describe(__doc__))
    ap.add_argument("--sizes", type=positive_int, nargs="+", default=[256, 512, 1024, 2048], metavar="N",
                    help="square matrix sizes n (default: %(default)s)")
    ap.add_argument("--muon-sizes", type=positive_int, nargs="*", default=[256, 512], metavar="N",
                    help="sizes of the Muon-step comparison with torch.optim.Muon (default: %(default)s)")
    ap.add_argument("--repeats", type=positive_int, default=3, help="timed repeats per measurement (default: 3)")
    ap.add_argument("--device", type=device_arg, default="cuda" if torch.cuda.is_available() else "cpu",
                    help="cpu or cuda (default: cuda when available)")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default=None,
                    help="compute dtype (default: float32 on CPU, bfloat16 on CUDA)")
    ap.add_argument("--smoke", action="store_true", help=f"every section at tiny sizes ({SMOKE}): a test of the script")
    ap.add_argument("--output", type=output_file, default=None,
                    help="results file (default: benchmarks/results/; smoke runs: the temporary folder)")
    ap.add_argument("--threads", type=positive_int, default=None,
                    help="torch CPU threads (default: torch's); 1 gives stable timings on a loaded shared machine")
    args = parse_with_smoke(ap, argv, SMOKE)
    path = output_path(ap, args.output, "msign", torch.device(args.device).type, smoke=args.smoke,
                       custom=custom_options(ap, args, ("sizes", "muon_sizes", "dtype")))
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    dtype_name = args.dtype or ("bfloat16" if args.device == "cuda" else "float32")
    dtype = getattr(torch, dtype_name)
    rows = []
    for n in args.sizes:
        rows.append(bench_size(n, dtype, args.device, args.repeats if n <= 512 else 1))
        synchronize(args.device)
    muon = [bench_muon(n, args.device, max(args.repeats, 3)) for n in args.muon_sizes]
    _print_table(rows, muon)
    goals = {"ns_over_floor": "<= 1.2 (CPU fp32)", "svd_over_ns": ">= 10 (GPU bf16, 4096)",
             "torch_over_svmuon": ">= 25 (CPU without native bf16)"}
    write_result(path, "msign", {"sizes": rows, "muon": muon}, goals=goals, load_average=os.getloadavg(),
                 matrix="n x n, singular values uniform on [0.1, 1], exact polar factor U V^T")
    print(f"wrote {path}")
    return 0
