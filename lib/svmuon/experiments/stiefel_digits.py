"""A network with rectangular orthonormal layers on the digits: Muon on the Stiefel manifold against three baselines.

``python -m svmuon.experiments stiefel-digits [--epochs 30] [--seeds 0 1 2] [--output PATH]`` trains, on the
8x8 digits of scikit-learn (alpaydin1998digits, pedregosa2011scikit; 64 pixels in [0, 1], split 60/20/20
stratified),

    h₁ = relu(W₁x + b₁),  h₂ = relu(W₂h₁ + b₂),  logits = Vh₂ + c,

with ``W₁`` of shape 128×64 (tall: orthonormal columns, an isometric embedding) and ``W₂`` of shape 32×128
(wide: orthonormal rows, an orthogonal projection onto 32 directions), both kept on their Stiefel manifolds,
while ``b₁, b₂, V, c`` are trained by Adam at lr 3e-3 in every run. The constrained pair is trained by

* ``stiefel_muon``: ``svmuon.ManifoldMuon(manifold=svmuon.Stiefel())`` (Newton solver, momentum 0.9; the
  wide ``W₂`` handled transposed);
* ``stiefel_muon_rank``: the same with ``Stiefel(rank_rtol=1e-2)``: singular values of the update below 1 % of
  the largest count as zero (the trade-off the chapter measures on the first gradient);
* ``geoopt_rsgd`` / ``geoopt_radam``: geoopt's RiemannianSGD (momentum 0.9) / RiemannianAdam on
  ``geoopt.Stiefel`` (kochurov2020geoopt, becigneul2019riemannian), ``W₂`` stored transposed (geoopt
  needs tall points);
* ``param_orthogonal``: ``torch.nn.utils.parametrizations.orthogonal`` (rectangular: orthonormal columns or
  rows) with Adam (lezcano2019cheap, paszke2019pytorch);
* ``adam``: unconstrained Adam on the same matrices (they only start orthonormal): the reference without
  the constraint.

Each method's learning rate for the constrained pair is picked from a 3-point grid by validation accuracy
(seed 0) and rerun for every seed. Per epoch: training loss, validation and test accuracy, the largest
``‖WᵀW - I‖_max`` of the two matrices (rows for ``W₂``); per run: wall-clock seconds, and the mean time of
one step of the constrained pair's optimizer (single thread, on a machine that may be shared).
Results: ``experiments/results/stiefel-digits.json``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from svmuon._cli import describe, output_file, positive_int, refuse_repeats
from svmuon._cli import seed as seed_arg
from svmuon.experiments.runs import accuracy, check_output, default_output, environment, load_digits, save
from svmuon.experiments.runs import train_epoch, tune_then_seeds

NAME = "stiefel-digits"
SIZES = (64, 128, 32, 10)
GRIDS = {
    "stiefel_muon": [0.02, 0.05, 0.1],
    "stiefel_muon_rank": [0.02, 0.05, 0.1],
    "geoopt_rsgd": [0.03, 0.1, 0.3],
    "geoopt_radam": [1e-3, 3e-3, 1e-2],
    "param_orthogonal": [1e-3, 3e-3, 1e-2],
    "adam": [1e-3, 3e-3, 1e-2],
}
OTHER_LR = 3e-3


load_digits_split = load_digits  # the name the Stiefel chapter imports


def _orthonormal(rows: int, cols: int, gen: torch.Generator) -> torch.Tensor:
    """A random matrix with orthonormal columns (tall) or rows (wide).

    Drawn in float32, not with ``Stiefel().random`` (which draws in float64): the recorded
    ``stiefel-digits.json`` was trained from these points."""
    tall = rows >= cols
    Q, R = torch.linalg.qr(torch.randn(max(rows, cols), min(rows, cols), generator=gen))
    Q = Q * torch.sign(torch.diagonal(R))
    return Q if tall else Q.T.contiguous()


class StiefelMLP(torch.nn.Module):
    """``relu(W₁x + b₁) -> relu(W₂h₁ + b₂) -> Vh₂ + c`` with ``W₁`` 128×64 (tall) and ``W₂`` 32×128 (wide)."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        d, h1, h2, k = SIZES
        gen = torch.Generator().manual_seed(seed)
        self.W1 = torch.nn.Parameter(_orthonormal(h1, d, gen))
        self.W2 = torch.nn.Parameter(_orthonormal(h2, h1, gen))
        self.b1 = torch.nn.Parameter(torch.zeros(h1))
        self.b2 = torch.nn.Parameter(torch.zeros(h2))
        self.out = torch.nn.Linear(h2, k)
        torch.nn.init.normal_(self.out.weight, std=h2**-0.5, generator=gen)
        torch.nn.init.zeros_(self.out.bias)

    def weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.W1, self.W2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        W1, W2 = self.weights()
        h = torch.relu(x @ W1.T + self.b1)
        h = torch.relu(h @ W2.T + self.b2)
        return self.out(h)


def _build(method: str, lr: float, seed: int):
    """``(model, optimizer of the constrained pair, optimizer of the rest)``."""
    import geoopt

    from svmuon.optim.manifold_muon import ManifoldMuon
    from svmuon.orthogonal.stiefel import Stiefel

    model = StiefelMLP(seed)
    rest = [model.b1, model.b2, *model.out.parameters()]
    W1, W2 = model.W1.detach().clone(), model.W2.detach().clone()
    if method == "param_orthogonal":
        lin1 = torch.nn.Linear(SIZES[0], SIZES[1], bias=False)  # weight (128, 64), like W₁
        lin2 = torch.nn.Linear(SIZES[1], SIZES[2], bias=False)  # weight (32, 128), like W₂
        for lin, W0 in ((lin1, W1), (lin2, W2)):
            torch.nn.utils.parametrizations.orthogonal(lin)
            with torch.no_grad():
                lin.weight = W0  # the parametrization finds a pre-image of W0
        del model.W1, model.W2
        model.lin1, model.lin2 = lin1, lin2
        model.weights = lambda: (model.lin1.weight, model.lin2.weight)  # type: ignore[method-assign]
        params = list(lin1.parameters()) + list(lin2.parameters())
        return model, torch.optim.Adam(params, lr=lr), torch.optim.Adam(rest, lr=OTHER_LR)
    if method.startswith("geoopt"):
        del model.W1, model.W2
        model.G1 = geoopt.ManifoldParameter(W1, manifold=geoopt.Stiefel())
        model.G2 = geoopt.ManifoldParameter(W2.T.contiguous(), manifold=geoopt.Stiefel())  # stored tall
        model.weights = lambda: (model.G1, model.G2.T)  # type: ignore[method-assign]
        params = [model.G1, model.G2]
        opt = geoopt.optim.RiemannianSGD(params, lr=lr, momentum=0.9) if method == "geoopt_rsgd" else \
            geoopt.optim.RiemannianAdam(params, lr=lr)
        return model, opt, torch.optim.Adam(rest, lr=OTHER_LR)
    if method.startswith("stiefel_muon"):
        manifold = Stiefel(rank_rtol=1e-2) if method == "stiefel_muon_rank" else Stiefel()
        opt = ManifoldMuon([model.W1, model.W2], lr=lr, momentum=0.9, manifold=manifold)
        return model, opt, torch.optim.Adam(rest, lr=OTHER_LR)
    if method == "adam":
        return model, torch.optim.Adam([model.W1, model.W2], lr=lr), torch.optim.Adam(rest, lr=OTHER_LR)
    raise ValueError(f"unknown method {method!r}")


def _orth_error(model: StiefelMLP) -> float:
    from svmuon.orthogonal.stiefel import Stiefel

    with torch.no_grad():
        return max(float(Stiefel().defect(W.detach().double())) for W in model.weights())


def train(method: str, lr: float, seed: int, data: dict, epochs: int, batch_size: int = 64) -> dict:
    """One run: per-epoch loss, accuracies and orthogonality error; seconds; mean constrained-step time."""
    torch.manual_seed(seed)
    model, opt_w, opt_rest = _build(method, lr, seed)
    X, y = data["train"]
    gen = torch.Generator().manual_seed(seed + 1000)
    log = {"loss": [], "val_acc": [], "test_acc": [], "orth_error": []}
    seconds, step_times, iterations = 0.0, [], []

    def after_step(_: float) -> None:
        if method.startswith("stiefel_muon"):
            iterations.extend(float(opt_w.state[p]["info"]["iterations"]) for p in (model.W1, model.W2))

    for _ in range(epochs):
        perm = torch.randperm(len(y), generator=gen)
        t0 = time.perf_counter()
        total = train_epoch(model, [opt_w, opt_rest], X, y, perm.split(batch_size), after_step=after_step,
                            step_times=step_times)
        seconds += time.perf_counter() - t0
        log["loss"].append(total / len(y))
        log["val_acc"].append(accuracy(model, *data["val"]))
        log["test_acc"].append(accuracy(model, *data["test"]))
        log["orth_error"].append(_orth_error(model))
    out = {"method": method, "lr": lr, "seed": seed, "seconds": seconds,
           "step_ms_median": 1e3 * statistics.median(step_times), "step_ms_min": 1e3 * min(step_times), **log}
    if iterations:
        out["newton_iterations_mean"] = statistics.mean(iterations)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m svmuon.experiments stiefel-digits", description=describe(__doc__))
    parser.add_argument("--epochs", type=positive_int, default=30, help="training epochs per run (default 30)")
    parser.add_argument("--seeds", type=seed_arg, nargs="+", default=[0, 1, 2],
                        help="seeds, one run per seed and method")
    parser.add_argument("--methods", nargs="+", default=list(GRIDS), choices=list(GRIDS),
                        help="optimizers to compare (default: all)")
    parser.add_argument("--output", type=output_file, default=None,
                        help=f"JSON path (default: experiments/results/{NAME}.json of the book's repository when run "
                             "inside it, else under the working directory)")
    parser.add_argument("--note", default="", help="what the JSON should say about the machine while it ran")
    args = parser.parse_args(argv)
    refuse_repeats(parser, seeds=args.seeds, methods=args.methods)
    out = args.output or check_output(parser, default_output("experiments", f"{NAME}.json"))
    torch.set_num_threads(1)
    data = load_digits()
    tuning, final = [], []
    for method in args.methods:
        run = lambda lr, seed, m=method: train(m, lr, seed, data, args.epochs)  # noqa: E731
        _, runs, finals = tune_then_seeds(GRIDS[method], run, args.seeds, score=lambda r: r["val_acc"][-1])
        tuning += [{k: r[k] for k in ("method", "lr", "seed", "seconds")} | {"val_acc": r["val_acc"][-1]} for r in runs]
        for seed, r in zip(args.seeds, finals):
            final.append(r)
            print(f"{method:17s} lr={r['lr']:<6g} seed={seed} test acc {r['test_acc'][-1]:.3f} loss {r['loss'][-1]:.3f} "
                  f"orth {r['orth_error'][-1]:.1e} step {r['step_ms_median']:.2f} ms {r['seconds']:.1f} s", flush=True)
    save(out, {"experiment": NAME, "sizes": SIZES, "epochs": args.epochs, "other_lr": OTHER_LR, "grids": GRIDS,
               "tuning": tuning, "runs": final,
               "note": " ".join(filter(None, [args.note, "step times are single-thread medians"])),
               "environment": environment(torch_threads=1)})
    print("wrote", out)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
