"""Timings of the Stiefel benchmark: optimizer steps replayed on recorded gradients, and solvers on Gaussian shapes.

**Step ratio on a real workload** (:func:`step_ratio`). Each optimizer of :data:`OPTIMIZERS` is replayed in a
pair with the baseline (``svmuon.Muon``): both start from the recorded start of the hidden pair and step on the
recorded gradients, one after the other in each round (the order swaps from round to round), single thread. Each
step is timed by the wall clock (``time.perf_counter``) and by the thread's CPU time (``time.thread_time``: what
the step itself consumed, which other jobs on a shared machine do not inflate as much). Over the timed rounds of
its pair, for each optimizer and clock:

* ``ratio_of_medians`` = median of its step times / median of the baseline's step times in the same pair;
* ``ratio_of_minima`` = fastest of its step times / fastest of the baseline's.

Pairs, not one round through all of them (the protocol this benchmark had before): a step's time depends on what
ran just before it, and after a round's other replays (kernel floors, Newton, geoopt) each step ran with colder
caches, Muon's more than the Stiefel steps', so the ratios came out too small (by 12-16 % for the default and
float32 steps in the A/B recorded on 2026-12-02). :func:`one_round` times that protocol beside the pairs in
the same run (its A/B), and :func:`in_training` the steps inside training itself (the check: the pairs' ratios
should agree with it). Every step, in either protocol, runs right after the workload's forward and backward pass on its
minibatch (:func:`~svmuon.bench._workloads.training_context`), what training does between two steps. Ratios of
different pairs may be combined (each is relative to the baseline of its own pair, which cancels the machine's
drift between pairs); their milliseconds may not.

Beside the optimizers, pairs of the same kind time two kinds of floor. :data:`FLOOR`: the default step's two float64
``eigh`` calls alone. :data:`KERNELS`: every dense linear-algebra call of one optimizer's step (the products and
factorisations of :data:`KERNEL_OPS`), recorded as that optimizer steps on the round's gradients (untimed) and then
replayed alone on copies of the same operands (timed): the step's arithmetic without the elementwise work, the
checks and the Python around it. Its ratio to a Muon step is the cost below which no implementation of the same
algorithm with the same kernels can go on this machine, however well it fuses the rest.

Host reads per step are counted as the tests count them (:func:`svmuon.bench._common.host_syncs`) on a few more
rounds, untimed.

**Solver costs on Gaussian shapes** (:func:`solver_rows`): random ``W`` on St(m, n), ``U = U₀ + N`` (Gaussian),
every solver to tangent accuracy ``tol`` in float64, cold (from the orthogonal group's multiplier) and warm (one
optimizer step later, from the previous reduced multiplier, as the optimizer warm-starts). The unit is the
**msign-equivalent**: the time of one Polar Express msign (10 Newton–Schulz steps, the accurate msign the
msign-based solvers need) of the same matrix, timed in the same rounds (one solve, one msign, per round);
``msign_equivalents`` has ``ratio_of_medians`` and ``ratio_of_minima`` over the rounds as defined above.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from svmuon.bench._common import host_syncs, interleaved, rotated

__all__ = ["OPTIMIZERS", "IN_TRAINING", "ONE_ROUND", "FLOOR", "KERNELS", "KERNEL_OPS", "BASELINE", "SOLVERS",
           "step_ratio", "one_round", "in_training", "solver_rows", "summarize"]

BASELINE = "muon"
OPTIMIZERS = ("muon", "stiefel", "stiefel_float32", "stiefel_matmul", "stiefel_newton", "stiefel_amortized",
              "geoopt_rsgd", "eigh_floor", "muon_kernels", "stiefel_kernels", "stiefel_float32_kernels", "geoopt_kernels")
#: not an optimizer: the two batched float64 n × n eigendecompositions the default step needs (``torch.linalg.eigh``
#: of the pair's two Gram-sized matrices, twice), timed in its own pair with the baseline, the floor of the
#: completion's eigh route
FLOOR = "eigh_floor"
#: not optimizers either: the dense linear algebra of the named optimizer's step alone (:class:`_Kernels`)
KERNELS = {"muon_kernels": "muon", "stiefel_kernels": "stiefel", "stiefel_float32_kernels": "stiefel_float32",
           "geoopt_kernels": "geoopt_rsgd"}
#: the aten operations a kernel floor keeps (matched without an in-place ``_`` suffix): products, factorisations,
#: solves. Everything else (elementwise work, reductions, copies, views) is what a fused implementation could save.
KERNEL_OPS = frozenset({"mm", "bmm", "addmm", "baddbmm", "addbmm", "dot", "mv", "_linalg_eigh", "linalg_eigh",
                        "linalg_cholesky_ex", "_linalg_svd", "linalg_qr", "_linalg_solve_ex", "linalg_solve_ex",
                        "linalg_lu_factor_ex", "linalg_lu_solve", "linalg_solve_triangular", "cholesky_solve",
                        "linalg_inv_ex", "_linalg_det", "linalg_householder_product"})
#: the Stiefel options of each ManifoldMuon replayed: the default (completion; on the CPU its route is "eigh"), the
#: completion in float32, the completion by matrix products only (the default route on an accelerator), Newton,
#: the amortized dual ascent
STIEFEL = {"stiefel": {}, "stiefel_float32": {"work_dtype": torch.float32},
           "stiefel_matmul": {"route": "newton_schulz"}, "stiefel_newton": {"solver": "newton"},
           "stiefel_amortized": {"solver": "dual_ascent", "max_iter": 1}}
GEOOPT_LR = 0.1  # the middle of the geoopt_rsgd grid (svmuon.experiments.stiefel_tasks.GRIDS)
SOLVERS = ("completion", "newton", "fixed_point_reduced", "fixed_point", "dual_ascent")
MAX_ITER = {"completion": 0, "newton": 50, "fixed_point_reduced": 200, "fixed_point": 50, "dual_ascent": 100}


class _Floor:
    """What a floor (not an optimizer) answers to :func:`step_ratio`: no solver iterations, no manifold defect."""

    def iterations(self) -> list[float]:
        return []

    def defect(self) -> float:
        return float("nan")


class _EighFloor(_Floor):
    """The completion's two float64 ``eigh`` calls on the pair (stacked ``(2, n, n)``), nothing else: matrices of the
    recorded gradient's size and spectrum (``GᵀG`` of both matrices in canonical orientation), built untimed at
    :meth:`load`. Quacks like :class:`_Replay` (``opt.step()`` runs the two calls)."""

    def __init__(self) -> None:
        self.name, self.opt, self.M = FLOOR, self, None

    def load(self, grads: tuple[torch.Tensor, torch.Tensor]) -> None:
        grams = [g.mT @ g if g.shape[-2] >= g.shape[-1] else g @ g.mT for g in grads]
        same = len({tuple(M.shape) for M in grams}) == 1  # the optimizer batches same-shape matrices
        self.M = [torch.stack(grams).to(torch.float64)] if same else [M.to(torch.float64) for M in grams]

    def step(self) -> None:
        for _ in range(2):
            for M in self.M:
                torch.linalg.eigh(M)


def _hidden_optimizer(name: str, params: list[torch.Tensor], lr: float) -> torch.optim.Optimizer:
    """The optimizer ``name`` (the baseline or a key of :data:`STIEFEL`) of the hidden pair ``params``, momentum 0.9:
    what the replays and :func:`in_training` time."""
    if name == BASELINE:
        from svmuon.optim.muon import Muon

        return Muon(params, lr=lr, momentum=0.9, weight_decay=0.0)
    from svmuon.optim.manifold_muon import ManifoldMuon
    from svmuon.orthogonal.stiefel import Stiefel

    return ManifoldMuon(params, lr=lr, momentum=0.9, manifold=Stiefel(**STIEFEL[name]))


class _Replay:
    """One optimizer on its own copy of the recorded start, fed the recorded gradients."""

    def __init__(self, name: str, start: tuple[torch.Tensor, torch.Tensor], lr: float) -> None:
        self.name, self.transposed = name, (False, False)
        if name == "geoopt_rsgd":
            import geoopt

            self.transposed = (False, True)  # geoopt needs tall points: the wide matrix is stored transposed
            self.params = [geoopt.ManifoldParameter(W.T.contiguous() if t else W.clone(), manifold=geoopt.Stiefel())
                           for W, t in zip(start, self.transposed)]
            self.opt = geoopt.optim.RiemannianSGD(self.params, lr=GEOOPT_LR, momentum=0.9)
            return
        self.params = [torch.nn.Parameter(W.clone()) for W in start]
        self.opt = _hidden_optimizer(name, self.params, lr)

    def load(self, grads: tuple[torch.Tensor, torch.Tensor]) -> None:
        for p, g, t in zip(self.params, grads, self.transposed):
            p.grad = g.T.contiguous() if t else g.clone()

    def iterations(self) -> list[float]:
        """The solver iterations of the last step (ManifoldMuon's diagnostics), one per matrix."""
        if self.name not in STIEFEL:
            return []
        return [float(self.opt.state[p]["info"]["iterations"]) for p in self.params]

    def defect(self) -> float:
        from svmuon.orthogonal.stiefel import Stiefel

        if self.name == BASELINE:
            return float("nan")  # Muon does not keep the constraint
        return max(float(Stiefel().defect(p.detach().T if t else p.detach()))
                   for p, t in zip(self.params, self.transposed))


def _rounds(grads: list, warmup: int, sync_rounds: int) -> tuple[list, list, list]:
    """Split a stream into warm-up, timed and sync-count rounds (the last ones reuse the end of the stream)."""
    timed_end = max(warmup, len(grads) - sync_rounds)
    sync = grads[timed_end:] or grads[-1:]
    return grads[:warmup], grads[warmup:timed_end], (sync * sync_rounds)[:sync_rounds]


class _KernelCalls(TorchDispatchMode):
    """Inside the block, record every :data:`KERNEL_OPS` call with copies of its tensor operands (``calls``)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, list, dict]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204 (torch's protocol)
        kwargs = kwargs or {}
        if func.overloadpacket.__name__.removesuffix("_") in KERNEL_OPS:
            copy = lambda a: a.clone() if isinstance(a, torch.Tensor) else a  # noqa: E731
            self.calls.append((func, [copy(a) for a in args], {k: copy(v) for k, v in kwargs.items()}))
        return func(*args, **kwargs)


class _Kernels(_Floor):
    """One optimizer's step reduced to its dense linear algebra (module docstring): :meth:`load` steps a private
    :class:`_Replay` of that optimizer on the round's gradients (untimed; it follows the same stream as the timed
    one) and records its :data:`KERNEL_OPS` calls; ``opt.step()`` replays them on fresh copies of the operands,
    nothing else. Quacks like :class:`_Replay`."""

    def __init__(self, name: str, start: tuple[torch.Tensor, torch.Tensor], lr: float) -> None:
        self.name, self.opt = name, self
        self.source = _Replay(KERNELS[name], start, lr)
        self.calls: list[tuple[Any, list, dict]] = []

    def load(self, grads: tuple[torch.Tensor, torch.Tensor]) -> None:
        self.source.load(grads)
        with _KernelCalls() as recorder:
            self.source.opt.step()
        self.calls = recorder.calls

    def step(self) -> None:
        for func, args, kwargs in self.calls:
            func(*args, **kwargs)


def _run(name: str, workload: Any) -> Any:
    if name == FLOOR:
        return _EighFloor()
    if name in KERNELS:
        return _Kernels(name, workload.start, workload.lr)
    return _Replay(name, workload.start, workload.lr)


def step_ratio(workload: Any, names: tuple[str, ...] = OPTIMIZERS, *, warmup: int = 20,
               sync_rounds: int = 3) -> dict[str, Any]:
    """Replay ``workload`` (a recorded :class:`~svmuon.bench._workloads.Workload`) with every optimizer of ``names``
    (the baseline first), each in its own pair with the baseline, and time each step (module docstring). The
    baseline's row pools its times over the pairs; its host reads are those of its first pair."""
    first, timed, sync = _rounds(workload.grads, warmup, sync_rounds)
    if not timed:
        raise ValueError(f"no timed rounds: {len(workload.grads)} recorded steps, {warmup} warm-up and {sync_rounds} "
                         "sync-count rounds")
    from svmuon.bench._workloads import training_context

    context = training_context(workload)
    others = [n for n in names if n != BASELINE]
    pairs = {}
    for name in others or [BASELINE]:
        runs = {n: _run(n, workload) for n in dict.fromkeys((BASELINE, name))}
        times, iterations = _timed_rounds(runs, first, timed, context)
        pairs[name] = {"times": times, "iterations": iterations, "syncs": _sync_counts(runs, sync),
                       "defect": runs[name].defect()}
    base = {clock: [t for p in pairs.values() for t in p["times"][BASELINE][clock]] for clock in ("wall_s", "thread_s")}
    first_pair = next(iter(pairs.values()))
    rows = {BASELINE: _row(base, base, [], first_pair["syncs"][BASELINE], float("nan"))}
    del rows[BASELINE]["baseline_times"]  # its own times
    for name, p in pairs.items():
        if name != BASELINE:
            rows[name] = _row(p["times"][name], p["times"][BASELINE], p["iterations"], p["syncs"][name], p["defect"])
    return {"baseline": BASELINE, "protocol": "pairs", "warmup_rounds": len(first), "timed_rounds": len(timed),
            "optimizers": {n: rows[n] for n in names if n in rows}}


def _timed_rounds(runs: dict[str, Any], first: list, timed: list, context: Callable[[int], None] | None
                  ) -> tuple[dict[str, dict[str, list[float]]], list[float]]:
    """Step every run on each round's gradients: the warm-up rounds untimed, then the timed rounds, the order
    rotating by one from round to round (for a pair: swapping), with ``context(k)`` (the training work between two
    steps, ``k`` the round's index in the stream) right before every step. Returns the times per run and clock, and
    the solver iterations of the timed steps of every run but the baseline."""
    names = list(runs)
    times = {n: {"wall_s": [], "thread_s": []} for n in names}
    iterations: list[float] = []
    for k, grads in enumerate(first + timed):
        for name in rotated(names, k):
            run = runs[name]
            run.load(grads)
            if context is not None:
                context(k)
            t0, c0 = time.perf_counter(), time.thread_time()
            run.opt.step()
            c1, t1 = time.thread_time(), time.perf_counter()
            if k >= len(first):
                times[name]["thread_s"].append(c1 - c0)
                times[name]["wall_s"].append(t1 - t0)
                if name != BASELINE:
                    iterations += run.iterations()
    return times, iterations


def _sync_counts(runs: dict[str, Any], sync: list) -> dict[str, list[int]]:
    """Host reads of each run's step, counted on the sync-count rounds (untimed)."""
    syncs: dict[str, list[int]] = {n: [] for n in runs}
    for grads in sync:
        for name, run in runs.items():
            run.load(grads)
            with host_syncs() as calls:
                run.opt.step()
            syncs[name].append(len(calls))
    return syncs


#: the replays timed in one round through all of them too (:func:`one_round`, the protocol the pairs replaced):
#: every one but Newton, whose 0.1-0.2 s steps would make it the slowest part of the benchmark
ONE_ROUND = tuple(n for n in OPTIMIZERS if n != "stiefel_newton")


def one_round(workload: Any, names: tuple[str, ...] = ONE_ROUND, *, warmup: int = 20) -> dict[str, Any]:
    """The A/B of the protocol: every replay of ``names`` (the baseline first) in one round per gradient (the order
    rotating), as the benchmark timed them before it timed pairs, with the same training context before every step.
    Per replay: thread-time median and minimum, and the ratios to the baseline's steps of the same rounds."""
    first, timed, _ = _rounds(workload.grads, warmup, 0)
    if not timed or names[0] != BASELINE:
        raise ValueError(f"one_round needs timed rounds and the baseline first, got {len(timed)} timed rounds and "
                         f"names {names!r}")
    from svmuon.bench._workloads import training_context

    runs = {n: _run(n, workload) for n in names}
    times, _ = _timed_rounds(runs, first, timed, training_context(workload))
    base = times[BASELINE]["thread_s"]
    return {"names": list(names), "timed_rounds": len(timed),
            "optimizers": {n: {"thread_s": _stats(times[n]["thread_s"]), **_ratios(times[n]["thread_s"], base)}
                           for n in names}}


#: the optimizers timed inside training too (:func:`in_training`), to check the replay protocol against
IN_TRAINING = ("muon", "stiefel", "stiefel_float32")


def in_training(workload: Any, names: tuple[str, ...] = IN_TRAINING, *, warmup: int = 20) -> dict[str, Any] | None:
    """The check of the replay protocol: each optimizer of ``names`` (the baseline first) trains its own copy of the
    workload's network, all of them in lockstep on the recorded stream's minibatches (the order rotating from step to
    step), and only ``opt.step()`` is timed (thread time), after ``warmup`` untimed steps. Not the same gradients
    (each network follows its own trajectory), but the machine state of real training. ``None`` for a workload
    without data (the tests' synthetic streams)."""
    if workload.data is None:
        return None
    if names[0] != BASELINE or not 0 <= warmup < len(workload.grads):
        raise ValueError(f"in_training needs the baseline first and 0 <= warmup < {len(workload.grads)} (the stream's "
                         f"steps), got names {names!r} and warmup {warmup!r}")
    from svmuon.bench._workloads import _batches
    from svmuon.experiments.stiefel_tasks import OTHER_LR, StiefelMLP

    config, (X, y) = workload.config, workload.data["train"]
    runs = {}
    for name in names:
        model = StiefelMLP(workload.seed, config["sizes"], config["embed"])
        opt = _hidden_optimizer(name, [model.W1, model.W2], workload.lr)
        runs[name] = (model, opt, torch.optim.Adam(model.rest(), lr=OTHER_LR), [])
    batches = _batches(config, len(y), len(workload.grads), torch.Generator().manual_seed(workload.seed + 1000))
    losses = {}
    for k, idx in enumerate(batches):
        for name in rotated(names, k):
            model, opt, rest, times = runs[name]
            opt.zero_grad()
            rest.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(X[idx]), y[idx])
            loss.backward()
            c0 = time.thread_time()
            opt.step()
            if k >= warmup:
                times.append(time.thread_time() - c0)
            rest.step()
            losses[name] = float(loss.detach())
    base = runs[BASELINE][3]
    return {"steps": len(batches), "timed_steps": len(base),
            "optimizers": {name: {"thread_s": _stats(runs[name][3]), **_ratios(runs[name][3], base),
                                  "loss_last": losses[name]} for name in names}}


def _stats(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values)}


def _ratios(mine: list[float], base: list[float]) -> dict[str, float]:
    return {"ratio_of_medians": statistics.median(mine) / statistics.median(base),
            "ratio_of_minima": min(mine) / min(base)}


def _row(mine: dict[str, list[float]], base: dict[str, list[float]], iterations: list[float], syncs: list[int],
         defect: float) -> dict:
    row = {"wall_s": _stats(mine["wall_s"]), "thread_s": _stats(mine["thread_s"]),
           "ratio": {"wall": _ratios(mine["wall_s"], base["wall_s"]),
                     "thread": _ratios(mine["thread_s"], base["thread_s"])},
           "baseline_thread_s": _stats(base["thread_s"]),
           "host_syncs_per_step": {"mean": statistics.fmean(syncs), "max": max(syncs)},
           "defect_end": defect, "times": mine, "baseline_times": base}
    if iterations:
        row["solver_iterations"] = {"mean": statistics.fmean(iterations), "max": max(iterations)}
    return row


# -- solver costs on Gaussian shapes -----------------------------------------------------------------------------
def _point(m: int, n: int, gen: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    Q, R = torch.linalg.qr(torch.randn(m, n, generator=gen, dtype=torch.float64))
    return (Q * torch.sign(torch.diagonal(R))).to(dtype)


def _solve(W: torch.Tensor, U: torch.Tensor, solver: str, **kwargs: Any):  # noqa: ANN202
    """The unchecked dispatcher (what the optimizer calls), so that input checks are not timed."""
    from svmuon.orthogonal.stiefel.dispatch import solve
    from svmuon.orthogonal.stiefel.options import StiefelOptions

    return solve(W, U, StiefelOptions(solver=solver, max_iter=MAX_ITER[solver]), **kwargs)


def _problems(m: int, n: int, seed: int) -> dict[str, tuple]:
    """The cold problem (W, U) and the warm one (W', U', Y0 from the cold solution), float64."""
    gen = torch.Generator().manual_seed(seed)
    W = _point(m, n, gen, torch.float64)
    U0 = torch.randn(m, n, generator=gen, dtype=torch.float64)
    U = U0 + torch.randn(m, n, generator=gen, dtype=torch.float64)
    sol = _solve(W, U, "newton", tol=1e-10)
    A, _, Bh = torch.linalg.svd(W - 0.02 * sol.Phi, full_matrices=False)
    U2 = 0.95 * U + 0.05 * (U0 + torch.randn(m, n, generator=gen, dtype=torch.float64))
    Y0 = sol.Y * (torch.linalg.matrix_norm(U2) / torch.linalg.matrix_norm(U))  # the optimizer's warm start
    return {"cold": (W, U, None), "warm": (A @ Bh, U2, Y0)}


def solver_rows(shape: tuple[int, int], tol: float, repeats: int, seed: int) -> list[dict[str, Any]]:
    """Every solver of :data:`SOLVERS`, cold and warm, at one Gaussian shape (module docstring)."""
    from svmuon.orthogonal.msign import Orthogonalizer

    pe = Orthogonalizer("newton_schulz", ns_coefficients="polar_express", ns_steps=10)
    kj = Orthogonalizer("newton_schulz", ns_coefficients="keller_jordan", ns_steps=5)
    rows = []
    for start, (W, U, Y0) in _problems(*shape, seed).items():
        for solver in SOLVERS:
            run = lambda: _solve(W, U, solver, tol=tol, Y0=Y0, orthogonalize=pe)  # noqa: E731
            out = run()  # warm-up, and the solution reported
            times = interleaved({"solve": run, "msign": lambda: pe(U), "msign_kj5": lambda: kj(U)}, repeats)
            trace: list = []
            _solve(W, U, solver, tol=tol, Y0=Y0, orthogonalize=pe, trace=trace)
            unit = statistics.median(times["msign"])
            rows.append({
                "shape": list(shape), "dtype": "float64", "solver": solver, "start": start, "tol": tol,
                "seconds": _stats(times["solve"]), "msign_seconds": _stats(times["msign"]),
                "msign_kj5_seconds": _stats(times["msign_kj5"]),
                "msign_equivalents": _ratios(times["solve"], times["msign"]),
                "iterations": out.iterations, "residual": float(out.residual.max()), "converged": bool(out.converged),
                "msign_calls": out.msign_calls, "factorizations": out.factorizations, "cg_products": out.cg_iterations,
                "history": [{"msign_equivalents": h["seconds"] / unit, "residual": h["residual"]} for h in trace],
            })
    return rows


def summarize(ratio: dict[str, Any]) -> list[str]:
    """Readable lines of one workload's :func:`step_ratio` result."""
    lines = []
    for name, row in ratio["optimizers"].items():
        r = row["ratio"]
        its = row.get("solver_iterations")
        lines.append(f"  {name:18s} thread {1e3 * row['thread_s']['median']:7.2f} ms (ratio of medians "
                     f"{r['thread']['ratio_of_medians']:6.2f}, of minima {r['thread']['ratio_of_minima']:6.2f})  wall "
                     f"ratio of medians {r['wall']['ratio_of_medians']:6.2f}  host syncs/step "
                     f"{row['host_syncs_per_step']['mean']:.1f}" + (f"  iterations {its['mean']:.1f}" if its else ""))
    return lines
