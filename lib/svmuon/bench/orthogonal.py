"""``python -m svmuon.bench orthogonal``: step time of OrthogonalMuon against Muon and geoopt, as ratios.

On the same list of square float32 matrices (``--count`` parameters of each size ``n``), with the same
random gradients, one optimizer step is timed for

* ``muon``: :class:`svmuon.optim.muon.Muon` (weight decay 0) with the msign schedule under test;
* ``orthogonal_muon``: :class:`svmuon.optim.OrthogonalMuon` with the same schedule and compute dtype,
  drift control on (``polar_every=1``, the default) and off (``polar_every=0``);
* ``geoopt_rsgd``: geoopt's RiemannianSGD (momentum 0.9) on ``geoopt.Stiefel`` (kochurov2020geoopt);
* on CUDA also ``torch_muon``: ``torch.optim.Muon`` (bf16 Newton–Schulz), against OrthogonalMuon's bf16
  fast path.

Schedules: Keller Jordan's quintic (5 steps; Muon's default) and Polar Express (10 steps). Reported:
seconds per step (min and median of ``repeats`` rounds, times ``(256/n)²`` for n < 256, timed steps after a warm-up) and the ratio to Muon at equal
precision; the goal is OrthogonalMuon <= 1.3x Muon. Each optimizer is timed in a **pair** with Muon
(:func:`svmuon.bench._common.paired`: one step of each per round, the order swapping), and its ratios
(``<name>/muon``: fastest over fastest; ``<name>/muon_median``: median over median) are taken within its own
pair, whose Muon times are recorded beside it (``<name>_pair_muon``, ``<name>_pair_muon_median``); ``muon`` and
``muon_median`` pool Muon's times over the pairs. Until 2026-12-02 the four optimizers were timed in one
round, which slowed Muon's step more than OrthogonalMuon's at n = 64 (a ratio about 5 % too small; none at
n = 256). ``orthogonal_muon/torch_muon`` is a ratio of two pairs' ratios.
JSON: ``benchmarks/results/orthogonal-<device>-<date>.json``.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import torch

from svmuon._cli import custom_options
from svmuon._cli import device as device_arg
from svmuon._cli import describe, output_file, positive_int
from svmuon.bench._common import output_path, paired, parse_with_smoke, write_result

SCHEDULES = {"keller_jordan": 5, "polar_express": 10}
SMOKE = dict(sizes=[8], count=2, repeats=1, rounds=2)  # every optimizer, torch.optim.Muon included, on the CPU


def _setup(count: int, n: int, device: str, seed: int = 0):
    from svmuon.orthogonal.manifolds import Orthogonal

    gen = torch.Generator().manual_seed(seed)
    W0 = [Orthogonal().project(torch.randn(n, n, generator=gen)).to(device) for _ in range(count)]
    grads = [torch.randn(n, n, generator=gen).to(device) for _ in range(count)]
    return W0, grads


def _make(name: str, params: list[torch.Tensor], schedule: str, device: str):
    from svmuon.optim.manifold_muon import OrthogonalMuon
    from svmuon.optim.muon import Muon

    steps = SCHEDULES[schedule]
    cd = torch.bfloat16 if device == "cuda" else torch.float32
    if name == "muon":
        return Muon(params, lr=0.02, weight_decay=0.0, momentum=0.95, ns_coefficients=schedule, ns_steps=steps, compute_dtype=cd)
    if name.startswith("orthogonal_muon"):
        every = 0 if name.endswith("no_correction") else 1
        return OrthogonalMuon(params, lr=0.02, momentum=0.95, ns_coefficients=schedule, ns_steps=steps,
                              compute_dtype=cd, polar_every=every)
    if name == "geoopt_rsgd":
        import geoopt

        return geoopt.optim.RiemannianSGD(params, lr=0.02, momentum=0.9)
    if name == "torch_muon":
        return torch.optim.Muon(params, lr=0.02, weight_decay=0.0, momentum=0.95, ns_steps=steps)
    raise ValueError(name)


def measure(n: int, count: int, schedule: str, device: str, repeats: int, rounds: int | None = None,
            torch_muon: bool = False) -> dict[str, Any]:
    """Seconds per step (fastest and median) of each optimizer on ``count`` ``n x n`` matrices, each timed in a pair
    with Muon, and its ratios to the Muon steps of its pair (module docstring); ``torch.optim.Muon`` too on CUDA (or
    with ``torch_muon``, as a smoke run does on the CPU)."""
    W0, grads = _setup(count, n, device)
    names = ["muon", "orthogonal_muon", "orthogonal_muon_no_correction", "geoopt_rsgd"]
    if (device == "cuda" or torch_muon) and hasattr(torch.optim, "Muon") and schedule == "keller_jordan":
        names.append("torch_muon")
    out: dict[str, Any] = {"n": n, "count": count, "schedule": schedule, "ns_steps": SCHEDULES[schedule]}
    steps = {}
    for name in names:
        if name == "geoopt_rsgd":
            import geoopt

            params = [geoopt.ManifoldParameter(w.clone(), manifold=geoopt.Stiefel()) for w in W0]
        else:
            params = [torch.nn.Parameter(w.clone()) for w in W0]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        steps[name] = _make(name, params, schedule, device).step
    if rounds is None:
        rounds = repeats * max(1, (256 // n) ** 2)  # small sizes are cheap: more rounds, a cleaner minimum
    # each optimizer in a pair with Muon (``paired``: one round through all of them slowed Muon's step more than the
    # others' at n = 64, by 5 %), its ratios within its own pair
    times = paired(steps, "muon", rounds, warmup=1, device=device)
    for name in names:
        mine, base = times[name]["times"], times[name]["baseline_times"]
        out[name], out[f"{name}_median"] = min(mine), statistics.median(mine)
        if name != "muon":
            out[f"{name}_pair_muon"], out[f"{name}_pair_muon_median"] = min(base), statistics.median(base)
            out[f"{name}/muon"] = out[name] / out[f"{name}_pair_muon"]
            out[f"{name}/muon_median"] = out[f"{name}_median"] / out[f"{name}_pair_muon_median"]
    if "torch_muon" in out:  # a ratio of two pairs' ratios: each relative to the Muon steps of its own pair
        out["orthogonal_muon/torch_muon"] = out["orthogonal_muon/muon"] / out["torch_muon/muon"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m svmuon.bench orthogonal", description=describe(__doc__))
    parser.add_argument("--sizes", type=positive_int, nargs="+", default=[64, 256, 512], metavar="N",
                        help="square parameter sizes n (default: %(default)s)")
    parser.add_argument("--count", type=positive_int, default=4, help="parameters of each size per step (default: 4)")
    parser.add_argument("--repeats", type=positive_int, default=7, help="timed repeats at n = 256 (default: 7)")
    parser.add_argument("--rounds", type=positive_int, default=None,
                        help="timed rounds per size (default: repeats * max(1, (256/n)^2))")
    parser.add_argument("--device", type=device_arg, default="cpu", help="cpu or cuda (default: cpu)")
    parser.add_argument("--threads", type=positive_int, default=None, help="torch threads on CPU (default: torch's)")
    parser.add_argument("--smoke", action="store_true", help=f"every optimizer at tiny sizes ({SMOKE}): a test of the script")
    parser.add_argument("--output", type=output_file, default=None,
                        help="results file (default: benchmarks/results/; smoke runs: the temporary folder)")
    args = parse_with_smoke(parser, argv, SMOKE)
    path = output_path(parser, args.output, "orthogonal", torch.device(args.device).type, smoke=args.smoke,
                       custom=custom_options(parser, args, ("sizes", "count")))
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = []
    for schedule in SCHEDULES:
        for n in args.sizes:
            r = measure(n, args.count, schedule, args.device, args.repeats, args.rounds, torch_muon=args.smoke)
            rows.append(r)
            print(f"{schedule:14s} n={n:5d}  muon {r['muon'] * 1e3:8.2f} ms  orthogonal_muon {r['orthogonal_muon'] * 1e3:8.2f} ms "
                  f"({r['orthogonal_muon/muon']:.2f}x; no correction {r['orthogonal_muon_no_correction/muon']:.2f}x)  "
                  f"geoopt_rsgd {r['geoopt_rsgd'] * 1e3:8.2f} ms ({r['geoopt_rsgd/muon']:.2f}x)", flush=True)
    write_result(path, "orthogonal", rows, goal="orthogonal_muon/muon <= 1.3", device=args.device, protocol="pairs")
    print("wrote", path)
    return 0
