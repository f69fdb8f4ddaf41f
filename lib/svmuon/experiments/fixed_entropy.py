"""Training with the singular-value entropy of every hidden weight matrix held fixed at a target h.

``python -m svmuon.experiments fixed-entropy [--tasks digits text] [--seeds 0 1 2] [--smoke]`` answers, by
training, the question of su2025entropy: *if the entropy of a matrix parameter must be fixed in advance, which
value is best?* Each hidden weight matrix (n_out × n_in, k = min of the two) is parametrised as

    W = U diag(σ) Vᵀ,   U ∈ St(n_out, k),  V ∈ St(n_in, k),   σ = c · p^{1/r},  p = tempered_softmax(z, h)

(book eq. eq-fixed-entropy-layer), so its normalised spectrum ``σ^r / Σσ^r`` is ``p`` and its entropy is ``h``
exactly, whatever U, V, z and c are (:mod:`svmuon.spectral.level_set`). ``U`` and ``V`` are trained by
:class:`svmuon.ManifoldMuon` on their Stiefel manifolds (``Stiefel()``, the default closed-form ``"completion"``
direction, and momentum kept tangent), everything else by Adam. The arms:

* ``shape``: a fixed spectrum shape, ``z_i = -i/(k-1)`` (an exponential profile ``p_i ∝ e^{-β i/(k-1)}``),
  with a learned overall scale ``c``;
* ``level_set``: ``z`` learned too (from the same start), so the spectrum moves on the level set
  ``{H(p) = h}``;
* ``orthogonal``: ``h = log k``, all singular values equal (both arms coincide there);
* baselines without the constraint on the same network, data and budget: ``muon`` (:class:`svmuon.Muon` on
  the hidden matrices, AdamW on the rest) and ``adamw``; their final entropies are recorded.

Targets are given as offsets ``δ = log k - h`` (the same δ for every layer; the source's answer is
δ = 1 - γ ≈ 0.42). Power ``r = 1`` is the book's normalisation (p ∝ σ), ``r = 2`` the energy one (p ∝ σ²).

Tasks (real data, offline): ``digits`` (scikit-learn's 8×8 digits, MLP 64 → 256 → 64 → 10, 40 epochs;
alpaydin1998digits) and ``text`` (next-character prediction on the Python standard library's own source
files: 8 characters of context, embedding 8, MLP 64 → 256 → 64 → 97 classes, 6 epochs of 150 minibatches of 128);
``digits-wide``, the width check, is digits with a hidden layer of 1024 (the same k = 64), and ``digits-deep``, the
depth check, has a third hidden matrix (256×256); ``digits-unit`` and ``text-unit``, the initial-scale check, start
the fixed-entropy layers at ``‖W‖_F² = k`` (a Stiefel matrix's scale) instead of He's ``2 n_out``, and ``digits-he`` and
``text-he`` are the same tasks from He's scale recorded beside them (the same library), both with the constrained arms
only (their rate tuned afresh; the baselines are those of the plain task). Learning rates are picked per
task and method from a small grid by validation loss with seed 0 at δ = 0 (the fixed-entropy arms) or
unconstrained (the baselines), then every run uses them. Per run: final test loss and accuracy, training
loss, the measured entropy of every hidden matrix at the end, the largest ``|H - h|`` seen at epoch ends (from
the float32 weights' singular values), the largest Stiefel defect, and seconds.

Results (resumable: finished runs are kept and skipped): ``experiments/results/fixed-entropy-<task>.json``
with hardware, versions and date. References: su2025entropy, jordan2024muon, alpaydin1998digits, kingma2015adam,
he2015delving, loshchilov2019decoupled.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm  # plain: tqdm.auto warns on stderr in a notebook without ipywidgets (a chapter imports this)

from svmuon import results
from svmuon._cli import describe, float_in, nonnegative_int, output_folder, positive_float, positive_int
from svmuon._cli import seed as seed_arg
from svmuon._paths import default_results_dir
from svmuon.experiments.fixed_entropy_model import OTHER_LR, FixedEntropyLinear, Net, layer_entropies, make_optimizers
from svmuon.experiments.fixed_entropy_model import stiefel_defect
from svmuon.experiments.runs import check_output, environment, evaluate, load_digits, save, text_corpus, train_epoch

__all__ = ["FixedEntropyLinear", "Net", "make_optimizers", "layer_entropies", "load_task", "train", "plan",
           "run_task", "previous_runs", "main"]

NAME = "fixed-entropy"
DELTAS = (3.0, 2.0, 1.2, 0.7, 0.42, 0.2, 0.1)  # δ = log k - h; δ = 0 is the "orthogonal" arm
TASKS = {
    # sizes: input, hidden 1, hidden 2, classes; the two hidden matrices are 256×64 (tall) and 64×256 (wide)
    "digits": dict(sizes=(64, 256, 64, 10), epochs=40, batch_size=64, steps_per_epoch=None),
    # the width check: hidden layer 1024 wide, the same k = 64 (matrices 1024×64 and 64×1024)
    "digits-wide": dict(sizes=(64, 1024, 64, 10), epochs=40, batch_size=64, steps_per_epoch=None),
    # the depth check: a third hidden matrix, 256×256 (k = 256), between the two of "digits"
    "digits-deep": dict(sizes=(64, 256, 256, 64, 10), epochs=40, batch_size=64, steps_per_epoch=None),
    "text": dict(sizes=(64, 256, 64, 97), epochs=6, batch_size=128, steps_per_epoch=150, context=8, embed=8),
}
# the initial-scale check: the fixed-entropy layers started at ‖W‖_F² = k (every singular value 1 at δ = 0), and at
# He's 2 n_out again, recorded together with the same library; the constrained arms only (the baselines do not have
# these layers), their rate tuned afresh
for _task in ("digits", "text"):
    for _start in ("he", "unit"):
        TASKS[f"{_task}-{_start}"] = dict(TASKS[_task], start=_start, baselines=False)
GRIDS = {"manifold": [0.001, 0.002, 0.005, 0.01], "muon": [3e-4, 1e-3, 3e-3, 1e-2], "adamw": [3e-4, 1e-3, 3e-3, 1e-2]}
TEXT_CHARS = 400_000  # characters of the text corpus (svmuon.experiments.runs.text_corpus)


# ---------------------------------------------------------------------------------------------- data

def load_task(task: str, chars: int = TEXT_CHARS) -> dict[str, Any]:
    """``{"train"|"val"|"test": (X, y), "info": ...}``; text: contiguous 80/10/10 split of the corpus, X the
    ``(N, context)`` windows of every position (val/test: 8000 evenly spaced ones)."""
    if task.startswith("digits"):
        data: dict[str, Any] = load_digits()
        data["info"] = {"source": "sklearn.datasets.load_digits", "train": len(data["train"][1])}
        return data
    tokens, info = text_corpus(chars)  # the standard library's own source, offline
    ctx = TASKS["text"]["context"]
    t = torch.from_numpy(tokens)
    n = len(t)
    cuts = {"train": (0, int(0.8 * n)), "val": (int(0.8 * n), int(0.9 * n)), "test": (int(0.9 * n), n)}
    data: dict[str, Any] = {"info": info}
    for split, (a, b) in cuts.items():
        pos = torch.arange(a + ctx, b)
        if split != "train":
            pos = pos[torch.linspace(0, len(pos) - 1, min(8000, len(pos))).long()]
        windows = pos.unsqueeze(1) + torch.arange(-ctx, 0).unsqueeze(0)
        data[split] = (t[windows], t[pos])
    return data


# ------------------------------------------------------------------------------------------ training

def train(task: str, data: dict[str, Any], method: str, lr: float, seed: int, *, delta: float = 0.0,
          power: float = 1, epochs: int | None = None, steps_per_epoch: int | None = None,
          dtype: torch.dtype = torch.float32, progress: bool = False) -> dict[str, Any]:
    """One run; ``method`` is an arm (``shape``, ``level_set``, ``orthogonal``) or a baseline."""
    cfg = TASKS[task]
    epochs = cfg["epochs"] if epochs is None else epochs
    arm = {"shape": "shape", "level_set": "level_set", "orthogonal": "shape"}.get(method)
    net = Net(cfg["sizes"], seed, arm, delta if method != "orthogonal" else 0.0, power,
              context=cfg.get("context", 0), embed=cfg.get("embed", 0), dtype=dtype, start=cfg.get("start", "he"))
    opts = make_optimizers(net, "manifold" if arm else method, lr)
    X, y = data["train"]
    X = X if X.dtype == torch.long else X.to(dtype)
    Xv, Xt = [data[s][0] if data[s][0].dtype == torch.long else data[s][0].to(dtype) for s in ("val", "test")]
    gen = torch.Generator().manual_seed(seed + 1000)
    per_epoch = steps_per_epoch or cfg["steps_per_epoch"]
    bs = cfg["batch_size"]
    curve, worst_gap, worst_defect, t0 = [], 0.0, 0.0, time.perf_counter()
    for _ in tqdm(range(epochs), desc=f"{task} {method} δ={delta:g} r={power:g} s={seed}", leave=False, disable=not progress):
        if per_epoch is None:
            batches = torch.randperm(len(y), generator=gen).split(bs)
        else:
            batches = torch.randint(len(y), (per_epoch, bs), generator=gen).unbind(0)
        total = train_epoch(net, opts, X, y, batches)
        curve.append({"train_loss": total / sum(len(b) for b in batches),
                      "val_loss": evaluate(net, Xv, data["val"][1])[0]})
        if arm:
            H = layer_entropies(net, power)
            worst_gap = max(worst_gap, max(abs(x - m.h) for x, m in zip(H, net.hidden)))
            worst_defect = max(worst_defect, max(stiefel_defect(m) for m in net.hidden))
    test_loss, test_acc = evaluate(net, Xt, data["test"][1])
    val_loss, val_acc = evaluate(net, Xv, data["val"][1])
    out = {"task": task, "method": method, "delta": 0.0 if method == "orthogonal" else delta, "power": power,
           "seed": seed, "lr": lr, "test_loss": test_loss, "test_acc": test_acc, "val_loss": val_loss,
           "val_acc": val_acc, "curve": curve, "seconds": time.perf_counter() - t0,
           "entropy_p1": layer_entropies(net, 1), "entropy_p2": layer_entropies(net, 2),
           "k": [min(m.weight().shape) if arm else min(m.weight.shape) for m in net.hidden]}
    if arm:
        out |= {"max_entropy_error": worst_gap, "max_stiefel_defect": worst_defect,
                "scale": [float(m.log_scale.detach().exp()) for m in net.hidden]}
    return out


# ----------------------------------------------------------------------------------------------- plan

def plan(seeds: list[int], deltas: tuple[float, ...], powers: list[float], square_seeds: int,
         baselines: bool = True) -> list[dict[str, Any]]:
    """Every run of one task after tuning: (method, δ, r, seed); ``baselines``: the free Muon and AdamW runs too."""
    methods = ("orthogonal", "muon", "adamw") if baselines else ("orthogonal",)
    runs = [dict(method=m, delta=0.0, power=1, seed=s) for m in methods for s in seeds]
    for r in powers:
        for d in deltas:
            for m in ("shape", "level_set"):
                for s in (seeds if r == 1 else seeds[:square_seeds]):
                    runs.append(dict(method=m, delta=d, power=r, seed=s))
    return runs


def _key(r: dict[str, Any]) -> tuple:
    return (r["method"], round(float(r["delta"]), 6), float(r["power"]), int(r["seed"]))


def _check_resumable(path: Path, doc: dict[str, Any], head: dict[str, Any]) -> None:
    """Refuse to resume a results file written by another experiment, task or configuration: its finished
    runs (keyed by method, δ, r, seed only) and its tuned learning rates would be mixed silently with the new
    ones (e.g. a 1-epoch ``--smoke`` file taken as finished full runs). Files from before the ``settings``
    record hold full runs with the default settings. ``head``: the identifying fields of this run."""
    same = lambda a, b: json.loads(json.dumps(a)) == json.loads(json.dumps(b))  # noqa: E731 (tuples vs lists)
    recorded = doc.get("settings", {"epochs": None, "steps_per_epoch": None, "tune": True, "chars": TEXT_CHARS})
    for field in ("experiment", "task", "config", "grids", "other_lr"):
        if not same(doc.get(field), head[field]):
            raise results.ResultsFileError(
                f"{path} holds {field} = {doc.get(field)!r}, not {head[field]!r}: it is not a resumable result of "
                "this run; choose another --output-dir or move the file away")
    if not same(recorded, head["settings"]):
        raise results.ResultsFileError(
            f"{path} was written with settings {recorded!r}, this run uses {head['settings']!r} (a --smoke file "
            "and a full sweep cannot share a file); choose another --output-dir")
    for field, kind in (("runs", list), ("tuning", list), ("lr", dict), ("lr_check", list)):
        if field in doc and not isinstance(doc[field], kind):
            raise results.ResultsFileError(f"{path}: its {field!r} field is a {type(doc[field]).__name__}, "
                                           f"expected a {kind.__name__}: the file is damaged")
    doc.setdefault("settings", head["settings"])


def _head(task: str, settings: dict[str, Any]) -> dict[str, Any]:
    return {"experiment": NAME, "task": task, "config": TASKS[task], "grids": GRIDS, "other_lr": OTHER_LR,
            "settings": settings}


def _settings(epochs: int | None, steps_per_epoch: int | None, tune: bool, chars: int) -> dict[str, Any]:
    return {"epochs": epochs, "steps_per_epoch": steps_per_epoch, "tune": tune, "chars": chars}


SMOKE = dict(epochs=1, steps_per_epoch=20, tune=False, chars=20_000)  # the --smoke settings


def previous_runs(path: Path, task: str, settings: dict[str, Any]) -> dict[str, Any] | None:
    """The results file ``path`` of an earlier run of the same task and settings (to resume), or ``None``
    if there is none. Raises ``svmuon.results.ResultsFileError`` (a ValueError naming the file and what is
    wrong) for an empty, damaged or foreign file, or one of another task or configuration."""
    if not path.exists():
        return None
    doc = results.load(path, expect={"experiment": NAME})
    _check_resumable(path, doc, _head(task, settings))
    return doc


def run_task(task: str, path: Path, *, seeds: list[int], deltas: tuple[float, ...], powers: list[float],
             square_seeds: int, epochs: int | None = None, steps_per_epoch: int | None = None, tune: bool = True,
             chars: int = TEXT_CHARS, lr_check: tuple[float, ...] = (), fresh: bool = False) -> dict[str, Any]:
    """Tune (seed 0), then run the plan for one task, saving after every run; finished runs are skipped.

    The results file is locked for the whole call (:func:`svmuon.results.lock`): a second run on the same
    file waits, then resumes from what the first one wrote. ``fresh``: start from nothing and replace the file
    (the ``--smoke`` runs); the file must then hold a result of the same settings (a smoke file), so that a
    smoke run never overwrites a full sweep.

    ``lr_check``: offsets δ at which both fixed-entropy arms (r = 1) also run at every other rate of the
    manifold grid, all seeds (``doc["lr_check"]``): the rate was tuned at δ = 0, and this shows whether a
    point loses only for want of its own rate."""
    settings = _settings(epochs, steps_per_epoch, tune, chars)
    with results.lock(path):
        old = previous_runs(path, task, settings)  # before the data: a bad file fails at once
        data = load_task(task, chars)
        doc = {**_head(task, settings), "data": data["info"], "tuning": [], "runs": []}
        if old is not None and not fresh:
            doc = old
        return _run_locked(task, path, doc, data, seeds=seeds, deltas=deltas, powers=powers,
                           square_seeds=square_seeds, lr_check=lr_check,
                           kw=dict(epochs=epochs, steps_per_epoch=steps_per_epoch), tune=tune)


def _run_locked(task: str, path: Path, doc: dict[str, Any], data: dict[str, Any], *, seeds, deltas, powers,
                square_seeds, lr_check, kw, tune) -> dict[str, Any]:
    doc["environment"] = environment()
    baselines = TASKS[task].get("baselines", True)  # False: the constrained arms only (the start check)
    if "lr" not in doc:
        lrs = {}
        groups = (("manifold", ["orthogonal"]), ("muon", ["muon"]), ("adamw", ["adamw"]))
        for group, methods in groups if baselines else groups[:1]:
            grid = GRIDS[group] if tune else GRIDS[group][1:2]
            for lr in tqdm(grid, desc=f"{task} tuning {group}", leave=False):
                r = train(task, data, methods[0], lr, 0, **kw)
                doc["tuning"].append({k: r[k] for k in ("method", "lr", "val_loss", "val_acc", "seconds")})
            best = min((t for t in doc["tuning"] if t["method"] == methods[0]),  # a diverged (NaN) run never wins
                       key=lambda t: (math.isnan(t["val_loss"]), t["val_loss"]))
            lrs[group] = best["lr"]
        doc["lr"] = lrs
        save(path, doc, indent=1)
    done = {_key(r) for r in doc["runs"]}
    todo = []
    for r in plan(seeds, deltas, powers, square_seeds, baselines):  # repeated --seeds/--deltas/--powers: each point once
        if _key(r) not in done:
            done.add(_key(r))
            todo.append(r)
    for spec in tqdm(todo, desc=f"{task} sweep"):
        group = spec["method"] if spec["method"] in ("muon", "adamw") else "manifold"
        doc["runs"].append(train(task, data, lr=doc["lr"][group], **spec, **kw))
        doc["environment"] = environment()
        save(path, doc, indent=1)
    checked = {(r["method"], round(float(r["delta"]), 6), int(r["seed"]), float(r["lr"]))
               for r in doc.get("lr_check", [])}
    extra = [dict(method=m, delta=d, seed=s, lr=lr) for d in lr_check for m in ("shape", "level_set")
             for lr in GRIDS["manifold"] if lr != doc["lr"]["manifold"] for s in seeds]
    extra = [e for e in extra if (e["method"], round(e["delta"], 6), e["seed"], float(e["lr"])) not in checked]
    for spec in tqdm(extra, desc=f"{task} learning-rate check"):
        doc.setdefault("lr_check", []).append(train(task, data, power=1, **spec, **kw))
        save(path, doc, indent=1)
    return doc


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m svmuon.experiments fixed-entropy", description=describe(__doc__))
    parser.add_argument("--tasks", nargs="+", default=["digits", "text"], choices=list(TASKS),
                        help="tasks (default: digits text; digits-wide is the width check, run with fewer δ)")
    parser.add_argument("--seeds", type=seed_arg, nargs="+", default=[0, 1, 2],
                        help="seeds of every point (default 0 1 2)")
    parser.add_argument("--deltas", type=float_in(0.0), nargs="+", default=list(DELTAS),
                        help="offsets δ = log k - h of the fixed-entropy arms (default: %(default)s; δ = 0 always runs)")
    parser.add_argument("--powers", type=positive_float, nargs="+", default=[1, 2],
                        help="normalisation powers r (default 1 2)")
    parser.add_argument("--square-seeds", type=nonnegative_int, default=2, help="seeds of the r != 1 runs (default 2)")
    parser.add_argument("--output-dir", type=output_folder, default=None,
                        help="folder of fixed-entropy-<task>.json (default: experiments/results of the book's "
                             "repository when run inside it, else under the working directory)")
    parser.add_argument("--smoke", action="store_true",
                        help="seconds-long check: 1 epoch of 20 steps, the first seed, δ = 0.42, no tuning; starts "
                             "afresh and replaces an earlier smoke file; needs --output-dir")
    parser.add_argument("--lr-check", type=float_in(0.0), nargs="*", default=None,
                        help="δ values, among --deltas, where both arms also run at the other rates of the grid "
                             "(default 0.42 when --deltas holds it)")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch threads (default 1: one process per core)")
    return parser


def _check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Everything that can fail, checked before hours of tuning: δ per task, --lr-check, the results files."""
    for task in args.tasks:
        sizes = TASKS[task]["sizes"]
        k = min(min(a, b) for a, b in zip(sizes[:-2], sizes[1:-1]))
        bad = [d for d in args.deltas if not 0 <= d < math.log(k)]
        if bad:
            parser.error(f"--deltas must lie in [0, log k) = [0, {math.log(k):.4g}) for task {task}, got {bad}")
    swept = {round(d, 6) for d in args.deltas}
    if args.lr_check is None:
        args.lr_check = [0.42] if 0.42 in swept and 1 in args.powers else []
    outside = [d for d in args.lr_check if round(d, 6) not in swept]
    if outside and not args.smoke:
        parser.error(f"--lr-check values must be among --deltas {args.deltas}, got {outside}")
    if args.lr_check and 1 not in args.powers and not args.smoke:
        parser.error("--lr-check runs at power r = 1, which --powers does not hold")
    if args.smoke and args.output_dir is None:
        parser.error("--smoke needs --output-dir (it must not overwrite the recorded results)")
    folder = args.output_dir or check_output(parser, default_results_dir("experiments"), "--output-dir", folder=True)
    settings = _settings(**SMOKE) if args.smoke else _settings(None, None, True, TEXT_CHARS)
    for task in args.tasks:
        try:
            previous_runs(folder / f"{NAME}-{task}.json", task, settings)
        except (OSError, results.ResultsFileError) as err:
            parser.error(str(err))
    args.folder = folder


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    _check_args(parser, args)
    torch.set_num_threads(args.threads)
    for task in args.tasks:
        path = args.folder / f"{NAME}-{task}.json"
        if args.smoke:
            doc = run_task(task, path, seeds=args.seeds[:1], deltas=(0.42,), powers=[1], square_seeds=0,
                           **SMOKE, fresh=True)
            print(task, "runs", len(doc["runs"]))
        else:
            doc = run_task(task, path, seeds=args.seeds, deltas=tuple(args.deltas), powers=args.powers,
                           square_seeds=args.square_seeds, lr_check=tuple(args.lr_check))
            print(f"{task}: {len(doc['runs'])} runs in {path}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
