"""``python -m svmuon.experiments muon-digits``: Muon against AdamW on a small MLP for scikit-learn's digits.

Data: the 1797 8x8 handwritten digits of UCI (alpaydin1998digits) shipped with scikit-learn
(pedregosa2011scikit), standardised with the training split's mean and deviation; fixed splits 60/20/20
(train / validation / test, stratified, seed 0). Model: 64 -> 128 -> 128 -> 10, ReLU, float32, CPU.

Optimisers (each with a learning-rate grid; the chapter reports the rate with the best validation loss):

* ``adamw``: ``torch.optim.AdamW`` on every parameter, weight decay 0.01;
* ``muon``: :class:`svmuon.optim.Muon` (momentum 0.95, Nesterov, Keller Jordan quintic, 5 steps, fp32,
  ``adjust_lr_fn="match_rms_adamw"`` so that AdamW's rate and weight decay carry over, liu2025moonlight)
  on the two hidden weight matrices (64->128 and 128->128), AdamW (lr 1e-3) on biases and the classifier,
  as recommended for Muon (jordan2024muon).

Every (optimiser, learning rate, seed) runs the same minibatches (batch 64, 30 epochs); the result file
records per-epoch training loss, validation loss and test accuracy.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from svmuon._cli import describe

EPOCHS = 30
BATCH = 64
GRID = {"adamw": [3e-4, 1e-3, 3e-3, 1e-2], "muon": [3e-4, 1e-3, 3e-3, 1e-2]}


def load_splits(seed: int = 0) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Standardised float32 train/val/test tensors of the digits data (stratified 60/20/20 split)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    X_tr, X_rest, y_tr, y_rest = train_test_split(X, y, test_size=0.4, stratify=y, random_state=seed)
    X_va, X_te, y_va, y_te = train_test_split(X_rest, y_rest, test_size=0.5, stratify=y_rest, random_state=seed)
    mean, std = X_tr.mean(0), X_tr.std(0) + 1e-6  # constant border pixels have std 0

    def t(a: np.ndarray, b: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.tensor((a - mean) / std, dtype=torch.float32), torch.tensor(b, dtype=torch.long)

    return {"train": t(X_tr, y_tr), "val": t(X_va, y_va), "test": t(X_te, y_te)}


def make_model(seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))


def make_optimizers(model: nn.Sequential, name: str, lr: float) -> list[torch.optim.Optimizer]:
    if name == "adamw":
        return [torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)]
    from svmuon.optim import Muon

    hidden = [model[0].weight, model[2].weight]
    rest = [p for p in model.parameters() if all(p is not h for h in hidden)]
    return [Muon(hidden, lr=lr, weight_decay=0.01, adjust_lr_fn="match_rms_adamw"),
            torch.optim.AdamW(rest, lr=1e-3, weight_decay=0.01)]


def train(name: str, lr: float, seed: int, data: dict, epochs: int = EPOCHS) -> dict[str, Any]:
    """Train one model; return per-epoch train loss, validation loss, test accuracy."""
    model = make_model(seed)
    opts = make_optimizers(model, name, lr)
    X, y = data["train"]
    gen = torch.Generator().manual_seed(seed)
    hist: dict[str, list[float]] = {"train_loss": [], "val_loss": [], "test_acc": []}
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(epochs):
        perm = torch.randperm(len(X), generator=gen)
        total = 0.0
        for i in range(0, len(X), BATCH):
            idx = perm[i : i + BATCH]
            for o in opts:
                o.zero_grad()
            loss = loss_fn(model(X[idx]), y[idx])
            loss.backward()
            for o in opts:
                o.step()
            total += float(loss.detach()) * len(idx)
        with torch.no_grad():
            hist["train_loss"].append(total / len(X))
            hist["val_loss"].append(float(loss_fn(model(data["val"][0]), data["val"][1])))
            pred = model(data["test"][0]).argmax(1)
            hist["test_acc"].append(float((pred == data["test"][1]).float().mean()))
    return {"optimizer": name, "lr": lr, "seed": seed, **hist}


def main(argv: list[str] | None = None) -> int:
    from tqdm.auto import tqdm

    ap = argparse.ArgumentParser(prog="python -m svmuon.experiments muon-digits", description=describe(__doc__))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--epochs", type=int, default=EPOCHS)
    ap.add_argument("--output", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)  # tiny matmuls: threads only add overhead
    data = load_splits()
    jobs = [(n, lr, s) for n, lrs in GRID.items() for lr in lrs for s in args.seeds]
    runs = [train(n, lr, s, data, args.epochs) for n, lr, s in tqdm(jobs, desc="muon-digits")]
    if args.output:
        path = Path(args.output)
    else:
        from svmuon._paths import results_dir

        path = results_dir("experiments") / "muon_digits.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"experiment": "muon-digits", "epochs": args.epochs, "batch": BATCH, "grid": GRID,
            "model": "64-128-128-10 ReLU MLP, float32, CPU", "torch": torch.__version__}
    path.write_text(json.dumps({**meta, "runs": runs}, indent=1) + "\n")
    for n in GRID:
        best = min((r for r in runs if r["optimizer"] == n), key=lambda r: r["val_loss"][-1])
        print(f"{n}: best lr {best['lr']}, final val loss {best['val_loss'][-1]:.4f}, "
              f"test acc {best['test_acc'][-1]:.4f} (seed {best['seed']})")
    print(f"wrote {path}")
    return 0
