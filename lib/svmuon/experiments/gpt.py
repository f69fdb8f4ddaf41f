"""Both parts of the book on a small transformer: optimizers, entropy during training, a fixed entropy.

``python -m svmuon.experiments gpt [--arms ...] [--seeds 0 1 2] [--size cpu] [--smoke] [--output-dir DIR]``
trains a small decoder-only transformer (:mod:`svmuon.experiments._gpt_model`: pre-norm, causal attention
with separate Q, K, V, O matrices, GELU MLP, tied embeddings) on next-character prediction over the Python
standard library's own sources (:func:`svmuon.experiments.fixed_entropy.text_corpus`, a contiguous 80/10/10
split) under five *arms*:

* ``adamw``: AdamW on everything;
* ``muon``: :class:`svmuon.Muon` on the hidden matrices (Q, K, V, O, MLP in, MLP out), AdamW on the rest;
* ``stiefel``: ``ManifoldMuon(manifold=Stiefel())`` on every hidden matrix (each starts at the polar factor
  of its Gaussian initialisation, so every singular value is 1 and the entropy is log k throughout);
* ``stiefel-attention``: Stiefel on Q, K, V, O; Muon on the MLP matrices at Muon's tuned rate;
* ``fixed-entropy``: every hidden matrix (scope ``all``), or only the attention or only the MLP matrices, is a
  :class:`svmuon.spectral.FixedEntropyLinear` with entropy exactly ``log k - δ`` (p ∝ σ, learned spectrum);
  its factors U, V are trained by ManifoldMuon(Stiefel), the other hidden matrices by Muon.

"The rest" (embeddings, RMSNorm gains, the spectra's logits and scales) is trained by AdamW at a fixed rate
(``OTHER_LR``) in every arm but plain AdamW. Equal tuning effort: each arm tunes one learning rate from a
grid of four by the validation loss of seed 0 (``fixed-entropy`` at δ = 0, scope ``all``); the chosen rate
then runs the other seeds (and, for ``fixed-entropy``, every δ and scope). Every run records the validation
loss against steps and against training seconds, the time of the forward-backward pass and of each optimizer
(timed separately, so the optimizer's share of a step is measured), and, every ``monitor_every`` steps, the
Shannon and Rényi-2 entropies of σ and σ² of every hidden matrix (:class:`svmuon.spectral.EntropyMonitor`).
Each results file also holds the Gaussian reference of every layer shape: the large-n value (book eq.
``eq-gaussian-limit``) and the Monte Carlo mean at the exact shape.

Results: one file per arm, ``experiments/results/gpt-<size>-<arm>.json`` (resumable: finished runs are kept
and skipped; a file of other settings is refused), with hardware, versions and date. Sizes: ``cpu`` (the
study), ``pilot`` (a smaller model, 300 steps: a stand-in until the study is recorded), ``gpu`` (a larger
model on the whole standard library, bf16 autocast on CUDA), ``smoke`` (seconds). Arms that need Muon's
tuned rate (``stiefel-attention``, ``fixed-entropy``'s partial scopes) read it from the ``muon`` file.

References: liu2025moonlight, su2025entropy, jordan2024muon, loshchilov2019decoupled, radford2019language,
yoshihara2026different.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
from datetime import date
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from svmuon._cli import describe
from svmuon.experiments import _gpt_train as gt
from svmuon.experiments._gpt_model import GPT, GPTConfig  # noqa: F401 (public through this module)
from svmuon.experiments._gpt_results import (  # noqa: F401 (the chapter's readers, public through this module)
    MEASURES, curves_frame, entropy_frame, final_entropy_by_kind, load, mean_se, runs_frame)

NAME = "gpt"
GRIDS = {  # the study's (cpu, gpu): set from the pilot's choices (an arm that chose an end of its grid moved)
    "adamw": [1e-3, 2e-3, 4e-3, 8e-3],
    "muon": [2e-3, 4e-3, 8e-3, 1.6e-2],  # in AdamW units: Muon's match_rms_adamw rule (liu2025moonlight)
    "stiefel": [0.005, 0.01, 0.02, 0.04],  # spectral-norm step lengths
    "stiefel-attention": [0.005, 0.01, 0.02, 0.04],
    "fixed-entropy": [0.005, 0.01, 0.02, 0.04],
}
PILOT_GRIDS = {"adamw": [1e-3, 2e-3, 4e-3, 8e-3], "muon": [1e-3, 2e-3, 4e-3, 8e-3], "stiefel": [0.01, 0.02, 0.04, 0.08],
               "stiefel-attention": [0.01, 0.02, 0.04, 0.08], "fixed-entropy": [0.01, 0.02, 0.04, 0.08]}
DELTAS = (0.0, 0.42, 1.2)  # δ = log k - h of the fixed-entropy runs, scope "all"; 0.42 ≈ 1 - γ (su2025entropy)
SCOPE_DELTAS = (0.0, 0.42)  # the check: only attention, or only the MLP, fixed
NEEDS_MUON = ("stiefel-attention", "fixed-entropy")
PILOT_NOTE = ("PILOT: a smaller model (d_model 64, 2 layers, context 32, batch 16) and short runs (300 steps), "
              "recorded on a shared, busy 2-core machine so that the chapter builds; timings are not clean and "
              "every verdict is provisional. The study is --size cpu.")
SIZES = dict(gt.SIZES, pilot=gt.Size(GPTConfig(context=32, d_model=64, n_layer=2, n_head=2), batch=16, steps=300,
                                     warmup=20, eval_every=20, monitor_every=20, val_windows=128, final_windows=512,
                                     chars=1_000_000))


# ------------------------------------------------------------------------------------------- results I/O

def results_path(folder: Path, size: str, arm: str) -> Path:
    return Path(folder) / f"{NAME}-{size}-{arm}.json"


def _environment() -> dict[str, Any]:
    import svmuon
    from svmuon.bench._common import hardware

    return dict(hardware(), date=date.today().isoformat(), svmuon=svmuon.__version__)


def _finite(x: Any) -> Any:
    """``x`` with every non-finite float replaced by ``None`` (JSON has no NaN)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def _dumps(doc: dict[str, Any]) -> str:
    """Indented JSON with each run on one line (a run's curves and entropies are long columns)."""
    doc = _finite(doc)
    head = json.dumps({k: v for k, v in doc.items() if k != "runs"}, indent=1, allow_nan=False)
    lines = ",\n".join("  " + json.dumps(r, separators=(",", ":"), allow_nan=False) for r in doc.get("runs", []))
    return head[:-2] + ',\n "runs": [\n' + lines + "\n ]\n}\n"


def _save(path: Path, doc: dict[str, Any]) -> None:
    """Atomic write: the data reach the disk before the rename, so a crash leaves the old or the new file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(_dumps(doc))
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


_IDENTITY = ("experiment", "arm", "size", "config", "grid", "other_lr", "hyper")


def _open(path: Path, fresh: dict[str, Any]) -> dict[str, Any]:
    """The file's document if it holds the same experiment, arm and settings (resumable), else ``fresh``;
    a file of other settings is refused (its finished runs would be mixed with new ones)."""
    if not path.exists():
        return fresh
    doc = json.loads(path.read_text())
    same = lambda a, b: json.loads(json.dumps(a)) == json.loads(json.dumps(b))  # noqa: E731 (tuples vs lists)
    for key in _IDENTITY:
        if not same(doc.get(key), fresh[key]):
            raise ValueError(f"{path} holds {key} = {doc.get(key)!r}, not {fresh[key]!r}: it is not a resumable result "
                             "of this run; choose another --output-dir or move the file away")
    return doc


def _key(spec: dict[str, Any]) -> tuple:
    return (float(spec["lr"]), int(spec["seed"]), round(float(spec.get("delta", 0.0)), 6), spec.get("scope", "all"))


# ------------------------------------------------------------------------------------------------ plan

def tuning_plan(arm: str, grid: list[float]) -> list[dict[str, Any]]:
    return [dict(lr=lr, seed=0, delta=0.0, scope="all") for lr in grid]


def final_plan(arm: str, lr: float, seeds: list[int], deltas: tuple[float, ...],
               scope_deltas: tuple[float, ...]) -> list[dict[str, Any]]:
    """The runs at the tuned rate: every seed; for ``fixed-entropy`` every δ (scope all) and the checks."""
    if arm != "fixed-entropy":
        return [dict(lr=lr, seed=s, delta=0.0, scope="all") for s in seeds]
    runs = [dict(lr=lr, seed=s, delta=d, scope="all") for d in deltas for s in seeds]
    return runs + [dict(lr=lr, seed=s, delta=d, scope=sc) for sc in ("attention", "mlp") for d in scope_deltas
                   for s in seeds]


def _best(runs: list[dict[str, Any]], grid: list[float]) -> float:
    """The grid rate whose seed-0 tuning run has the lowest validation loss (a diverged run never wins)."""
    tuned = {r["lr"]: r["val_loss"] for r in runs if r["seed"] == 0 and r["delta"] == 0 and r["scope"] == "all"
             and r["lr"] in grid}
    finite = {lr: v for lr, v in tuned.items() if v is not None and math.isfinite(v)}
    if not finite:
        raise RuntimeError(f"every tuning run diverged (rates {sorted(tuned)}); widen the grid")
    return min(finite, key=finite.get)


def _muon_rate(folder: Path, size: str) -> float | None:
    path = results_path(folder, size, "muon")
    return json.loads(path.read_text()).get("lr") if path.exists() else None


def run_arm(arm: str, size_name: str, size: gt.Size, grid: list[float], folder: Path, data: dict[str, Any], *,
            seeds: list[int], deltas: tuple[float, ...], scope_deltas: tuple[float, ...], note: str = "",
            baseline_draws: int = 64) -> dict[str, Any]:
    """Tune (seed 0), then run the final plan of one arm, saving after every run; finished runs are skipped.

    ``size_name`` names the file (``gpt-<size_name>-<arm>.json``), ``size`` is its configuration and
    ``grid`` the arm's learning rates."""
    path = results_path(folder, size_name, arm)
    hyper = {"weight_decay": gt.WEIGHT_DECAY, "betas": gt.BETAS, "momentum": gt.MOMENTUM,
             "schedule": "linear warm-up, cosine to 0.1", "stiefel": "Stiefel() defaults"}
    fresh = {"experiment": NAME, "arm": arm, "size": size_name, "config": size.record(), "grid": grid,
             "other_lr": gt.OTHER_LR, "hyper": hyper, "note": note, "data": data["info"],
             "baselines": gt.gaussian_baselines(size.model, baseline_draws), "runs": []}
    doc = _open(path, fresh)
    doc["environment"] = _environment()
    done = {_key(r) for r in doc["runs"]}

    def run(specs: list[dict[str, Any]], what: str) -> None:
        todo = [s for s in specs if _key(s) not in done]
        for spec in tqdm(todo, desc=f"{arm}: {what}", leave=False):
            muon_lr = None
            if arm == "stiefel-attention" or (arm == "fixed-entropy" and spec["scope"] != "all"):
                muon_lr = _muon_rate(folder, size_name)
                if muon_lr is None:
                    raise RuntimeError(f"{arm} (scope {spec['scope']}) needs Muon's tuned rate: run --arms muon "
                                       f"first, it writes {results_path(folder, size_name, 'muon')}")
                doc["muon_lr"] = muon_lr
            doc["runs"].append(gt.train(arm, data, size, progress=True, muon_lr=muon_lr, **spec))
            done.add(_key(spec))
            doc["environment"] = _environment()
            _save(path, doc)

    run(tuning_plan(arm, grid), "tuning")
    doc["lr"] = _best(doc["runs"], grid)
    _save(path, doc)
    run(final_plan(arm, doc["lr"], seeds, deltas, scope_deltas), "seeds")
    return doc


# ------------------------------------------------------------------------------------------------- CLI

def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m svmuon.experiments gpt", description=describe(__doc__))
    p.add_argument("--arms", nargs="+", default=list(gt.ARMS), choices=gt.ARMS,
                   help="arms to run, in this order (default: all; muon before those that need its rate)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds of the final runs (default 0 1 2)")
    p.add_argument("--deltas", type=float, nargs="+", default=list(DELTAS),
                   help="δ = log k - h of the fixed-entropy runs with every matrix fixed (default %(default)s)")
    p.add_argument("--scope-deltas", type=float, nargs="*", default=list(SCOPE_DELTAS),
                   help="δ of the checks with only attention / only the MLP fixed (default %(default)s)")
    p.add_argument("--size", default="cpu", choices=[s for s in SIZES if s != "smoke"],
                   help="cpu (the study, default), pilot (smaller, 300 steps), gpu (larger, CUDA, bf16 autocast)")
    p.add_argument("--device", default=None, help="torch device (default: the size's, cpu or cuda)")
    p.add_argument("--output-dir", type=Path, default=None, help="folder of gpt-<size>-<arm>.json "
                   "(default experiments/results; required with --smoke)")
    p.add_argument("--smoke", action="store_true", help="every code path in seconds: a tiny model, 6 steps, two "
                   "rates of each grid, the --size's device and precision (gpu: bf16 autocast, also on a CPU)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1: one process per core)")
    p.add_argument("--note", default=None, help="a note stored in every results file (default: none; the "
                   "pilot size stores its pilot note)")
    return p


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Every argument, before any compute."""
    if args.smoke and args.output_dir is None:
        parser.error("--smoke needs --output-dir (it must not overwrite the recorded results)")
    if min(args.seeds) < 0 or len(set(args.seeds)) != len(args.seeds):
        parser.error(f"--seeds must be distinct integers >= 0, got {args.seeds}")
    k = SIZES["smoke" if args.smoke else args.size].model.d_model  # the smallest k of any hidden matrix
    for name in ("deltas", "scope_deltas"):
        bad = [d for d in getattr(args, name) if not (0 <= d < math.log(k)) or not math.isfinite(d)]
        if bad:
            parser.error(f"--{name.replace('_', '-')} must lie in [0, log k) = [0, {math.log(k):.4g}), got {bad}")
    if args.threads < 1:
        parser.error(f"--threads must be >= 1, got {args.threads}")
    device = args.device or SIZES[args.size].device
    try:
        dev = torch.device(device)
    except RuntimeError as err:
        parser.error(f"--device: {err}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {device}: CUDA is not available here (use --device cpu, e.g. with --smoke)")
    if len(set(args.arms)) != len(args.arms):
        parser.error(f"--arms must not repeat an arm, got {args.arms}")


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    _check(parser, args)
    torch.set_num_threads(args.threads)
    device = args.device or SIZES[args.size].device
    size = dataclasses.replace(SIZES[args.size], device=device)
    size_name = args.size
    if args.smoke:  # the tiny model with the chosen size's device, precision and corpus
        size = dataclasses.replace(SIZES["smoke"], device=device, amp=size.amp, recursive=size.recursive)
        size_name = f"smoke-{args.size}"
    from svmuon._paths import results_dir

    folder = args.output_dir or results_dir("experiments")
    note = args.note if args.note is not None else (PILOT_NOTE if size_name == "pilot" else "")
    data = gt.load_data(size)
    for arm in args.arms:
        grid = GRIDS[arm][1:3] if args.smoke else (PILOT_GRIDS if size_name == "pilot" else GRIDS)[arm]
        doc = run_arm(arm, size_name, size, grid, folder, data,
                      seeds=args.seeds[:2] if args.smoke else args.seeds,
                      deltas=tuple(args.deltas[:2] if args.smoke else args.deltas),
                      scope_deltas=tuple(args.scope_deltas[:1] if args.smoke else args.scope_deltas),
                      note=note, baseline_draws=4 if args.smoke else 64)
        print(f"{arm}: {len(doc['runs'])} runs, lr {doc['lr']:g}, in {results_path(folder, size_name, arm)}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
