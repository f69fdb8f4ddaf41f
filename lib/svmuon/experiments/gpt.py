"""Both parts of the book on a small transformer: optimizers, entropy during training, a fixed entropy.

``python -m svmuon.experiments gpt [--arms ...] [--seeds 0 1 2] [--size cpu] [--smoke] [--output-dir DIR]
[--time-budget SECONDS]``
trains a small decoder-only transformer (``svmuon.experiments._gpt_model``: pre-norm, causal attention
with separate Q, K, V, O matrices, GELU MLP, tied embeddings) on next-character prediction over the Python
standard library's own sources (:func:`svmuon.experiments.runs.text_corpus`, a contiguous 80/10/10
split) under six *arms*:

* ``adamw``: AdamW on everything;
* ``muon``: :class:`~svmuon.optim.muon.Muon` on the hidden matrices (Q, K, V, O, MLP in, MLP out), AdamW on the rest;
* ``stiefel``: ``ManifoldMuon(manifold=Stiefel())`` on every hidden matrix (each starts at the polar factor
  of its Gaussian initialisation, so every singular value is 1 and the entropy is log k throughout);
* ``stiefel-attention``: Stiefel on Q, K, V, O; Muon on the MLP matrices at Muon's tuned rate;
* ``fixed-entropy``: every hidden matrix (scope ``all``), or only the attention or only the MLP matrices, is a
  :class:`~svmuon.experiments.fixed_entropy.FixedEntropyLinear` with entropy exactly ``log k - δ`` (p ∝ σ, learned spectrum);
  its factors U, V are trained by ManifoldMuon(Stiefel), the other hidden matrices by Muon. Each layer starts
  at the Frobenius norm of the plain Gaussian layer it replaces;
* ``fixed-entropy-unit``: the same, started at the Frobenius norm of a Stiefel matrix (every singular value 1 at
  δ = 0, where the Stiefel arm starts): the check that separates the initial scale from the constraint.

"The rest" (embeddings, RMSNorm gains, the spectra's logits and scales) is trained by AdamW at a fixed rate
(``OTHER_LR``) in every arm but plain AdamW. Equal tuning effort: each arm tunes one learning rate from a
grid of four by the validation loss of seed 0 (``fixed-entropy`` at δ = 0, scope ``all``); the chosen rate
then runs the other seeds (and, for ``fixed-entropy``, every δ and scope). Every run records the validation
loss against steps and against training seconds, the time of the forward-backward pass and of each optimizer
(timed separately, so the optimizer's share of a step is measured), and, every ``monitor_every`` steps, the
Shannon and Rényi-2 entropies of σ and σ² of every hidden matrix (:class:`~svmuon.spectral.monitor.EntropyMonitor`).
Each results file also holds the Gaussian reference of every layer shape: the large-n value (book eq.
``eq-gaussian-limit``) and the Monte Carlo mean at the exact shape.

Results: one file per arm, ``experiments/results/gpt-<size>-<arm>.json`` (resumable: finished runs are kept
and skipped; a file of other settings is refused), with hardware, versions and date. Sizes: ``cpu`` (the
study), ``pilot`` (a smaller model, 300 steps, recorded beside the study as a check of its verdicts),
``gpu`` (a larger model on the whole standard library, bf16 autocast on CUDA), ``smoke`` (seconds). Arms that need Muon's
tuned rate (``stiefel-attention``, ``fixed-entropy``'s partial scopes) read it from the ``muon`` file.

References: liu2025moonlight, su2025entropy, jordan2024muon, loshchilov2019decoupled, radford2019language,
yoshihara2026different.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from svmuon import results
from svmuon._cli import describe, float_in, output_folder, positive_int, refuse_repeats
from svmuon._cli import device as device_arg
from svmuon._cli import seed as seed_arg
from svmuon._paths import default_results_dir
from svmuon.experiments import _gpt_train as gt
from svmuon.experiments import runs
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
    "fixed-entropy-unit": [0.005, 0.01, 0.02, 0.04],
}
PILOT_GRIDS = {"adamw": [1e-3, 2e-3, 4e-3, 8e-3], "muon": [1e-3, 2e-3, 4e-3, 8e-3], "stiefel": [0.01, 0.02, 0.04, 0.08],
               "stiefel-attention": [0.01, 0.02, 0.04, 0.08], "fixed-entropy": [0.01, 0.02, 0.04, 0.08],
               "fixed-entropy-unit": [0.01, 0.02, 0.04, 0.08]}
DELTAS = (0.0, 0.42, 1.2)  # δ = log k - h of the fixed-entropy runs, scope "all"; 0.42 ≈ 1 - γ (su2025entropy)
SCOPE_DELTAS = (0.0, 0.42)  # the check: only attention, or only the MLP, fixed
PILOT_NOTE = ("PILOT: a smaller model (d_model 64, 2 layers, context 32, batch 16) and short runs (300 steps), "
              "recorded on a shared, busy 2-core machine so that the chapter builds; timings are not clean and "
              "every verdict is provisional. The study is --size cpu.")
SIZES = dict(gt.SIZES, pilot=gt.Size(GPTConfig(context=32, d_model=64, n_layer=2, n_head=2), batch=16, steps=300,
                                     warmup=20, eval_every=20, monitor_every=20, val_windows=128, final_windows=512,
                                     chars=1_000_000))


# ------------------------------------------------------------------------------------------- results I/O

def results_path(folder: Path, size: str, arm: str) -> Path:
    return Path(folder) / f"{NAME}-{size}-{arm}.json"


def _hyper() -> dict[str, Any]:
    """The fixed hyperparameters, recorded in every file (and part of what a resumed file must match)."""
    from svmuon.orthogonal.stiefel import Stiefel

    stiefel = {k: v if isinstance(v, (int, float, str, bool, type(None))) else str(v)
               for k, v in dataclasses.asdict(Stiefel().options).items()}
    return {"weight_decay": gt.WEIGHT_DECAY, "betas": list(gt.BETAS), "momentum": gt.MOMENTUM,
            "schedule": "linear warm-up, cosine to 0.1", "stiefel": stiefel}


def identity(arm: str, size_name: str, size: gt.Size, grid: list[float]) -> dict[str, Any]:
    """What a results file of this arm and size must hold to be resumed by this run."""
    return {"experiment": NAME, "arm": arm, "size": size_name, "config": size.record(), "grid": list(grid),
            "other_lr": gt.OTHER_LR, "hyper": _hyper()}


def previous(path: Path, ident: dict[str, Any]) -> dict[str, Any] | None:
    """The recorded document at ``path`` if it can be resumed, ``None`` if there is no file.

    Raises:
        ValueError: the file holds another experiment, arm, size, configuration, grid or hyperparameters (its
            finished runs would be mixed with new ones); ``svmuon.results.ResultsFileError`` for a damaged file.
    """
    if not path.exists():
        return None
    doc = results.load(path, expect={"experiment": NAME})
    same = lambda a, b: json.loads(json.dumps(a)) == json.loads(json.dumps(b))  # noqa: E731 (tuples vs lists)
    for key, value in ident.items():
        if not same(doc.get(key), value):
            raise ValueError(f"{path} holds {key} = {doc.get(key)!r}, not {value!r}: it is not a resumable result "
                             "of this run; choose another --output-dir or move the file away")
    return doc


def _finite(x: Any) -> Any:
    """``x`` with every non-finite float replaced by ``None`` (JSON has no NaN)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def _save(path: Path, doc: dict[str, Any]) -> None:
    """Atomic, locked write (:func:`svmuon.experiments.runs.save`), compact: a run's curves and entropies are
    long columns."""
    runs.save(path, _finite(doc), indent=None)


def _key(spec: dict[str, Any]) -> tuple:
    return (float(spec["lr"]), int(spec["seed"]), round(float(spec.get("delta", 0.0)), 6), spec.get("scope", "all"))


# ------------------------------------------------------------------------------------------------ plan

def tuning_plan(arm: str, grid: list[float]) -> list[dict[str, Any]]:
    return [dict(lr=lr, seed=0, delta=0.0, scope="all") for lr in grid]


def final_plan(arm: str, lr: float, seeds: list[int], deltas: tuple[float, ...],
               scope_deltas: tuple[float, ...]) -> list[dict[str, Any]]:
    """The runs at the tuned rate: every seed; for a fixed-entropy arm every δ (scope all) and the checks."""
    if arm not in gt.FIXED_ARMS:
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
    """Muon's tuned rate from its results file of this size (``None`` before its tuning is done)."""
    path = results_path(folder, size, "muon")
    return results.load(path, expect={"experiment": NAME}).get("lr") if path.exists() else None


class OutOfTime(Exception):
    """Raised by :class:`TimeBudget` before a run that would not end within the budget."""


class TimeBudget:
    """Wall-clock budget of one invocation: a run starts only if it would end in time, judged by the longest
    run so far (the first run always starts). Every finished run is saved, so the same command resumes.

    Args:
        seconds: the budget (``None``: unlimited).
        clock: a monotonic clock in seconds (a test passes a fake one).
    """

    def __init__(self, seconds: float | None, clock: Any = time.monotonic) -> None:
        self._clock, self._end = clock, None if seconds is None else clock() + seconds
        self.longest, self.done = 0.0, 0

    def start(self) -> float:
        """The start time of a run; raises :class:`OutOfTime` when a run as long as the longest would overrun."""
        now = self._clock()
        if self._end is not None and self.done and now + self.longest > self._end:
            raise OutOfTime(f"{self.done} runs done; the next would pass the time budget")
        return now

    def finish(self, started: float) -> None:
        self.longest, self.done = max(self.longest, self._clock() - started), self.done + 1


def run_arm(arm: str, size_name: str, size: gt.Size, grid: list[float], folder: Path, data: dict[str, Any], *,
            seeds: list[int], deltas: tuple[float, ...], scope_deltas: tuple[float, ...], note: str = "",
            baseline_draws: int = 64, budget: TimeBudget | None = None) -> dict[str, Any]:
    """Tune (seed 0), then run the final plan of one arm, saving after every run; finished runs are skipped.

    ``size_name`` names the file (``gpt-<size_name>-<arm>.json``), ``size`` is its configuration and
    ``grid`` the arm's learning rates. Raises :class:`OutOfTime` from ``budget`` (after saving every finished
    run) when the next run would overrun it."""
    budget = budget or TimeBudget(None)
    path = results_path(folder, size_name, arm)
    ident = identity(arm, size_name, size, grid)
    doc = previous(path, ident) or {**ident, "note": note, "data": data["info"],
                                    "baselines": gt.gaussian_baselines(size.model, baseline_draws), "runs": []}
    doc["environment"] = runs.environment()
    done = {_key(r) for r in doc["runs"]}

    def run(specs: list[dict[str, Any]], what: str) -> None:
        todo = [s for s in specs if _key(s) not in done]
        for spec in tqdm(todo, desc=f"{arm}: {what}", leave=False):
            started = budget.start()
            muon_lr = None
            if arm == "stiefel-attention" or (arm in gt.FIXED_ARMS and spec["scope"] != "all"):
                muon_lr = _muon_rate(folder, size_name)
                if muon_lr is None:
                    raise RuntimeError(f"{arm} (scope {spec['scope']}) needs Muon's tuned rate: run --arms muon "
                                       f"first, it writes {results_path(folder, size_name, 'muon')}")
                doc["muon_lr"] = muon_lr
            doc["runs"].append(gt.train(arm, data, size, progress=True, muon_lr=muon_lr, **spec))
            done.add(_key(spec))
            doc["environment"] = runs.environment()
            _save(path, doc)
            budget.finish(started)

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
    p.add_argument("--seeds", type=seed_arg, nargs="+", default=[0, 1, 2],
                   help="seeds of the final runs (default 0 1 2; tuning always uses seed 0)")
    p.add_argument("--deltas", type=float_in(0.0), nargs="+", default=list(DELTAS),
                   help="δ = log k - h of the fixed-entropy runs with every matrix fixed (default %(default)s)")
    p.add_argument("--scope-deltas", type=float_in(0.0), nargs="*", default=list(SCOPE_DELTAS),
                   help="δ of the checks with only attention / only the MLP fixed (default %(default)s)")
    p.add_argument("--size", default="cpu", choices=[s for s in SIZES if s != "smoke"],
                   help="cpu (the study, default), pilot (smaller, 300 steps), gpu (larger, CUDA, bf16 autocast)")
    p.add_argument("--device", type=device_arg, default=None, help="cpu or cuda (default: the size's)")
    p.add_argument("--output-dir", type=output_folder, default=None, help="folder of gpt-<size>-<arm>.json "
                   "(default: experiments/results of the book's repository; required with --smoke)")
    p.add_argument("--smoke", action="store_true", help="every code path in seconds: a tiny model, 6 steps, two "
                   "rates of each grid, the --size's device and precision (gpu: bf16 autocast, also on a CPU)")
    p.add_argument("--threads", type=positive_int, default=1, help="torch threads (default 1: one process per core)")
    p.add_argument("--time-budget", type=float_in(0.0), default=None, metavar="SECONDS",
                   help="start a run only if it would end within SECONDS of the start, judged by the longest "
                   "run so far; finished runs are saved, so the same command resumes (default: no limit)")
    p.add_argument("--note", default=None, help="a note stored in every results file (default: none; the "
                   "pilot size stores its pilot note)")
    return p


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Every argument and every results file to be resumed, before any compute; sets ``args.plan``."""
    refuse_repeats(parser, arms=args.arms, seeds=args.seeds, deltas=args.deltas, scope_deltas=args.scope_deltas)
    if args.smoke and args.output_dir is None:
        parser.error("--smoke needs --output-dir (it must not overwrite the recorded results)")
    device = args.device or SIZES[args.size].device
    if device == "cuda" and not torch.cuda.is_available():
        parser.error(f"--size {args.size} runs on CUDA, which torch does not see here; add --device cpu "
                     "(e.g. with --smoke)")
    size = dataclasses.replace(SIZES[args.size], device=device)
    size_name = args.size
    if args.smoke:  # the tiny model with the chosen size's device, precision and corpus
        size = dataclasses.replace(SIZES["smoke"], device=device, amp=size.amp, recursive=size.recursive)
        size_name = f"smoke-{args.size}"
    k = size.model.d_model  # the smallest k of any hidden matrix
    for name in ("deltas", "scope_deltas"):
        bad = [d for d in getattr(args, name) if not d < math.log(k)]
        if bad:
            parser.error(f"--{name.replace('_', '-')} must lie in [0, log k) = [0, {math.log(k):.4g}), got {bad}")
    folder = args.output_dir or runs.check_output(parser, default_results_dir("experiments"), "--output-dir",
                                                  folder=True)
    grids = {arm: GRIDS[arm][1:3] if args.smoke else (PILOT_GRIDS if size_name == "pilot" else GRIDS)[arm]
             for arm in args.arms}
    for arm in args.arms:
        try:
            previous(results_path(folder, size_name, arm), identity(arm, size_name, size, grids[arm]))
        except (OSError, ValueError) as err:  # ResultsFileError is a ValueError
            parser.error(str(err))
    args.plan = (size_name, size, folder, grids)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    _check(parser, args)
    torch.set_num_threads(args.threads)
    size_name, size, folder, grids = args.plan
    note = args.note if args.note is not None else (PILOT_NOTE if size_name == "pilot" else "")
    data = gt.load_data(size)
    budget = TimeBudget(args.time_budget)
    for arm in args.arms:
        try:
            doc = run_arm(arm, size_name, size, grids[arm], folder, data,
                          seeds=args.seeds[:2] if args.smoke else args.seeds,
                          deltas=tuple(args.deltas[:2] if args.smoke else args.deltas),
                          scope_deltas=tuple(args.scope_deltas[:1] if args.smoke else args.scope_deltas),
                          note=note, baseline_draws=4 if args.smoke else 64, budget=budget)
        except OutOfTime as stop:
            print(f"stopped by --time-budget at arm {arm}: {stop}; the same command resumes "
                  f"(results in {folder})")
            return 0
        print(f"{arm}: {len(doc['runs'])} runs, lr {doc['lr']:g}, in {results_path(folder, size_name, arm)}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
