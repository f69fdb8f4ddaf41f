"""``python -m svmuon.bench entropy-monitor``: the cost of an EntropyMonitor in a real training loop.

Trains the ``gpt`` experiment's model (size ``cpu``: d_model 128, 3 layers, context 64, batch 32; arm
``muon``) for ``--steps`` steps with :class:`svmuon.spectral.EntropyMonitor` recording all 18 hidden matrices
(Shannon and Rényi-2 of σ and σ²) every ``--every`` steps, and times every training step (forward, backward,
optimizer) and every record separately, in the same run. The overhead is

    (time of all records) / (time of all training steps)  =  record / (every · step)   (goal <= 5 % at every = 50),

the fraction a loop that calls ``monitor.step()`` after each optimizer step spends in the monitor. The
per-record median and the per-step median are reported too, and the number of host read-backs of one
``step()`` off the grid (goal 0) and of one record (goal: one per device). Results:
``benchmarks/results/entropy-monitor-<device>-<date>.json`` with hardware and date.

Options: ``--steps 300``, ``--every 50``, ``--device cpu``, ``--threads 1``, ``--output PATH``, ``--smoke``
(the experiment's tiny size, a few steps: the code path only, no meaningful numbers).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from svmuon._cli import custom_options
from svmuon._cli import describe, nonnegative_int, output_file, positive_int
from svmuon._cli import device as device_arg
from svmuon.bench._common import output_path, parse_with_smoke, synchronize, write_result
from svmuon.bench.muon_step import count_syncs


def measure(size_name: str, steps: int, every: int, device: str) -> dict:
    """Step and record timings of one run (see the module docstring)."""
    import torch.nn.functional as F

    from svmuon.experiments import _gpt_train as gt
    from svmuon.spectral.monitor import EntropyMonitor

    size = gt.SIZES[size_name]
    model, opts = gt.build("muon", size.model, seed=0, lr=4e-3)
    model.to(device)
    data = gt.load_data(size)
    gen = torch.Generator().manual_seed(0)
    monitor = EntropyMonitor(model.matrices(), every=every)
    monitor.record(0)  # warm-up: the first batched SVD of each shape allocates its workspace
    step_s, record_s = [], []
    for step in range(1, steps + 1):
        X, Y = (t.to(device) for t in gt.random_batch(data["train"], size.batch, size.model.context, gen))
        synchronize(device)
        t0 = time.perf_counter()
        for o in opts.values():
            o.zero_grad(set_to_none=True)
        F.cross_entropy(model(X).flatten(0, 1), Y.flatten()).backward()
        for o in opts.values():
            o.step()
        synchronize(device)
        t1 = time.perf_counter()
        recorded = monitor.step(step)
        synchronize(device)
        step_s.append(t1 - t0)
        if recorded:
            record_s.append(time.perf_counter() - t1)
    off_grid = count_syncs(lambda: monitor.step(every * 10**6 + 1))
    on_grid = count_syncs(lambda: monitor.step(every * 10**6 + every))
    return {"size": size_name, "model": size.model.__dict__, "batch": size.batch, "matrices": len(model.matrices()),
            "steps": steps, "every": every, "records": len(record_s),
            "step_median_s": statistics.median(step_s), "record_median_s": statistics.median(record_s),
            "overhead": sum(record_s) / sum(step_s),
            "overhead_from_medians": statistics.median(record_s) / (every * statistics.median(step_s)),
            "host_reads_off_grid": off_grid, "host_reads_per_record": on_grid}


SMOKE = {"steps": 6, "every": 3}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m svmuon.bench entropy-monitor", description=describe(__doc__))
    ap.add_argument("--steps", type=positive_int, default=300, help="training steps (default 300)")
    ap.add_argument("--every", type=positive_int, default=50, help="record every this many steps (default 50)")
    ap.add_argument("--device", type=device_arg, default="cpu", help="cpu (default) or cuda")
    ap.add_argument("--threads", type=nonnegative_int, default=1, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--smoke", action="store_true", help=f"the experiment's tiny model, {SMOKE}: the code path only")
    ap.add_argument("--output", type=output_file, default=None,
                    help="results file (default: benchmarks/results/; smoke runs: the temporary folder)")
    args = parse_with_smoke(ap, argv, SMOKE)
    if args.every > args.steps:
        ap.error(f"argument --every: must be at most --steps ({args.steps}) for one record, got {args.every}")
    path = output_path(ap, args.output, "entropy-monitor", args.device, smoke=args.smoke,
                       custom=custom_options(ap, args, ("steps", "every")))
    if args.threads:
        torch.set_num_threads(args.threads)
    r = measure("smoke" if args.smoke else "cpu", args.steps, args.every, args.device)
    print(f"{r['matrices']} matrices, every {r['every']} steps: step {r['step_median_s'] * 1e3:.1f} ms, record "
          f"{r['record_median_s'] * 1e3:.1f} ms, overhead {100 * r['overhead']:.2f} % (goal <= 5 %); host reads: "
          f"{r['host_reads_off_grid']} off the grid, {r['host_reads_per_record']} per record")
    write_result(path, "entropy-monitor", r,
                 goals={"overhead": "<= 0.05 at every = 50 (issue 21)", "host_reads_off_grid": "0"},
                 note="smoke run: code path only" if args.smoke else "")
    print("wrote", path)
    return 0
