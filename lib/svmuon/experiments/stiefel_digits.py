"""Networks with rectangular orthonormal layers on two real tasks: Muon on the Stiefel manifold, exact against
fast, against three baselines.

``python -m svmuon.experiments stiefel-digits [--tasks digits text] [--epochs N] [--seeds 0 1 2] [--smoke]
[--output PATH]`` trains the network of :mod:`svmuon.experiments.stiefel_tasks` (two hidden matrices, one tall
and one wide, kept on their Stiefel manifolds; biases, output layer and embedding by Adam at lr 3e-3) on

* ``digits``: scikit-learn's 8×8 digits, sizes 64 → 128 → 32 → 10, minibatches of 64, 30 epochs;
* ``text``: next-character prediction on the Python standard library's sources (the fixed-entropy text task),
  sizes 64 → 256 → 64 → 97 with an embedding, minibatches of 128, 10 epochs of 60 minibatches;

with the constrained pair trained by ``stiefel_muon`` (``ManifoldMuon(Stiefel())``, the completion solver),
``stiefel_muon_exact`` (``Stiefel(solver="newton")``, the exact direction), ``stiefel_muon_rank`` (Newton with
``rank_rtol=1e-2``), ``stiefel_muon_amortized`` (the dual step carried over from one training step to the next,
su2025dual: ``Stiefel(solver="dual_ascent", max_iter=1)``), ``stiefel_muon_float32`` (the completion computed in
float32, ``Stiefel(work_dtype=torch.float32)``), all with momentum 0.9; geoopt's RiemannianSGD
(momentum 0.9) and RiemannianAdam on ``geoopt.Stiefel``; torch's orthogonal parametrization with Adam; and
unconstrained Adam (the reference without the constraint).

Each method's learning rate is picked from a 3-point grid with seed 0 (digits: by final validation accuracy;
text: by final validation loss), then rerun for every seed. Per epoch: training loss (nats), validation and test
loss and accuracy, the largest ``‖WᵀW - I‖_max`` of the pair, and the cumulative training time: ``wall_s`` and
``thread_s`` (wall-clock and this thread's CPU time of the training loop, evaluation excluded) and
``optimizer_s`` / ``optimizer_thread_s`` (the same for the constrained pair's ``step()`` alone), so that loss can
be plotted against time; for the Stiefel methods the mean solver iterations, the completion's certificate
``gap`` and the amortized solver's tangent residual. Single thread. Results:
``experiments/results/stiefel-digits.json`` (both tasks; written after each task).

Duration (single thread): a pilot of one run per method (lr the middle of its grid; digits 30 epochs, text 100 steps)
took 637 s of thread CPU time on the digits (``stiefel_muon_exact`` 530 s of it: Newton's iterations rise to its cap
late in training, on rank-deficient gradients; ``stiefel_muon`` 9 s) and 32 s per 100 text steps, on a shared 2-core
machine whose thread times ran about 4 times the quiet machine's wall times of the unchanged methods (recorded
``stiefel-digits`` runs: geoopt, Adam, the parametrization). Five runs per method (a grid of 3, then seeds 1 and 2):
about 13 minutes for the digits and 4 for the text on a quiet machine, 2-3 times that where the machine is shared.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

from svmuon._cli import describe, output_file, positive_int, refuse_repeats
from svmuon._cli import seed as seed_arg
from svmuon.experiments.runs import check_output, default_file, environment, evaluate, save
from svmuon.experiments.runs import train_epoch
from svmuon.experiments.runs import tune_then_seeds
from svmuon.experiments.stiefel_tasks import GRIDS, OTHER_LR, STIEFEL_SOLVERS, TASKS, StiefelMLP, build
from svmuon.experiments.stiefel_tasks import epoch_batches, load_task

__all__ = ["NAME", "GRIDS", "TASKS", "SMOKE", "StiefelMLP", "load_digits", "load_digits_split", "train", "main"]

NAME = "stiefel-digits"
SIZES = TASKS["digits"]["sizes"]
SMOKE = dict(epochs=1, steps_per_epoch=4, chars=20_000, seeds=[0], grid=1)  # the --smoke settings


def load_digits() -> dict[str, Any]:
    """The digits task's data (:func:`svmuon.experiments.stiefel_tasks.load_task`)."""
    return load_task("digits")


load_digits_split = load_digits  # the name the Stiefel chapter imports


class _Timed:
    """An optimizer seen by :func:`~svmuon.experiments.runs.train_epoch` whose ``step()`` is timed by both clocks."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer, self.wall, self.thread, self.steps = optimizer, 0.0, 0.0, []

    def zero_grad(self) -> None:
        self.optimizer.zero_grad()

    def step(self) -> None:
        t0, c0 = time.perf_counter(), time.thread_time()
        self.optimizer.step()
        wall = time.perf_counter() - t0
        self.wall, self.thread = self.wall + wall, self.thread + time.thread_time() - c0
        self.steps.append(wall)


def _solver_info(opt: torch.optim.Optimizer, params: tuple[torch.Tensor, ...], store: dict[str, list]) -> None:
    """Append the Stiefel solver's per-step diagnostics of the pair (iterations, certificate, residual)."""
    for p in params:
        info = opt.state[p]["info"]
        for key in ("iterations", "gap", "residual"):
            if key in info:
                store.setdefault(key, []).append(float(info[key]))


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _epoch_record(log: dict[str, list], model: StiefelMLP, data: dict, total: float, count: int) -> None:
    from svmuon.orthogonal.stiefel import Stiefel

    log["loss"].append(total / count)
    for split in ("val", "test"):
        loss, acc = evaluate(model, *data[split])
        log[f"{split}_loss"].append(loss)
        log[f"{split}_acc"].append(acc)
    with torch.no_grad():
        log["orth_error"].append(max(float(Stiefel().defect(W.detach().double())) for W in model.weights()))


def train(method: str, lr: float, seed: int, data: dict, epochs: int, *, task: str = "digits",
          steps_per_epoch: int | None = None) -> dict[str, Any]:
    """One run of ``method`` at learning rate ``lr`` on ``task`` (``data`` from ``load_task(task)``): the per-epoch
    record of the module docstring, the step times and the Stiefel solver's diagnostics."""
    config = TASKS[task]
    torch.manual_seed(seed)
    model = StiefelMLP(seed, config["sizes"], config.get("embed", 0))
    opt_w, opt_rest = build(method, model, lr)
    timed = _Timed(opt_w)
    X, y = data["train"]
    gen = torch.Generator().manual_seed(seed + 1000)
    keys = ("loss", "val_loss", "val_acc", "test_loss", "test_acc", "orth_error", "wall_s", "thread_s",
            "optimizer_s", "optimizer_thread_s", "iterations", "gap", "residual")
    log: dict[str, list] = {k: [] for k in keys}
    wall = thread = 0.0
    for _ in range(epochs):
        batches = epoch_batches(config, len(y), gen, steps_per_epoch)
        diag: dict[str, list] = {}
        after = (lambda _: _solver_info(opt_w, model.weights(), diag)) if method in STIEFEL_SOLVERS else None
        t0, c0 = time.perf_counter(), time.thread_time()
        total = train_epoch(model, [timed, opt_rest], X, y, batches, after_step=after)
        wall, thread = wall + time.perf_counter() - t0, thread + time.thread_time() - c0
        _epoch_record(log, model, data, total, sum(len(b) for b in batches))
        log["wall_s"].append(wall)
        log["thread_s"].append(thread)
        log["optimizer_s"].append(timed.wall)
        log["optimizer_thread_s"].append(timed.thread)
        for key in ("iterations", "gap", "residual"):
            log[key].append(_mean(diag.get(key, [])))
    for key in ("iterations", "gap", "residual"):
        if all(v is None for v in log[key]):
            del log[key]
    return {"task": task, "method": method, "lr": lr, "seed": seed, "seconds": wall,
            "step_ms_median": 1e3 * statistics.median(timed.steps), "step_ms_min": 1e3 * min(timed.steps), **log}


def _run_task(task: str, args: argparse.Namespace, smoke: dict | None) -> tuple[list, list, dict]:
    """Tune then seeds for every method on one task; returns ``(tuning rows, final runs, task record)``."""
    data = load_task(task, smoke["chars"] if smoke else None)
    config = TASKS[task]
    epochs = args.epochs or (smoke["epochs"] if smoke else config["epochs"])
    steps = smoke["steps_per_epoch"] if smoke else None
    minimize = task == "text"
    score = (lambda r: r["val_loss"][-1]) if minimize else (lambda r: r["val_acc"][-1])
    tuning, final = [], []
    for method in args.methods:
        grid = GRIDS[method][1:1 + smoke["grid"]] if smoke else GRIDS[method]
        run = lambda lr, seed, m=method: train(m, lr, seed, data, epochs, task=task, steps_per_epoch=steps)  # noqa: E731
        _, runs, finals = tune_then_seeds(grid, run, args.seeds, score=score, minimize=minimize)
        tuning += [{k: r[k] for k in ("task", "method", "lr", "seed", "seconds")}
                   | {"val_acc": r["val_acc"][-1], "val_loss": r["val_loss"][-1]} for r in runs]
        for r in finals:
            final.append(r)
            print(f"{task:6s} {method:22s} lr={r['lr']:<6g} seed={r['seed']} test loss {r['test_loss'][-1]:.3f} acc "
                  f"{r['test_acc'][-1]:.3f} train {r['loss'][-1]:.3f} orth {r['orth_error'][-1]:.1e} step "
                  f"{r['step_ms_median']:.2f} ms {r['seconds']:.1f} s", flush=True)
    record = {**config, "epochs": epochs, "steps_per_epoch": steps or config["steps_per_epoch"],
              "score": "val_loss (min)" if minimize else "val_acc (max)", "data": data["info"]}
    return tuning, final, record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m svmuon.experiments stiefel-digits", description=describe(__doc__))
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS), help="tasks (default: both)")
    parser.add_argument("--epochs", type=positive_int, default=None,
                        help="training epochs per run (default: the task's, 30 digits and 10 text)")
    parser.add_argument("--seeds", type=seed_arg, nargs="+", default=[0, 1, 2],
                        help="seeds, one run per seed and method (default 0 1 2)")
    parser.add_argument("--methods", nargs="+", default=list(GRIDS), choices=list(GRIDS),
                        help="optimizers to compare (default: all)")
    parser.add_argument("--smoke", action="store_true",
                        help=f"a test of the command: {SMOKE} (one rate per method, tiny epochs), seconds")
    parser.add_argument("--output", type=output_file, default=None,
                        help=f"JSON path (default: experiments/results/{NAME}.json of the book's repository when run "
                             "inside it, else under the working directory; --smoke: the temporary folder)")
    parser.add_argument("--note", default="", help="what the JSON should say about the machine while it ran")
    args = parser.parse_args(argv)
    smoke = SMOKE if args.smoke else None
    if smoke:  # the smoke run's seeds unless --seeds is given
        parser.set_defaults(seeds=smoke["seeds"])
        args = parser.parse_args(argv)
    refuse_repeats(parser, seeds=args.seeds, methods=args.methods, tasks=args.tasks)
    if args.output is not None:
        out = args.output
    elif smoke:
        out = check_output(parser, _default_path(smoke))
    else:
        out = default_file(parser, args, NAME, ("tasks", "epochs", "seeds", "methods"))
    torch.set_num_threads(1)
    doc: dict[str, Any] = {"experiment": NAME, "tasks": {}, "other_lr": OTHER_LR, "grids": GRIDS,
                           "solvers": {m: {k: str(v).removeprefix("torch.") if isinstance(v, torch.dtype) else v
                                           for k, v in o.items()} for m, o in STIEFEL_SOLVERS.items()},
                           "smoke": bool(smoke), "tuning": [], "runs": [],
                           "note": " ".join(filter(None, [args.note, "single thread; times of the training loop, "
                                                                    "evaluation excluded"]))}
    for task in args.tasks:
        tuning, final, record = _run_task(task, args, smoke)
        doc["tasks"][task] = record
        doc["tuning"] += tuning
        doc["runs"] += final
        doc["environment"] = environment(torch_threads=1)
        save(out, doc)  # after each task: a later failure keeps the finished one
    print("wrote", out)
    return 0


def _default_path(smoke: dict):
    import tempfile
    from pathlib import Path

    return Path(tempfile.gettempdir()) / "svmuon-smoke" / f"{NAME}-smoke.json"


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
