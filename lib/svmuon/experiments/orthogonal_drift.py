"""Drift table of OrthogonalMuon: ‖WᵀW - I‖_max after k steps, by dtype, msign route, n, and drift control.

``python -m svmuon.experiments orthogonal-drift [--steps 10000] [--output PATH]`` runs OrthogonalMuon with
random Gaussian gradients (a worst case for drift: the direction changes completely every step) at
η = 0.1, momentum 0, on a 4x4 and a 5x5 parameter (even and odd n) at once, for every combination of

* dtype: float32, float64;
* msign: ``svd`` (exact), ``polar_express`` (converging Newton–Schulz, 10 steps), ``keller_jordan``
  (Muon's quintic, 5 steps, does not converge);
* ``polar_every``: 0 (no drift control) and 1 (one Björck step after every retraction),

and records the orthogonality error after 1, 10, 100, 1000 and ``--steps`` steps. Single-threaded, fixed
seeds. Results: ``experiments/results/orthogonal-drift.json``. References: su2025orthogonal,
bjorck1971iterative, amsel2025polar, jordan2024muon.
"""

from __future__ import annotations

import argparse
import time

import torch

from svmuon._cli import describe, output_file, positive_int
from svmuon.experiments.runs import default_file, environment, save

NAME = "orthogonal-drift"
METHODS = {
    "svd": dict(msign_method="svd"),
    "polar_express": dict(ns_coefficients="polar_express"),
    "keller_jordan": dict(ns_coefficients="keller_jordan", ns_steps=5),
}
SIZES = (4, 5)


def run_one(dtype: torch.dtype, method: str, polar_every: int, steps: int, seed: int = 0) -> dict:
    """One run; returns ``{"checkpoints": [...], "error": {n: [...]}, "seconds": ...}``."""
    from svmuon.optim.manifold_muon import OrthogonalMuon
    from svmuon.orthogonal.manifolds import Orthogonal

    M = Orthogonal()
    gen = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(M.project(torch.randn(n, n, generator=gen, dtype=torch.float64)).to(dtype)) for n in SIZES]
    opt = OrthogonalMuon(params, lr=0.1, momentum=0.0, polar_every=polar_every, **METHODS[method])
    marks = sorted({k for k in (1, 10, 100, 1000, steps) if k <= steps})
    errors: dict[str, list[float]] = {str(n): [] for n in SIZES}
    t0 = time.perf_counter()
    for k in range(1, steps + 1):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen, dtype=dtype)
        opt.step()
        if k in marks:
            for n, p in zip(SIZES, params):
                errors[str(n)].append(float(M.orthogonality_error(p.detach())))
    return {"checkpoints": marks, "error": errors, "seconds": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m svmuon.experiments orthogonal-drift", description=describe(__doc__))
    parser.add_argument("--steps", type=positive_int, default=10_000, help="steps of each run (default: 10000)")
    parser.add_argument("--output", type=output_file, default=None,
                        help=f"results file (default: experiments/results/{NAME}.json of the book's repository when "
                             "run inside it, else under the working directory)")
    args = parser.parse_args(argv)
    out = args.output or default_file(parser, args, NAME, ("steps",))
    torch.set_num_threads(1)
    rows = []
    for dtype in (torch.float32, torch.float64):
        for method in METHODS:
            for polar_every in (0, 1):
                r = run_one(dtype, method, polar_every, args.steps)
                rows.append({"dtype": str(dtype).replace("torch.", ""), "method": method, "polar_every": polar_every, **r})
                last = {n: f"{e[-1]:.1e}" for n, e in r["error"].items()}
                print(f"{rows[-1]['dtype']:8s} {method:14s} polar_every={polar_every}  final error {last}  ({r['seconds']:.0f} s)", flush=True)
    save(out, {"experiment": NAME, "eta": 0.1, "momentum": 0.0, "sizes": SIZES, "steps": args.steps, "runs": rows,
               "environment": environment(torch_threads=1)})
    print("wrote", out)
    return 0
