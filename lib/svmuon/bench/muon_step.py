"""``python -m svmuon.bench muon-step``: the overhead of a Muon step over its own work, syncs, import time.

Three budgets of the optimizer core, measured in one run (``benchmarks/results/muon-step-<device>-<date>.json``):

* **step overhead**: one :class:`svmuon.optim.muon.Muon` step on a single ``n × n`` float32 parameter (default
  n = 512, weight decay on, Nesterov, Keller Jordan's 5 steps) against the named baseline "its own msign
  plus one momentum update": the same :class:`~svmuon.orthogonal.msign.Orthogonalizer`, called as the
  step calls it (on a batch of one ``n × n`` matrix), plus ``B.lerp_(g, 1 - μ)``. The two are timed as a pair,
  interleaved (one of each per round, so a burst of load on a shared machine hits both), and the ratio uses
  the fastest of each; goal <= 1.10.
  The same for :class:`svmuon.optim.OrthogonalMuon` against its msign plus momentum plus the seven
  n × n products of its direction, retraction and Björck step (reported, no goal), timed as a pair of its own.
* **host synchronisations per step**: every call of a ``torch.Tensor`` method that reads a value back
  to the host (``bool``, ``item``, ``tolist``, ``float``, ``int``, ``numpy``) during a step, counted with
  a patched ``torch.Tensor`` (the mock of ``tests/test_muon.py``); goal <= 1 (torch.optim.Muon: 0).
* **import time**: ``python -X importtime -c "import torch; from svmuon import Muon"`` in a fresh
  process; the cumulative time of every top-level import after ``torch`` (goal <= 0.3 s).

Options: ``--n 512``, ``--rounds 15``, ``--threads 1`` (stable timings on a loaded machine; 0: torch's
default), ``--output PATH``, ``--skip-import``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from typing import Any, Callable

import torch

from svmuon._cli import custom_options
from svmuon._cli import describe, nonnegative_int, output_file, positive_int
from svmuon.bench._common import host_syncs, interleaved, output_path, parse_with_smoke, write_result

SMOKE = dict(n=16, rounds=2)  # every section (step overhead, host syncs, import time) at a tiny size
def count_syncs(fn: Callable[[], Any]) -> int:
    """Number of host read-backs (``torch.Tensor.__bool__``, ``item``, ...) made by ``fn()``
    (``svmuon.bench._common.host_syncs``)."""
    with host_syncs() as calls:
        fn()
    return len(calls)


def step_overhead(n: int, rounds: int) -> dict[str, Any]:
    """Muon and OrthogonalMuon step times against their own msign + momentum (+ manifold products)."""
    from svmuon.optim import Muon, OrthogonalMuon
    from svmuon.orthogonal import Orthogonal

    gen = torch.Generator().manual_seed(0)
    g = torch.randn(n, n, generator=gen)
    p = torch.nn.Parameter(torch.randn(n, n, generator=gen) / n**0.5)
    muon = Muon([p], lr=0.02, weight_decay=0.1)
    p.grad = g
    orth = muon._group_orthogonalizer(muon.param_groups[0])
    B, U = torch.zeros(n, n), torch.randn(1, n, n, generator=gen)
    W = torch.nn.Parameter(Orthogonal().project(torch.randn(n, n, generator=gen)))
    W.grad = g
    om = OrthogonalMuon([W], lr=0.02)
    o_orth = om._group_orthogonalizer(om.param_groups[0])
    A, C = torch.randn(n, n, generator=gen), torch.empty(n, n)

    def muon_baseline() -> None:
        orth(U)
        B.lerp_(g, 0.05)

    def orth_baseline() -> None:
        o_orth(U)
        B.lerp_(g, 0.05)
        for _ in range(7):  # WᵀB and W·[WᵀB]_skew (the tangent buffer), WᵀU, OᵀO, W·update, WᵀW, W·R
            torch.mm(A, A, out=C)

    # two pairs, each step with its own baseline only (what ran just before a step changes its time: the Stiefel
    # benchmark's A/B of 2026-12-02)
    times = {**interleaved({"muon_step": muon.step, "msign_plus_momentum": muon_baseline}, rounds, warmup=True),
             **interleaved({"orthogonal_muon_step": om.step, "orthogonal_baseline": orth_baseline}, rounds, warmup=True)}
    out: dict[str, Any] = {"n": n, "rounds": rounds, "muon_schedule": repr(orth), "orthogonal_schedule": repr(o_orth)}
    for k, v in times.items():
        out[f"{k}_s"] = min(v)
        out[f"{k}_median_s"] = sorted(v)[len(v) // 2]
    out["muon_step/msign_plus_momentum"] = out["muon_step_s"] / out["msign_plus_momentum_s"]
    out["orthogonal_muon_step/baseline"] = out["orthogonal_muon_step_s"] / out["orthogonal_baseline_s"]
    out["host_syncs_per_step"] = {"Muon": count_syncs(muon.step), "OrthogonalMuon": count_syncs(om.step),
                                  "torch.optim.Muon": count_syncs(_torch_muon_step(n, g))}
    return out


def _torch_muon_step(n: int, g: torch.Tensor) -> Callable[[], Any]:
    q = torch.nn.Parameter(torch.zeros(n, n))
    q.grad = g
    opt = torch.optim.Muon([q], lr=0.02)
    opt.step()
    return opt.step


def import_time() -> dict[str, Any]:
    """Seconds of every top-level import after ``torch`` in ``import torch; from svmuon import Muon``."""
    code = "import torch; from svmuon import Muon"
    run = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, check=True)
    after_torch, total, modules = False, 0, []
    for line in run.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( +)(\S+)", line)
        if not m:
            continue
        cumulative, depth, name = int(m.group(2)), len(m.group(3)), m.group(4)
        if depth == 1 and name == "torch":
            after_torch = True
        elif depth == 1 and after_torch:
            total += cumulative
            modules.append((name, cumulative / 1e6))
    heavy = [m for m in ("sympy", "scipy", "pandas", "cvxpy", "matplotlib", "torch.distributed.tensor")
             if re.search(rf"\| +{re.escape(m)}$", run.stderr, re.M)]
    return {"seconds_over_torch": total / 1e6, "top_level_after_torch": modules, "heavy_modules_imported": heavy}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m svmuon.bench muon-step", description=describe(__doc__))
    ap.add_argument("--n", type=positive_int, default=512, help="size of the square parameter (default: 512)")
    ap.add_argument("--rounds", type=positive_int, default=15, help="timed rounds (default: 15)")
    ap.add_argument("--threads", type=nonnegative_int, default=1, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--skip-import", action="store_true", help="do not measure the import time")
    ap.add_argument("--smoke", action="store_true", help=f"every section at a tiny size ({SMOKE}): a test of the script")
    ap.add_argument("--output", type=output_file, default=None,
                    help="results file (default: benchmarks/results/; smoke runs: the temporary folder)")
    args = parse_with_smoke(ap, argv, SMOKE)
    path = output_path(ap, args.output, "muon-step", "cpu", smoke=args.smoke,
                       custom=custom_options(ap, args, ("n", "skip_import")))
    if args.threads:
        torch.set_num_threads(args.threads)
    result = {"step": step_overhead(args.n, args.rounds)}
    if not args.skip_import:
        result["import"] = import_time()
    s = result["step"]
    print(f"n = {args.n}: Muon step {s['muon_step_s'] * 1e3:.1f} ms, msign + momentum {s['msign_plus_momentum_s'] * 1e3:.1f} ms, "
          f"ratio {s['muon_step/msign_plus_momentum']:.3f} (goal <= 1.10)")
    print(f"OrthogonalMuon step / (msign + momentum + 7 products): {s['orthogonal_muon_step/baseline']:.3f}")
    print("host syncs per step:", s["host_syncs_per_step"])
    if "import" in result:
        print(f"from svmuon import Muon: {result['import']['seconds_over_torch']:.3f} s over import torch (goal <= 0.3); "
              f"heavy modules imported: {result['import']['heavy_modules_imported'] or 'none'}")
    write_result(path, "muon-step", result,
                 goals={"muon_step/msign_plus_momentum": "<= 1.10", "host_syncs_per_step": "<= 1",
                        "import seconds_over_torch": "<= 0.3"},
                 note="ratios from interleaved rounds of each step with its own baseline (each ratio compares times taken moments apart)")
    print("wrote", path)
    return 0
