"""``python -m svmuon.bench gpu``: Muon and OrthogonalMuon on a CUDA GPU, against the matmul roofline and
against ``torch.optim.Muon``, in one run of a few minutes.

Measured in the same run (bfloat16 Newton–Schulz, float32 master weights, the default CUDA fast path):

* ``matmul``: the bf16 matmul rate at n = 4096 (``2 n³`` flops per product), the roofline below;
* ``msign``: Newton–Schulz msign (Keller Jordan quintic, 5 steps, ``6 n³`` flops per step on an n x n
  matrix: ``X Xᵀ``, ``A A`` and ``B X``) at n = 1024 … 8192, its flop rate as a fraction of the roofline
  (goal >= 0.70 at 4096), and ``torch.optim.Muon``'s own iteration (``_zeropower_via_newtonschulz``) as the
  baseline, ``svmuon_over_torch`` = time ratio;
* ``grouping``: 24 same-shape matrices orthogonalised one call each vs one batched call;
* ``compile``: ``torch.compile`` of the batched msign vs eager (compile time reported separately);
* ``step``: one optimizer step on a transformer-sized set of square matrices (24 x 2048², 24 x 4096²):
  ``torch.optim.Muon`` (baseline), ``svmuon.optim.Muon``, ``OrthogonalMuon`` with its defaults (Polar
  Express, 10 steps) and with the same 5-step quintic as Muon; ``*_over_torch`` = time ratios (goal for
  OrthogonalMuon <= 1.3);
* ``drift``: ``max ‖WᵀW − I‖_max`` of OrthogonalMuon over 10,000 steps with random gradients, bf16
  msign on float32 weights (goal <= 1e-5);
* ``stiefel``: one ``ManifoldMuon(Stiefel())`` step at real layer shapes (4 × 1024×256, 4 × 4096×1024,
  2 × 4096×4096) against ``svmuon.Muon`` and, square, ``OrthogonalMuon``, timed by CUDA events
  (:mod:`svmuon.bench._gpu_stiefel`, which says where bf16 is used and why the tall case uses float64); goal
  ``manifold_muon_stiefel_over_muon`` <= 1.5 (the target of the manifold-Muon issue).

On a machine without CUDA, or with ``--smoke``, every section runs on the CPU in float32 at tiny sizes
(torch.compile with its ``eager`` backend: the graph capture without code generation, unless
``--no-compile``): a test of the script, not a measurement.

Each section that raises is recorded as ``{"error": ...}`` and the others still run; the exit status is
then 1. Options: ``--smoke``, ``--compile`` / ``--no-compile``, ``--drift-steps N``, ``--output PATH``.
The JSON (``benchmarks/results/gpu-cuda-YYYYMMDD.json``; smoke runs ``gpu-smoke-cpu-…`` in the temporary
folder; with another ``--drift-steps`` or ``--no-compile``, ``gpu-custom-cuda-YYYYMMDD-<id>.json``, which no
chapter reads) records the GPU name, driver, torch and CUDA versions and the date
(``svmuon.bench._common.write_result``).

References: jordan2024muon (Muon, the quintic), amsel2025polar (Polar Express), su2025orthogonal
(OrthogonalMuon), paszke2019pytorch (torch.optim.Muon, torch.compile).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import subprocess
import time
from typing import Any

import torch

from svmuon._cli import describe, output_file, positive_int
from svmuon.bench import _gpu_stiefel
from svmuon.bench._common import output_path, synchronize, time_call, write_result
from svmuon.optim.manifold_muon import OrthogonalMuon
from svmuon.optim.muon import KELLER_JORDAN, Muon
from svmuon.orthogonal.msign import msign

FULL = dict(matmul_n=4096, msign_sizes=[1024, 2048, 4096, 8192], sets=[(24, 2048), (24, 4096)],
            group=(24, 2048), drift=(4, 1024), drift_steps=10_000, drift_every=500, repeats=10, warmup=3,
            stiefel_sets=_gpu_stiefel.FULL)
SMOKE = dict(matmul_n=128, msign_sizes=[32, 64], sets=[(4, 32)], group=(4, 32), drift=(2, 16),
             drift_steps=200, drift_every=50, repeats=2, warmup=1, stiefel_sets=_gpu_stiefel.SMOKE)
GOALS = {"msign_fraction_of_matmul_at_4096": 0.70, "orthogonal_muon_over_torch_muon": 1.3,
         "drift_max": 1e-5, "manifold_muon_stiefel_over_muon": 1.5}
NS = dict(method="newton_schulz", ns_coefficients="keller_jordan", ns_steps=5)


def device_info(device: torch.device) -> dict[str, Any]:
    """GPU name, driver, CUDA and torch versions, date (UTC); ``None`` for the GPU fields on a CPU."""
    info: dict[str, Any] = {"device": device.type, "torch": torch.__version__, "cuda": torch.version.cuda,
                            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                            "gpu": None, "driver": None, "capability": None, "memory_gib": None}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(gpu=props.name, capability=f"{props.major}.{props.minor}",
                    memory_gib=round(props.total_memory / 2**30, 1), driver=_driver_version())
    return info


def _driver_version() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True)
        return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def _randn(*shape: int, device: torch.device, seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(*shape, generator=gen, device=device, dtype=dtype)


def _time(fn, cfg, device) -> float:
    return time_call(fn, repeats=cfg["repeats"], warmup=cfg["warmup"], device=device)["median_s"]


def bench_matmul(n: int, dtype: torch.dtype, device: torch.device, cfg: dict, inner: int = 10) -> dict[str, Any]:
    """Rate of ``torch.mm`` on n x n operands: ``2 n³ / t`` flop/s (the roofline of the matmul-bound iteration).

    ``inner`` products per timed call, so that one synchronisation does not weigh on a sub-millisecond product.
    """
    A, B = _randn(n, n, device=device, seed=1, dtype=dtype), _randn(n, n, device=device, seed=2, dtype=dtype)
    out = torch.empty_like(A)

    def products() -> None:
        for _ in range(inner):
            torch.mm(A, B, out=out)

    t = _time(products, cfg, device) / inner
    return {"n": n, "dtype": str(dtype), "time_s": t, "tflops": 2 * n**3 / t / 1e12}


def bench_msign(sizes, compute_dtype, device, cfg, roofline_tflops) -> list[dict[str, Any]]:
    """Newton–Schulz msign (5 quintic steps, ``30 n³`` flops) vs the roofline and vs torch.optim.Muon's."""
    from torch.optim._muon import _zeropower_via_newtonschulz  # the baseline's own iteration

    rows = []
    for n in sizes:
        G = _randn(n, n, device=device, seed=n)
        t = _time(lambda: msign(G, compute_dtype=compute_dtype, **NS), cfg, device)
        t_torch = _time(lambda: _zeropower_via_newtonschulz(G, KELLER_JORDAN, 5, 1e-7), cfg, device)
        tflops = 5 * 6 * n**3 / t / 1e12
        rows.append({"n": n, "time_s": t, "tflops": tflops, "fraction_of_matmul": tflops / roofline_tflops,
                     "torch_time_s": t_torch, "svmuon_over_torch": t / t_torch})
    return rows


def bench_grouping(count: int, n: int, compute_dtype, device, cfg) -> dict[str, Any]:
    """``count`` n x n matrices: one msign call each vs one batched call on the stacked ``(count, n, n)``."""
    U = _randn(count, n, n, device=device, seed=3)
    loop = _time(lambda: [msign(u, compute_dtype=compute_dtype, **NS) for u in U.unbind(0)], cfg, device)
    batched = _time(lambda: msign(U, compute_dtype=compute_dtype, **NS), cfg, device)
    return {"count": count, "n": n, "loop_s": loop, "batched_s": batched, "loop_over_batched": loop / batched}


def bench_compile(count: int, n: int, compute_dtype, device, cfg, backend: str = "inductor") -> dict[str, Any]:
    """Eager batched Newton–Schulz vs ``torch.compile`` of it; the first compiled call (compilation) timed apart.

    Both run msign's Newton–Schulz route without its input checks (``_msign_newton_schulz``): the check
    for NaN/Inf reads a value back to Python, which would split the compiled graph.
    """
    from svmuon.orthogonal.coefficients import resolve_coefficients
    from svmuon.orthogonal.msign import _msign_newton_schulz

    U = _randn(count, n, n, device=device, seed=4)
    schedule = resolve_coefficients(NS["ns_coefficients"], NS["ns_steps"])
    route = lambda X: _msign_newton_schulz(X, schedule, compute_dtype)  # noqa: E731
    eager = _time(lambda: route(U), cfg, device)
    compiled = torch.compile(route, backend=backend)
    t0 = time.perf_counter()
    compiled(U)
    synchronize(device)
    compile_s = time.perf_counter() - t0
    t = _time(lambda: compiled(U), cfg, device)
    return {"count": count, "n": n, "backend": backend, "eager_s": eager, "compiled_s": t,
            "compile_time_s": compile_s, "eager_over_compiled": eager / t}


def _orthogonal_set(count: int, n: int, device: torch.device) -> torch.Tensor:
    # drawn on the device, not with Orthogonal().random (a float64 QR on the CPU: minutes at 24 x 4096²)
    return torch.linalg.qr(_randn(count, n, n, device=device, seed=5)).Q.contiguous()


def _step_time(make_opt, W0: torch.Tensor, G: torch.Tensor, cfg, device) -> float:
    params = [torch.nn.Parameter(w.clone()) for w in W0.unbind(0)]
    for p, g in zip(params, G.unbind(0)):
        p.grad = g.clone()
    opt = make_opt(params)
    return _time(opt.step, cfg, device)


def bench_steps(sets, compute_dtype, device, cfg) -> list[dict[str, Any]]:
    """One step of each optimizer on ``count`` float32 n x n matrices, as time ratios to torch.optim.Muon."""
    makers = {
        "torch_muon": lambda ps: torch.optim.Muon(ps, lr=0.02),
        "svmuon_muon": lambda ps: Muon(ps, lr=0.02, compute_dtype=compute_dtype),
        "orthogonal_muon": lambda ps: OrthogonalMuon(ps, lr=0.02, compute_dtype=compute_dtype),
        "orthogonal_muon_quintic5": lambda ps: OrthogonalMuon(
            ps, lr=0.02, compute_dtype=compute_dtype, ns_coefficients="keller_jordan", ns_steps=5),
    }
    rows = []
    for count, n in sets:
        W0, G = _orthogonal_set(count, n, device), _randn(count, n, n, device=device, seed=6)
        row: dict[str, Any] = {"count": count, "n": n}
        for name, make in makers.items():
            row[f"{name}_s"] = _step_time(make, W0, G, cfg, device)
        for name in list(makers)[1:]:
            row[f"{name}_over_torch"] = row[f"{name}_s"] / row["torch_muon_s"]
        rows.append(row)
        del W0, G
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def bench_drift(count: int, n: int, steps: int, every: int, compute_dtype, device) -> dict[str, Any]:
    """``‖WᵀW − I‖_max`` of OrthogonalMuon (default settings, lr 0.02) under random N(0, 1) gradients."""
    W = torch.nn.Parameter(_orthogonal_set(count, n, device))
    opt = OrthogonalMuon([W], lr=0.02, compute_dtype=compute_dtype)
    gen = torch.Generator(device=device).manual_seed(7)
    eye = torch.eye(n, device=device, dtype=torch.float64)
    record = []
    t0 = time.perf_counter()
    for k in range(1, steps + 1):
        W.grad = torch.randn(W.shape, generator=gen, device=device)
        opt.step()
        if k % every == 0 or k == steps:
            Wd = W.detach().double()
            record.append((k, float((Wd.mT @ Wd - eye).abs().max())))
    synchronize(device)
    return {"count": count, "n": n, "steps": steps, "compute_dtype": str(compute_dtype),
            "param_dtype": "torch.float32", "error_by_step": record, "max_error": max(e for _, e in record),
            "seconds": time.perf_counter() - t0}


def _goals(res: dict[str, Any]) -> dict[str, Any]:
    """Each goal's measured value and whether it is met (``None`` where the measurement is missing)."""
    msign_rows = res["msign"] if isinstance(res.get("msign"), list) else []
    frac = next((r["fraction_of_matmul"] for r in msign_rows if r["n"] == 4096), None)
    steps = res["step"] if isinstance(res.get("step"), list) else []
    ratio = max((r["orthogonal_muon_over_torch"] for r in steps), default=None)
    drift = res["drift"].get("max_error") if isinstance(res.get("drift"), dict) else None
    stiefel = res["stiefel"] if isinstance(res.get("stiefel"), list) else []
    stiefel_ratio = max((r["manifold_muon_stiefel_over_muon"] for r in stiefel), default=None)
    values = {"msign_fraction_of_matmul_at_4096": frac, "orthogonal_muon_over_torch_muon": ratio, "drift_max": drift,
              "manifold_muon_stiefel_over_muon": stiefel_ratio}
    out = {}
    for name, value in values.items():
        goal = GOALS[name]
        met = None if value is None else (value >= goal if name.startswith("msign") else value <= goal)
        out[name] = {"goal": goal, "value": value, "met": met}
    return out


def _section(res: dict[str, Any], key: str, fn) -> None:
    """Run one measurement; an exception is recorded as ``{"error": ...}`` so one failure keeps the others
    (a GPU session gets one try)."""
    t0 = time.perf_counter()
    try:
        res[key] = fn()
    except Exception as err:  # noqa: BLE001 - recorded in the JSON and printed
        res[key] = {"error": f"{type(err).__name__}: {err}"}
        print(f"section {key} failed: {res[key]['error']}")
    print(f"[{key}: {time.perf_counter() - t0:.1f} s]", flush=True)


def run(smoke: bool, compile_: bool | None, drift_steps: int | None, device: torch.device) -> dict[str, Any]:
    """All measurements; returns the ``results`` dict of the JSON file."""
    cfg = dict(SMOKE if smoke else FULL)
    if drift_steps is not None:
        cfg["drift_steps"] = drift_steps
    dtype = torch.float32 if smoke else torch.bfloat16  # matmul rate and Newton–Schulz compute dtype
    res: dict[str, Any] = {"device_info": device_info(device), "smoke": smoke, "config": cfg}
    _section(res, "matmul", lambda: bench_matmul(cfg["matmul_n"], dtype, device, cfg))
    roofline = res["matmul"].get("tflops", float("nan"))
    _section(res, "msign", lambda: bench_msign(cfg["msign_sizes"], dtype, device, cfg, roofline))
    _section(res, "grouping", lambda: bench_grouping(*cfg["group"], dtype, device, cfg))
    if compile_ is not False:  # a smoke run captures the graph (backend "eager") without generating code
        backend = "eager" if smoke else "inductor"
        _section(res, "compile", lambda: bench_compile(*cfg["group"], dtype, device, cfg, backend))
    else:
        res["compile"] = {"skipped": "--no-compile"}
    _section(res, "step", lambda: bench_steps(cfg["sets"], dtype, device, cfg))
    _section(res, "drift", lambda: bench_drift(*cfg["drift"], cfg["drift_steps"], cfg["drift_every"], dtype, device))
    _section(res, "stiefel", lambda: _gpu_stiefel.bench_stiefel(cfg["stiefel_sets"], dtype, device, cfg))
    res["goals"] = _goals(res)
    return res


def _print(res: dict[str, Any]) -> None:
    try:
        _print_table(res)
    except (KeyError, TypeError) as err:  # a failed section: its error was printed when it happened
        print(f"(summary incomplete: {err!r})")
    for name, goal in res["goals"].items():
        verdict = "not measured" if goal["met"] is None else ("met" if goal["met"] else "NOT met")
        print(f"goal {name}: {goal['value']} vs {goal['goal']} -> {verdict}")


def _print_table(res: dict[str, Any]) -> None:
    info = res["device_info"]
    print(f"device {info['gpu'] or 'cpu'} (driver {info['driver']}), torch {info['torch']}, {info['date']}"
          + ("  [SMOKE RUN: tiny sizes, not a measurement]" if res["smoke"] else ""))
    m = res["matmul"]
    print(f"matmul n={m['n']} {m['dtype']}: {m['tflops']:.3g} TFLOP/s")
    for r in res["msign"]:
        print(f"msign n={r['n']}: {r['tflops']:.3g} TFLOP/s = {r['fraction_of_matmul']:.2f} of matmul; "
              f"svmuon/torch time {r['svmuon_over_torch']:.2f}")
    g = res["grouping"]
    print(f"grouping {g['count']}x{g['n']}²: loop/batched = {g['loop_over_batched']:.2f}")
    if "eager_over_compiled" in res["compile"]:
        print(f"torch.compile: eager/compiled = {res['compile']['eager_over_compiled']:.2f}")
    for r in res["step"]:
        print(f"step {r['count']}x{r['n']}²: torch.optim.Muon {r['torch_muon_s']:.4f} s; ratios: Muon "
              f"{r['svmuon_muon_over_torch']:.2f}, OrthogonalMuon {r['orthogonal_muon_over_torch']:.2f}, "
              f"OrthogonalMuon(quintic, 5) {r['orthogonal_muon_quintic5_over_torch']:.2f}")
    d = res["drift"]
    print(f"drift after {d['steps']} steps: max |WᵀW − I| = {d['max_error']:.3g}")
    for r in res["stiefel"]:
        square = f", OrthogonalMuon {r['orthogonal_muon_over_muon']:.2f}" if "orthogonal_muon_over_muon" in r else ""
        eigh = (f", Stiefel(route='eigh') {r['manifold_muon_stiefel_eigh_over_muon']:.2f}, in float32 "
                f"{r['manifold_muon_stiefel_eigh32_over_muon']:.2f}") if r["m"] != r["n"] else ""
        print(f"stiefel {r['count']} x {r['m']}x{r['n']}: Muon {r['muon_s']:.4f} s; ratios: ManifoldMuon(Stiefel) "
              f"{r['manifold_muon_stiefel_over_muon']:.2f}{eigh}{square}; host syncs {r['host_syncs_per_step']}, "
              f"defect {r['defect']:.1e}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m svmuon.bench gpu", description=describe(__doc__))
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU in float32 (seconds)")
    parser.add_argument("--compile", dest="compile_", action="store_true", default=None,
                        help="time torch.compile'd msign (the default; smoke runs use the eager backend)")
    parser.add_argument("--no-compile", dest="compile_", action="store_false", help="never use torch.compile")
    parser.add_argument("--drift-steps", type=positive_int, default=None,
                        help="steps of the orthogonality-drift run (default: the benchmark's own)")
    parser.add_argument("--output", type=output_file, default=None,
                        help="results file (default: benchmarks/results/ of the book's repository; smoke runs: the "
                             "temporary folder)")
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available() and not args.smoke
    if not cuda and not args.smoke:
        print("no CUDA device: running the CPU smoke test instead (tiny sizes, float32)")
    device = torch.device("cuda" if cuda else "cpu")
    # what the record measures: the drift over FULL's steps, and the compile section (--compile is the default)
    # (a custom run writes gpu-custom-cuda-<date>-<id>.json, svmuon.bench._common.output_path)
    custom: dict[str, object] = {}
    if args.drift_steps not in (None, FULL["drift_steps"]):
        custom["--drift-steps"] = args.drift_steps
    if args.compile_ is False:
        custom["--no-compile"] = True
    path = output_path(parser, args.output, "gpu", device.type, smoke=not cuda, custom=custom)
    threads = torch.get_num_threads()
    if not cuda:  # tiny matrices: one thread avoids OpenMP spin-waits on a busy CPU (32² matmuls took 50 ms)
        torch.set_num_threads(1)
    try:
        res = run(not cuda, args.compile_, args.drift_steps, device)
    finally:
        torch.set_num_threads(threads)
    _print(res)
    write_result(path, "gpu", res)
    print(f"wrote {path}")
    failed = [k for k, v in res.items() if isinstance(v, dict) and "error" in v]
    if failed:
        print(f"sections that failed (recorded in the JSON): {', '.join(failed)}")
    return 1 if failed else 0
