"""An orthogonal recurrent network on the digits read row by row: OrthogonalMuon against four baselines.

``python -m svmuon.experiments orthogonal-rnn [--epochs 25] [--seeds 0 1 2] [--output PATH]`` reads each
8x8 digit of scikit-learn (alpaydin1998digits, pedregosa2011scikit) as a sequence of 8 rows of 8 pixels
and trains ``h_t = tanh(W h_{t-1} + U x_t + b)``, ``logits = V h_8 + c`` with hidden size 64, the
recurrent matrix ``W`` (64x64) orthogonal (arjovsky2016unitary, lezcano2019cheap). The recurrent matrix
is trained by

* ``orthogonal_muon``: :class:`svmuon.optim.OrthogonalMuon` (Polar Express msign, float32);
* ``geoopt_rsgd`` / ``geoopt_radam``: geoopt's RiemannianSGD (momentum 0.9) / RiemannianAdam on
  ``geoopt.Stiefel`` (canonical metric, Cayley retraction) (kochurov2020geoopt, becigneul2019riemannian);
* ``param_orthogonal``: ``torch.nn.utils.parametrizations.orthogonal`` (matrix exponential) with Adam
  (lezcano2019cheap, paszke2019pytorch);
* ``adam``: unconstrained Adam (``W`` only starts orthogonal);

all other parameters (``U, b, V, c``) by Adam at lr 3e-3 in every run. Each recurrent learning rate is
picked from a 3-point grid by validation accuracy (seed 0), then the picked rate is rerun for each seed.
Per epoch: training loss, test accuracy, ``‖WᵀW - I‖_max``; per run: wall-clock seconds (single thread).
Results: ``experiments/results/orthogonal-rnn.json``.
"""

from __future__ import annotations

import argparse
import time

import torch

from svmuon._cli import describe, output_file, positive_int, refuse_repeats
from svmuon._cli import seed as seed_arg
from svmuon.experiments.runs import accuracy, default_file, environment, load_digits, save
from svmuon.experiments.runs import train_epoch, tune_then_seeds

NAME = "orthogonal-rnn"
HIDDEN = 64
GRIDS = {
    "orthogonal_muon": [0.02, 0.05, 0.1],
    "geoopt_rsgd": [0.03, 0.1, 0.3],
    "geoopt_radam": [1e-3, 3e-3, 1e-2],
    "param_orthogonal": [1e-3, 3e-3, 1e-2],
    "adam": [1e-3, 3e-3, 1e-2],
}
OTHER_LR = 3e-3


def load_sequences(split_seed: int = 0) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Digits as ``(N, 8, 8)`` float32 sequences in [0, 1] (8 rows of 8 pixels), split 60/20/20, stratified."""
    return load_digits(split_seed, sequences=True)


class OrthogonalRNN(torch.nn.Module):
    """``h_t = tanh(W h_{t-1} + U x_t + b)``, logits ``V h_T + c``; ``W`` starts as a random orthogonal matrix."""

    def __init__(self, seed: int, hidden: int = HIDDEN, inputs: int = 8, classes: int = 10) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        # drawn in float32, not with Orthogonal().random (float64): the recorded orthogonal-rnn.json used these
        Q, R = torch.linalg.qr(torch.randn(hidden, hidden, generator=gen))
        self.W = torch.nn.Parameter(Q * torch.sign(torch.diagonal(R)))
        self.inp = torch.nn.Linear(inputs, hidden)
        self.out = torch.nn.Linear(hidden, classes)
        for layer in (self.inp, self.out):
            torch.nn.init.normal_(layer.weight, std=layer.in_features**-0.5, generator=gen)
            torch.nn.init.zeros_(layer.bias)

    def recurrent(self) -> torch.Tensor:
        return self.W

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        W = self.recurrent()
        h = x.new_zeros(x.shape[0], W.shape[0])
        for t in range(x.shape[1]):
            h = torch.tanh(h @ W.T + self.inp(x[:, t]))
        return self.out(h)


def _build(method: str, lr: float, seed: int):
    import geoopt

    from svmuon.optim.manifold_muon import OrthogonalMuon

    model = OrthogonalRNN(seed)
    others = list(model.inp.parameters()) + list(model.out.parameters())
    if method == "param_orthogonal":
        W0 = model.W.detach().clone()
        lin = torch.nn.Linear(HIDDEN, HIDDEN, bias=False)
        torch.nn.utils.parametrizations.orthogonal(lin)
        with torch.no_grad():
            lin.weight = W0  # the parametrization finds the exp/Cayley pre-image of W0
        model.lin = lin
        model.recurrent = lambda: model.lin.weight  # type: ignore[method-assign]
        del model.W
        return model, [torch.optim.Adam(lin.parameters(), lr=lr), torch.optim.Adam(others, lr=OTHER_LR)]
    if method.startswith("geoopt"):
        W = geoopt.ManifoldParameter(model.W.detach().clone(), manifold=geoopt.Stiefel())
        del model.W
        model.W = W
        rec = geoopt.optim.RiemannianSGD([W], lr=lr, momentum=0.9) if method == "geoopt_rsgd" else \
            geoopt.optim.RiemannianAdam([W], lr=lr)
        return model, [rec, torch.optim.Adam(others, lr=OTHER_LR)]
    if method == "orthogonal_muon":
        return model, [OrthogonalMuon([model.W], lr=lr, momentum=0.9), torch.optim.Adam(others, lr=OTHER_LR)]
    if method == "adam":
        return model, [torch.optim.Adam([model.W], lr=lr), torch.optim.Adam(others, lr=OTHER_LR)]
    raise ValueError(f"unknown method {method!r}")


def train(method: str, lr: float, seed: int, data: dict, epochs: int, batch_size: int = 64) -> dict:
    """Train one run; per-epoch loss, validation/test accuracy, orthogonality error; wall-clock seconds."""
    from svmuon.orthogonal.manifolds import Orthogonal

    torch.manual_seed(seed)
    model, opts = _build(method, lr, seed)
    X, y = data["train"]
    gen = torch.Generator().manual_seed(seed + 1000)
    log = {"loss": [], "val_acc": [], "test_acc": [], "orth_error": []}
    seconds = 0.0
    for _ in range(epochs):
        perm = torch.randperm(len(y), generator=gen)
        t0 = time.perf_counter()
        total = train_epoch(model, opts, X, y, perm.split(batch_size))
        seconds += time.perf_counter() - t0
        log["loss"].append(total / len(y))
        log["val_acc"].append(accuracy(model, *data["val"]))
        log["test_acc"].append(accuracy(model, *data["test"]))
        log["orth_error"].append(float(Orthogonal().orthogonality_error(model.recurrent().detach())))
    return {"method": method, "lr": lr, "seed": seed, "seconds": seconds, **log}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m svmuon.experiments orthogonal-rnn", description=describe(__doc__))
    parser.add_argument("--epochs", type=positive_int, default=25, help="training epochs (default: 25)")
    parser.add_argument("--seeds", type=seed_arg, nargs="+", default=[0, 1, 2], metavar="SEED",
                        help="seeds of each run (default: %(default)s)")
    parser.add_argument("--methods", nargs="+", default=list(GRIDS), choices=list(GRIDS), metavar="METHOD",
                        help="optimizers to run, from %(default)s (default: all)")
    parser.add_argument("--output", type=output_file, default=None,
                        help=f"results file (default: experiments/results/{NAME}.json of the book's repository when "
                             "run inside it, else under the working directory)")
    args = parser.parse_args(argv)
    refuse_repeats(parser, seeds=args.seeds, methods=args.methods)
    out = args.output or default_file(parser, args, NAME, ("epochs", "seeds", "methods"))
    torch.set_num_threads(1)
    data = load_sequences()
    tuning, final = [], []
    for method in args.methods:
        run = lambda lr, seed, m=method: train(m, lr, seed, data, args.epochs)  # noqa: E731
        _, runs, finals = tune_then_seeds(GRIDS[method], run, args.seeds, score=lambda r: r["val_acc"][-1])
        tuning += [{k: r[k] for k in ("method", "lr", "seed", "seconds")} | {"val_acc": r["val_acc"][-1]} for r in runs]
        for seed, r in zip(args.seeds, finals):
            final.append(r)
            print(f"{method:17s} lr={r['lr']:<6g} seed={seed} test acc {r['test_acc'][-1]:.3f} loss {r['loss'][-1]:.3f} "
                  f"orth {r['orth_error'][-1]:.1e} {r['seconds']:.1f} s", flush=True)
    save(out, {"experiment": NAME, "hidden": HIDDEN, "epochs": args.epochs, "other_lr": OTHER_LR, "grids": GRIDS,
               "tuning": tuning, "runs": final, "environment": environment(torch_threads=1)})
    print("wrote", out)
    return 0
