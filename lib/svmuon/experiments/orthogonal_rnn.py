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
import json
import time
from pathlib import Path

import numpy as np
import torch

from svmuon._cli import describe
from svmuon.experiments._loop import train_epoch

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
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32).reshape(-1, 8, 8)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, stratify=y, random_state=split_seed)
    X_tr, X_va, y_tr, y_va = train_test_split(X_tr, y_tr, test_size=0.25, stratify=y_tr, random_state=split_seed)
    pack = lambda a, b: (torch.from_numpy(a), torch.from_numpy(b).long())  # noqa: E731
    return {"train": pack(X_tr, y_tr), "val": pack(X_va, y_va), "test": pack(X_te, y_te)}


class OrthogonalRNN(torch.nn.Module):
    """``h_t = tanh(W h_{t-1} + U x_t + b)``, logits ``V h_T + c``; ``W`` starts as a random orthogonal matrix."""

    def __init__(self, seed: int, hidden: int = HIDDEN, inputs: int = 8, classes: int = 10) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
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


def _accuracy(model, X, y) -> float:
    with torch.no_grad():
        return float((model(X).argmax(1) == y).float().mean())


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
        log["val_acc"].append(_accuracy(model, *data["val"]))
        log["test_acc"].append(_accuracy(model, *data["test"]))
        log["orth_error"].append(float(Orthogonal().orthogonality_error(model.recurrent().detach())))
    return {"method": method, "lr": lr, "seed": seed, "seconds": seconds, **log}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m svmuon.experiments orthogonal-rnn", description=describe(__doc__))
    parser.add_argument("--epochs", type=int, default=25, help="training epochs (default: 25)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], metavar="SEED",
                        help="seeds of each run (default: %(default)s)")
    parser.add_argument("--methods", nargs="+", default=list(GRIDS), metavar="METHOD",
                        help="optimizers to run, from %(default)s (default: all)")
    parser.add_argument("--output", type=Path, default=None, help="results file (default: experiments/results/)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data = load_sequences()
    tuning, final = [], []
    for method in args.methods:
        runs = [train(method, lr, 0, data, args.epochs) for lr in GRIDS[method]]
        tuning += [{k: r[k] for k in ("method", "lr", "seed", "seconds")} | {"val_acc": r["val_acc"][-1]} for r in runs]
        best = max(runs, key=lambda r: r["val_acc"][-1])
        for seed in args.seeds:
            r = best if seed == 0 else train(method, best["lr"], seed, data, args.epochs)
            final.append(r)
            print(f"{method:17s} lr={r['lr']:<6g} seed={seed} test acc {r['test_acc'][-1]:.3f} loss {r['loss'][-1]:.3f} "
                  f"orth {r['orth_error'][-1]:.1e} {r['seconds']:.1f} s", flush=True)
    from svmuon._paths import results_dir

    out = args.output or results_dir("experiments") / f"{NAME}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"experiment": NAME, "hidden": HIDDEN, "epochs": args.epochs, "other_lr": OTHER_LR,
                               "grids": GRIDS, "tuning": tuning, "runs": final}, indent=1) + "\n")
    print("wrote", out)
    return 0
