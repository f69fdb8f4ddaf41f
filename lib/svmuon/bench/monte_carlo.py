"""``python -m svmuon.bench monte-carlo``: throughput of :func:`svmuon.spectral.entropy_statistics`.

Measures samples × n per second of the streaming Monte Carlo (Shannon entropy of p ~ Unif(Δ^{n-1})) and of
a plain NumPy implementation in the same run (float64 ``rng.exponential``, p = x / Σx, -Σ p log p, then
mean/variance/skewness of the stored entropies), as a ratio, at several n. The two are timed alternately,
so that load from other processes hits both alike; the ratio of medians is the headline number. CPU
seconds of the process (all threads) are recorded too: on a loaded machine the wall-clock ratio mixes in
other processes, while the CPU ratio is the work each implementation needs. Peak
memory: ``tracemalloc`` (both are NumPy on the CPU) in a separate untimed call, and the CUDA allocator's
peak when the device is a GPU.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import tracemalloc
from typing import Any, Callable

import numpy as np
import torch
from scipy import stats

from svmuon._cli import custom_options
from svmuon._cli import device as device_arg
from svmuon._cli import describe, int_at_least, output_file, positive_int
from svmuon.bench._common import hardware, output_path, parse_with_smoke, synchronize, write_result
from svmuon.spectral.monte_carlo import entropy_statistics

SMOKE = dict(sizes=[16, 32], work=8192, repeats=1)  # every code path at tiny sizes


def numpy_baseline(n: int, samples: int, seed: int = 0) -> tuple[float, float, float]:
    """Plain NumPy: float64 draws in chunks of ~2^20 coordinates, store every entropy, then the moments."""
    rng = np.random.default_rng(seed)
    rows = max(1, (1 << 20) // n)
    hs = []
    for start in range(0, samples, rows):
        x = rng.exponential(size=(min(rows, samples - start), n))
        p = x / x.sum(axis=1, keepdims=True)
        hs.append(-(p * np.log(p)).sum(axis=1))
    h = np.concatenate(hs)
    return float(h.mean()), float(h.var(ddof=1)), float(stats.skew(h))


def _peak_bytes(fn: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _cuda_peak(fn: Callable[[], Any], device: torch.device) -> int:
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    synchronize(device)
    return torch.cuda.max_memory_allocated(device)


def measure(n: int, work: int, repeats: int, device: torch.device) -> dict[str, Any]:
    """Alternate timed calls of both implementations at one n; return times, throughputs, ratio, memory."""
    samples = max(2, work // n)
    gen = torch.Generator().manual_seed(n)
    ours = lambda: entropy_statistics(n, 1.0, samples, generator=gen, device=device)  # noqa: E731
    base = lambda: numpy_baseline(n, samples, seed=n)  # noqa: E731
    ours(), base()  # warm-up: thread pool, allocator, CUDA context
    t_ours, t_base, cpu_ours, cpu_base = [], [], [], []
    for _ in range(repeats):
        for fn, times, cpu in ((ours, t_ours, cpu_ours), (base, t_base, cpu_base)):
            synchronize(device)
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            synchronize(device)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    row = {"n": n, "samples": samples, "ours_s": t_ours, "numpy_s": t_base}
    # CPU seconds (all threads of this process): the work each needs, whatever else runs on the machine
    row["ours_cpu_s"], row["numpy_cpu_s"] = cpu_ours, cpu_base
    row["cpu_ratio_median"] = statistics.median(cpu_base) / statistics.median(cpu_ours)
    row["ours_elements_per_s"] = samples * n / statistics.median(t_ours)
    row["numpy_elements_per_s"] = samples * n / statistics.median(t_base)
    row["ratio_median"] = statistics.median(t_base) / statistics.median(t_ours)
    row["ratio_best"] = min(t_base) / min(t_ours)
    row["numpy_peak_bytes"] = _peak_bytes(base)
    row["ours_peak_bytes"] = _cuda_peak(ours, device) if device.type == "cuda" else _peak_bytes(ours)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m svmuon.bench monte-carlo", description=describe(__doc__))
    # n >= 2: at n = 1 every entropy is 0 and the skewness of the baseline is 0 / 0
    parser.add_argument("--sizes", type=int_at_least(2), nargs="+", default=[64, 1024, 4096], help="dimensions n >= 2")
    parser.add_argument("--work", type=positive_int, default=1 << 24, help="samples × n per timed call")
    parser.add_argument("--repeats", type=positive_int, default=5, help="timed calls of each implementation")
    parser.add_argument("--device", type=device_arg, default="cpu", help="cpu or cuda")
    parser.add_argument("--smoke", action="store_true", help=f"tiny sizes ({SMOKE}): a test of the script")
    parser.add_argument("--output", type=output_file, default=None,
                        help="JSON result path (default benchmarks/results/...; smoke runs: the temporary folder)")
    parser.add_argument("--no-save", action="store_true", help="print only")
    args = parse_with_smoke(parser, argv, SMOKE)
    device = torch.device(args.device)
    path = None if args.no_save else output_path(parser, args.output, "monte-carlo", device.type, smoke=args.smoke,
                                                   custom=custom_options(parser, args, ("sizes", "work")))
    rows, load_before = [], os.getloadavg()
    print(f"{'n':>6} {'samples':>8} {'ours Mel/s':>11} {'numpy Mel/s':>12} {'ratio':>6} {'cpu':>5} {'ours MiB':>9} {'numpy MiB':>10}")
    for n in args.sizes:
        r = measure(n, args.work, args.repeats, device)
        rows.append(r)
        print(
            f"{n:>6} {r['samples']:>8} {r['ours_elements_per_s'] / 1e6:>11.1f} {r['numpy_elements_per_s'] / 1e6:>12.1f} "
            f"{r['ratio_median']:>6.2f} {r['cpu_ratio_median']:>5.2f} {r['ours_peak_bytes'] / 2**20:>9.1f} {r['numpy_peak_bytes'] / 2**20:>10.1f}"
        )
    if path is not None:
        write_result(
            path, "monte-carlo", rows, settings=vars(args), baseline="plain NumPy float64 (numpy_baseline)",
            load_average={"before": load_before, "after": os.getloadavg()},  # other processes on the machine
        )
        print(f"wrote {path}")
    print(hardware()["date"], hardware()["processor"])
    return 0
