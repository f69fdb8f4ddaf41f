"""``python -m svmuon.bench stiefel``: cost of the Stiefel direction solvers in msign-equivalents, and the step ratio.

For each shape (default 256×64, 1024×256 and the near-square 256×255; random ``W`` on St(m, n) and Gaussian
``G``) and each solver of :mod:`svmuon.orthogonal.stiefel_solvers` (``newton``, ``fixed_point_reduced``,
``fixed_point``, ``dual_ascent``; the msign-based ones with the Polar Express Newton–Schulz msign, 10 steps,
the accurate msign they need), the direction is computed to tangent accuracy ``--tol`` (default 1e-6) in
float64

* **cold**: from the orthogonal group's multiplier ``X = -[WᵀG]_sym``;
* **warm**: one optimizer step later, as ManifoldMuon meets it: ``W`` moved by the polar retraction of
  ``-0.02Φ``, the update ``U' = 0.95U + 0.05(U₀ + N)`` (``U₀`` a fixed gradient field, ``N`` fresh noise of
  the same size), warm-started from the previous reduced multiplier ``Y = [WᵀU]_sym + X`` (rescaled to the new
  update's norm), as the optimizer does.

Cost unit: the **msign-equivalent**, the time of one Polar Express msign (10 Newton–Schulz steps) of the same
shape and dtype, measured interleaved with the solver (each round times one solve and one msign; the
ratio uses the fastest of ``--repeats`` rounds of each, the least disturbed on a shared machine); the time
of Muon's own msign (Keller Jordan, 5 steps) is recorded beside it. Iterations, the residual reached, msign
calls, factorizations and CG products are recorded, and one convergence history per solver (residual
against elapsed msign-equivalents).

Step ratio: one step of ``ManifoldMuon(manifold=Stiefel())`` against one step of :class:`svmuon.optim.Muon`
(weight decay 0, its defaults: Keller Jordan 5 steps) on the same float32 matrix and gradients, timed
interleaved after warm-up steps (so the Stiefel step is warm-started as in training); the goal is <= 1.5
at 256×64 and 1024×256. JSON: ``benchmarks/results/stiefel-<device>-<date>.json``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

from svmuon._cli import describe, matrix_shapes, nonnegative_int, output_file, positive_float, positive_int
from svmuon._cli import seed as seed_arg
from svmuon.bench._common import output_path, parse_with_smoke, write_result

SOLVERS = ("newton", "fixed_point_reduced", "fixed_point", "dual_ascent")
SMOKE = dict(shapes="12x4", ratio_shapes="12x4", repeats=1, ratio_steps=2, ratio_warmup=2)  # every section, tiny
MAX_ITER = {"newton": 50, "fixed_point_reduced": 200, "fixed_point": 50, "dual_ascent": 100}


def _point(m: int, n: int, gen: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    # the values of Stiefel().random(m, n, generator=gen, dtype=dtype), in QR's column-major layout: the
    # recorded residuals and defects were computed from it (another layout rounds differently)
    Q, R = torch.linalg.qr(torch.randn(m, n, generator=gen, dtype=torch.float64))
    return (Q * torch.sign(torch.diagonal(R))).to(dtype)


def _polar(V: torch.Tensor) -> torch.Tensor:
    U, _, Vh = torch.linalg.svd(V.double(), full_matrices=False)
    return (U @ Vh).to(V.dtype)


def _min_time(fn, repeats: int) -> tuple[float, float, Any]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times), out


def _problems(m: int, n: int, dtype: torch.dtype, seed: int) -> dict[str, Any]:
    """The cold problem (W, U) and the warm one (W', U', Y0 from the cold solution), as ManifoldMuon meets it."""
    from svmuon.orthogonal.stiefel_solvers import solve

    gen = torch.Generator().manual_seed(seed)
    W = _point(m, n, gen, dtype)
    U0 = torch.randn(m, n, generator=gen, dtype=dtype)
    U = U0 + torch.randn(m, n, generator=gen, dtype=dtype)
    sol = solve(W, U, tol=1e-10, max_iter=200)
    W2 = _polar(W - 0.02 * sol.Phi)
    U2 = 0.95 * U + 0.05 * (U0 + torch.randn(m, n, generator=gen, dtype=dtype))
    Y0 = sol.Y * (torch.linalg.matrix_norm(U2) / torch.linalg.matrix_norm(U))  # the optimizer's warm start
    return {"cold": (W, U, None), "warm": (W2, U2, Y0)}


def _solver_rows(shape: tuple[int, int], dtype: torch.dtype, tol: float, repeats: int, seed: int) -> list[dict]:
    from svmuon.orthogonal.msign import Orthogonalizer
    from svmuon.orthogonal.stiefel_solvers import solve

    m, n = shape
    pe = Orthogonalizer("newton_schulz", ns_coefficients="polar_express", ns_steps=10)
    kj = Orthogonalizer("newton_schulz", ns_coefficients="keller_jordan", ns_steps=5)
    rows = []
    for start, (W, U, Y0) in _problems(m, n, dtype, seed).items():
        pe(U), kj(U)  # warm-up
        for method in SOLVERS:
            run = lambda: solve(W, U, method=method, tol=tol, max_iter=MAX_ITER[method], Y0=Y0,  # noqa: E731
                                orthogonalize=pe, exact_residual=True)
            run()
            solve_s, msign_s, kj_s, solve_med, msign_med = [], [], [], [], []
            out = None
            for _ in range(repeats):  # interleaved: one solve, one msign (each), per round
                t, _, out = _min_time(run, 1)
                solve_s.append(t)
                msign_s.append(_min_time(lambda: pe(U), 1)[0])
                kj_s.append(_min_time(lambda: kj(U), 1)[0])
            trace: list = []
            solve(W, U, method=method, tol=tol, max_iter=MAX_ITER[method], Y0=Y0, orthogonalize=pe, trace=trace)
            unit = min(msign_s)
            rows.append({
                "shape": [m, n], "dtype": str(dtype).replace("torch.", ""), "solver": method, "start": start,
                "tol": tol, "seconds": min(solve_s), "seconds_median": statistics.median(solve_s),
                "msign_seconds": unit, "msign_kj5_seconds": min(kj_s),
                "msign_equivalents": min(solve_s) / unit,
                "msign_equivalents_median": statistics.median(solve_s) / statistics.median(msign_s),
                "iterations": out.iterations, "residual": float(out.residual.max()), "converged": bool(out.converged),
                "msign_calls": out.msign_calls, "factorizations": out.factorizations, "cg_products": out.cg_iterations,
                "history": [{"msign_equivalents": h["seconds"] / unit, "residual": h["residual"]} for h in trace],
            })
            print(f"  {m}x{n} {start:4s} {method:20s} {rows[-1]['msign_equivalents']:8.2f} msign-eq  "
                  f"it {out.iterations:3d}  residual {rows[-1]['residual']:.1e}  "
                  f"{'converged' if out.converged else 'NOT converged'}", flush=True)
    return rows


def _step_ratio(shape: tuple[int, int], repeats: int, warmup: int, seed: int) -> dict[str, Any]:
    from svmuon.optim.manifold_muon import ManifoldMuon
    from svmuon.optim.muon import Muon
    from svmuon.orthogonal.stiefel import Stiefel

    m, n = shape
    gen = torch.Generator().manual_seed(seed)
    W0 = _point(m, n, gen, torch.float32)
    base = torch.randn(m, n, generator=gen)
    p_s, p_m = torch.nn.Parameter(W0.clone()), torch.nn.Parameter(W0.clone())
    opt_s = ManifoldMuon([p_s], lr=0.02, momentum=0.95, manifold=Stiefel())
    opt_m = Muon([p_m], lr=0.02, momentum=0.95, weight_decay=0.0)
    ts, tm = [], []
    iterations = []
    for k in range(warmup + repeats):
        g = base + torch.randn(m, n, generator=gen)
        p_s.grad, p_m.grad = g.clone(), g.clone()
        t0 = time.perf_counter()
        opt_s.step()
        t1 = time.perf_counter()
        opt_m.step()
        t2 = time.perf_counter()
        if k >= warmup:
            ts.append(t1 - t0)
            tm.append(t2 - t1)
            iterations.append(float(opt_s.state[p_s]["info"]["iterations"]))
    return {"shape": [m, n], "dtype": "float32", "manifold_muon_stiefel_s": min(ts), "muon_s": min(tm),
            "ratio": min(ts) / min(tm), "ratio_median": statistics.median(ts) / statistics.median(tm),
            "newton_iterations_mean": statistics.mean(iterations),
            "defect": float(Stiefel().defect(p_s.detach()))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m svmuon.bench stiefel", description=describe(__doc__))
    parser.add_argument("--shapes", default="256x64,1024x256,256x255", help="comma-separated m x n, m >= n")
    parser.add_argument("--ratio-shapes", default="256x64,1024x256", help="shapes of the step-ratio measurement")
    parser.add_argument("--tol", type=positive_float, default=1e-6, help="tangent-residual tolerance of the solvers")
    parser.add_argument("--repeats", type=positive_int, default=3, help="timed rounds per measurement (the min is used)")
    parser.add_argument("--ratio-steps", type=positive_int, default=10,
                        help="timed optimizer steps (after the warm-up steps)")
    parser.add_argument("--ratio-warmup", type=nonnegative_int, default=20,
                        help="untimed optimizer steps first (the momentum buffer and the warm start settle)")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch threads (1: comparable on a shared machine)")
    parser.add_argument("--seed", type=seed_arg, default=0, help="seed of the random test matrices (default 0)")
    parser.add_argument("--note", default="",
                        help="what the JSON should say about the machine while it ran (e.g. 'quiet', 'shared')")
    parser.add_argument("--smoke", action="store_true", help=f"every section at tiny sizes ({SMOKE}): a test of the script")
    parser.add_argument("--output", type=output_file, default=None,
                        help="JSON path (default benchmarks/results/stiefel-cpu-<date>.json; smoke runs: the temporary "
                             "folder)")
    args = parse_with_smoke(parser, argv, SMOKE)
    shapes = {}
    for option in ("shapes", "ratio_shapes"):  # checked here, not by type=, so the JSON keeps the text given
        try:
            shapes[option] = matrix_shapes(tall=True)(getattr(args, option))
        except argparse.ArgumentTypeError as err:
            parser.error(f"argument --{option.replace('_', '-')}: {err}")
    path = output_path(parser, args.output, "stiefel", smoke=args.smoke)
    torch.set_num_threads(args.threads)
    rows = []
    for shape in shapes["shapes"]:
        print(f"solvers at {shape[0]}x{shape[1]} (float64, tol {args.tol:g}):", flush=True)
        rows += _solver_rows(shape, torch.float64, args.tol, args.repeats, args.seed)
    ratios = []
    for shape in shapes["ratio_shapes"]:
        r = _step_ratio(shape, args.ratio_steps, args.ratio_warmup, args.seed)
        print(f"step ratio ManifoldMuon(Stiefel) / Muon at {shape[0]}x{shape[1]} float32: {r['ratio']:.2f} "
              f"(median {r['ratio_median']:.2f}; Newton iterations {r['newton_iterations_mean']:.1f})", flush=True)
        ratios.append(r)
    write_result(path, "stiefel", {"solvers": rows, "step_ratio": ratios}, settings=vars(args),
                 note=" ".join(filter(None, [args.note, "ratios are taken within one run, interleaved, from the "
                                                         "fastest rounds"])))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
