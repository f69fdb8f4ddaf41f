"""Muon versus AdamW on scikit-learn's digits: learning curves and singular-value entropy of each layer.

The one digits experiment of the book: the chapter on real weight matrices reads its entropies, the chapter
on steepest descent its learning curves. ``python -m svmuon.experiments digits-training [options]`` trains the MLP 64 -> 256 -> 256 -> 10 (ReLU,
PyTorch's default initialisation) on the 8x8 digits of Alpaydin and Kaynak as shipped with scikit-learn,
with the same architecture, batch size and number of steps for both optimizers:

* ``adamw``: ``torch.optim.AdamW`` on every parameter;
* ``muon``: :class:`svmuon.optim.muon.Muon` (float32 Newton–Schulz, ``adjust_lr_fn="match_rms_adamw"``) on
  the two hidden weight matrices (256 x 64 and 256 x 256), and AdamW, at the learning rate tuned for the
  ``adamw`` run, on the biases and the 10 x 256 output layer -- the usual split (jordan2024muon,
  liu2025moonlight).

Each optimizer's learning rate is picked from a small grid by validation accuracy (mean over the tuning
seeds); the chosen rate is then rerun with several seeds and the test accuracy reported. Along the way the
Shannon entropy (p ∝ σ and p ∝ σ²) of each weight matrix W and of its change W - W_0 since initialisation is
recorded, and after every epoch the mean training loss, the validation loss and accuracy and the test accuracy. Everything runs in float32 on the CPU, single-threaded by default (deterministic and, on a busy
2-core machine, faster), with fixed seeds: the same command gives the same numbers.

Results: ``experiments/results/digits-training.json`` (see :func:`run`). References: alpaydin1998digits,
pedregosa2011scikit, jordan2024muon, liu2025moonlight, loshchilov2019decoupled, su2025entropy.
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from svmuon._cli import describe, nonnegative_float, output_file, positive_float, positive_int
from svmuon._cli import seed as seed_arg
from svmuon.experiments.runs import accuracy, default_file, environment, evaluate, load_digits, save
from svmuon.experiments.runs import train_epoch, tune
from svmuon.spectral.entropy import singular_value_entropy

NAME = "digits-training"
MATRICES = ("0.weight", "2.weight", "4.weight")  # 256x64, 256x256, 10x256
HIDDEN = ("0.weight", "2.weight")  # what Muon optimises
DEFAULTS = dict(epochs=40, batch_size=64, weight_decay=0.01, adamw_lrs=[3e-4, 1e-3, 3e-3, 1e-2, 3e-2],
                muon_lrs=[3e-4, 1e-3, 3e-3, 1e-2, 3e-2], tune_seeds=[0, 1], seeds=[10, 11, 12, 13, 14], log_every=20,
                momentum=0.95, split_seed=0)


def make_model(seed: int) -> torch.nn.Sequential:
    """The MLP 64 -> 256 -> 256 -> 10 with PyTorch's default (Kaiming-uniform) initialisation, seeded."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                               torch.nn.ReLU(), torch.nn.Linear(256, 10))


def make_optimizers(model: torch.nn.Module, method: str, lr: float, *, adamw_lr: float, weight_decay: float,
                    momentum: float = 0.95) -> list[torch.optim.Optimizer]:
    """``adamw``: one AdamW on everything; ``muon``: Muon on the hidden matrices, AdamW(adamw_lr) on the rest."""
    if method == "adamw":
        return [torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)]
    if method == "muon":
        from svmuon.optim.muon import Muon

        named = dict(model.named_parameters())
        hidden = [named[k] for k in HIDDEN]
        rest = [p for k, p in named.items() if k not in HIDDEN]
        return [Muon(hidden, lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=True,
                     adjust_lr_fn="match_rms_adamw", compute_dtype=torch.float32),
                torch.optim.AdamW(rest, lr=adamw_lr, weight_decay=weight_decay)]
    raise ValueError(f"method must be 'adamw' or 'muon', got {method!r}")


def layer_entropies(model: torch.nn.Module, init: dict[str, torch.Tensor]) -> dict[str, dict[str, float]]:
    """Shannon entropy (nats) of each weight matrix and of its change since ``init``, p ∝ σ and p ∝ σ²."""
    named = dict(model.named_parameters())
    out = {}
    with torch.no_grad():
        for k in MATRICES:
            W = named[k].detach().double()
            row = {f"H_p{p}": float(singular_value_entropy(W, power=p)) for p in (1, 2)}
            D = W - init[k]
            if bool(D.any()):
                row.update({f"dH_p{p}": float(singular_value_entropy(D, power=p)) for p in (1, 2)})
            out[k] = row
    return out


def _epoch_record(model: torch.nn.Module, data: dict, train_loss: float) -> dict[str, float]:
    """Mean training loss of the epoch's minibatches, validation loss (nats) and accuracies after the epoch."""
    val_loss, val_acc = evaluate(model, *data["val"])
    return {"train_loss": train_loss, "val_loss": val_loss, "val_acc": val_acc, "test_acc": accuracy(model, *data["test"])}


def train_run(data: dict, method: str, lr: float, seed: int, cfg: dict[str, Any], *, adamw_lr: float,
              record: bool = True, bar: Any = None) -> dict[str, Any]:
    """Train one model; return accuracies, the final loss, the per-epoch ``history`` (see ``_epoch_record``) and,
    if ``record``, the entropy trajectory. Evaluation draws no random numbers, so it does not change training."""
    model = make_model(seed)
    init = {k: p.detach().double().clone() for k, p in model.named_parameters()}
    opts = make_optimizers(model, method, lr, adamw_lr=adamw_lr, weight_decay=cfg["weight_decay"],
                           momentum=cfg["momentum"])
    X, y = data["train"]
    gen = torch.Generator().manual_seed(1000 + seed)
    trajectory = [{"step": 0, **layer_entropies(model, init)}] if record else []
    counter = {"step": 0, "loss": float("nan")}

    def after_step(loss: float) -> None:
        counter["step"] += 1
        counter["loss"] = loss
        if record and counter["step"] % cfg["log_every"] == 0:
            trajectory.append({"step": counter["step"], **layer_entropies(model, init)})

    history: dict[str, list[float]] = {"train_loss": [], "val_loss": [], "val_acc": [], "test_acc": []}
    for _ in range(cfg["epochs"]):
        batches = torch.randperm(len(y), generator=gen).split(cfg["batch_size"])
        total = train_epoch(model, opts, X, y, batches, after_step=after_step)
        for key, value in _epoch_record(model, data, total / len(y)).items():
            history[key].append(value)
        if bar is not None:
            bar.update(1)
    step, loss = counter["step"], counter["loss"]
    if not math.isfinite(loss):
        raise FloatingPointError(f"{method} at lr={lr}, seed={seed} diverged (loss {loss})")
    result = {"method": method, "lr": lr, "seed": seed, "steps": step, "final_train_loss": loss,
              "train_acc": accuracy(model, *data["train"]), "val_acc": accuracy(model, *data["val"]),
              "test_acc": accuracy(model, *data["test"]), "val_loss": history["val_loss"][-1], "history": history,
              "final_entropies": layer_entropies(model, init)}
    if record:
        result["trajectory"] = trajectory
    return result


def _tune(data, method, lrs, cfg, adamw_lr, bar) -> tuple[float, list[dict]]:
    """Every rate of ``lrs`` with every tuning seed; the best mean validation accuracy wins (a diverged run
    counts as accuracy 0)."""

    def run(lr: float) -> dict[str, Any]:
        accs, losses, entropies, histories = [], [], [], []
        for s in cfg["tune_seeds"]:
            try:
                r = train_run(data, method, lr, s, cfg, adamw_lr=adamw_lr or lr, record=False, bar=bar)
                accs.append(r["val_acc"])
                losses.append(r["val_loss"])
                entropies.append(r["final_entropies"])
                histories.append(r["history"])
            except FloatingPointError:
                accs.append(0.0)
                losses.append(float("inf"))
        return {"lr": lr, "val_acc": float(np.mean(accs)), "val_accs": accs, "val_loss": float(np.mean(losses)),
                "val_losses": losses, "final_entropies": entropies, "histories": histories}

    # accuracies are multiples of 1/360: round away float32 noise so that ties go to the smaller rate
    return tune(lrs, run, score=lambda r: (round(r["val_acc"], 6), -r["lr"]))


def _summary(runs: list[dict]) -> dict[str, Any]:
    """Mean and std over the seeds of the test accuracy and of every final entropy (``final_entropies``: the
    weights at the end of training, whatever ``log_every`` is; a ``dH`` entry is absent only for a matrix that
    never moved, and then absent here)."""
    acc = np.array([r["test_acc"] for r in runs])
    out: dict[str, Any] = {"test_acc_mean": float(acc.mean()), "test_acc_std": float(acc.std(ddof=1)) if len(acc) > 1 else 0.0}
    for k in MATRICES:
        for key in ("H_p1", "H_p2", "dH_p1", "dH_p2"):
            if not all(key in r["final_entropies"][k] for r in runs):
                continue
            vals = np.array([r["final_entropies"][k][key] for r in runs])
            out[f"{k}/{key}"] = {"mean": float(vals.mean()), "std": float(vals.std(ddof=1)) if len(vals) > 1 else 0.0}
    return out


def run(cfg: dict[str, Any], progress: bool = True) -> dict[str, Any]:
    """Tune both optimizers, rerun the chosen rates over ``cfg["seeds"]``; return the results dictionary.

    Keys: ``config``, ``tuning`` (per learning rate: validation accuracy and loss, final entropies and per-epoch
    histories of the tuning seeds), ``chosen_lr``, ``runs`` (per seed: accuracies, final loss, per-epoch
    history, entropy trajectory per layer), ``summary`` (mean/std of test accuracy and of the
    final entropies), ``elapsed_s``.
    """
    t0 = time.perf_counter()
    data = load_digits(cfg["split_seed"])
    n_runs = (len(cfg["adamw_lrs"]) + len(cfg["muon_lrs"])) * len(cfg["tune_seeds"]) + 2 * len(cfg["seeds"])
    bar = tqdm(total=n_runs * cfg["epochs"], desc=NAME, unit="epoch", disable=not progress)
    best_adamw, tune_adamw = _tune(data, "adamw", cfg["adamw_lrs"], cfg, None, bar)
    best_muon, tune_muon = _tune(data, "muon", cfg["muon_lrs"], cfg, best_adamw, bar)
    runs = {m: [train_run(data, m, lr, s, cfg, adamw_lr=best_adamw, bar=bar) for s in cfg["seeds"]]
            for m, lr in (("adamw", best_adamw), ("muon", best_muon))}
    bar.close()
    return {"config": cfg, "tuning": {"adamw": tune_adamw, "muon": tune_muon},
            "chosen_lr": {"adamw": best_adamw, "muon": best_muon, "muon_adamw_part": best_adamw},
            "runs": runs, "summary": {m: _summary(r) for m, r in runs.items()},
            "elapsed_s": time.perf_counter() - t0}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m svmuon.experiments {NAME}", description=describe(__doc__))
    d = DEFAULTS
    p.add_argument("--epochs", type=positive_int, default=d["epochs"],
                   help=f"passes over the training set (default {d['epochs']})")
    p.add_argument("--batch-size", type=positive_int, default=d["batch_size"],
                   help=f"minibatch size (default {d['batch_size']})")
    p.add_argument("--weight-decay", type=nonnegative_float, default=d["weight_decay"],
                   help=f"decoupled weight decay of both optimizers (default {d['weight_decay']})")
    p.add_argument("--adamw-lrs", type=positive_float, nargs="+", default=d["adamw_lrs"], metavar="LR",
                   help="AdamW learning rates to tune over (default: %(default)s)")
    p.add_argument("--muon-lrs", type=positive_float, nargs="+", default=d["muon_lrs"], metavar="LR",
                   help="Muon learning rates to tune over (default: %(default)s)")
    p.add_argument("--tune-seeds", type=seed_arg, nargs="+", default=d["tune_seeds"], metavar="SEED",
                   help="seeds averaged when picking a learning rate (default: %(default)s)")
    p.add_argument("--seeds", type=seed_arg, nargs="+", default=d["seeds"], metavar="SEED",
                   help="fresh seeds rerun at the chosen rates (default: %(default)s)")
    p.add_argument("--log-every", type=positive_int, default=d["log_every"],
                   help=f"steps between entropy records (default {d['log_every']})")
    p.add_argument("--threads", type=positive_int, default=1,
                   help="torch threads (default 1: deterministic, and fastest for these small matrices)")
    p.add_argument("--output", type=output_file, default=None,
                   help=f"results file (default: experiments/results/{NAME}.json of the book's repository when run "
                        "inside it, else under the working directory)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; writes the JSON results file and prints a one-line summary per optimizer."""
    parser = _parser()
    args = parser.parse_args(argv)
    out = args.output or default_file(parser, args, NAME, ("epochs", "batch_size", "weight_decay", "adamw_lrs",
                                                          "muon_lrs", "tune_seeds", "seeds", "log_every"))
    cfg = {**DEFAULTS, "epochs": args.epochs, "batch_size": args.batch_size, "weight_decay": args.weight_decay,
           "adamw_lrs": args.adamw_lrs, "muon_lrs": args.muon_lrs, "tune_seeds": args.tune_seeds,
           "seeds": args.seeds, "log_every": args.log_every}
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        results = run(cfg, progress=not args.no_progress)
    finally:
        torch.set_num_threads(threads)
    results = {"experiment": NAME, "command": f"python -m svmuon.experiments {NAME} " + " ".join(argv or []),
               "hardware": environment(torch_threads=args.threads), **results}
    save(out, results)
    for m, s in results["summary"].items():
        print(f"{m:6s} lr={results['chosen_lr'][m]:g} test acc {s['test_acc_mean']:.4f} ± {s['test_acc_std']:.4f}; "
              + ", ".join(f"{k} H_p1 {s[k + '/H_p1']['mean']:.3f}" for k in MATRICES))
    print(f"wrote {out}")
    return 0
