"""Training with the singular-value entropy of every hidden weight matrix held fixed at a target h.

``python -m svmuon.experiments fixed-entropy [--tasks digits text] [--seeds 0 1 2] [--smoke]`` answers, by
training, the question of su2025entropy: *if the entropy of a matrix parameter must be fixed in advance, which
value is best?* Each hidden weight matrix (n_out × n_in, k = min of the two) is parametrised as

    W = U diag(σ) Vᵀ,   U ∈ St(n_out, k),  V ∈ St(n_in, k),   σ = c · p^{1/r},  p = tempered_softmax(z, h)

(book eq. eq-fixed-entropy-layer), so its normalised spectrum ``σ^r / Σσ^r`` is ``p`` and its entropy is ``h``
exactly, whatever U, V, z and c are (:mod:`svmuon.spectral.level_set`). ``U`` and ``V`` are trained by
:class:`svmuon.ManifoldMuon` on their Stiefel manifolds (``Stiefel(rank_rtol=1e-2)``: a minibatch gradient has
low rank), everything else by Adam. The arms:

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
depth check, has a third hidden matrix (256×256). Learning rates are picked per
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
import hashlib
import json
import math
import os
import platform
import sysconfig
import time
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm  # plain: tqdm.auto warns on stderr in a notebook without ipywidgets (a chapter imports this)

from svmuon._cli import describe
from svmuon.experiments._loop import train_epoch
from svmuon.spectral.layers import FixedEntropyLinear  # noqa: F401 (re-exported: fe.FixedEntropyLinear)

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
GRIDS = {"manifold": [0.001, 0.002, 0.005, 0.01], "muon": [3e-4, 1e-3, 3e-3, 1e-2], "adamw": [3e-4, 1e-3, 3e-3, 1e-2]}
OTHER_LR = 3e-3  # Adam on z, the scale, the biases, the output layer and the embedding in the constrained arms
TEXT_CHARS = 400_000


# ---------------------------------------------------------------------------------------------- data

def text_corpus(chars: int = TEXT_CHARS, *, recursive: bool = False) -> tuple[np.ndarray, dict[str, Any]]:
    """The first ``chars`` characters of the standard library's top-level ``*.py`` files (sorted by name; with
    ``recursive``, every ``*.py`` below the standard library's folder, sorted by relative path, without
    ``site-packages``) as tokens: ``'\\n'`` -> 0, ``' '``..``'~'`` -> 1..95, anything else -> 96. Returns
    ``(tokens, description)``; the description names every file used (``names``, relative paths) and the
    SHA-256 of the text, so that a run can be matched to its data exactly."""
    folder = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(folder.rglob("*.py")) if recursive else sorted(folder.glob("*.py"))
    files = [f for f in files if not {"site-packages", "__pycache__"} & set(f.relative_to(folder).parts)]
    parts, total, used = [], 0, []
    for f in files:
        text = f.read_text(encoding="utf-8", errors="replace")
        parts.append(text)
        used.append(f.relative_to(folder).as_posix())
        total += len(text)
        if total >= chars:
            break
    joined = "".join(parts)[:chars]
    codes = np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
    tokens = np.where(codes == 10, 0, np.where((codes >= 32) & (codes <= 126), codes - 31, 96))
    info = {"source": str(folder), "files": len(used), "first": used[0], "last": used[-1], "chars": int(len(tokens)),
            "python": platform.python_version(), "unknown_fraction": float((tokens == 96).mean()),
            "names": used, "sha256": hashlib.sha256(joined.encode("utf-8")).hexdigest()}
    return tokens, info


def load_task(task: str, chars: int = TEXT_CHARS) -> dict[str, Any]:
    """``{"train"|"val"|"test": (X, y), "info": ...}``; text: contiguous 80/10/10 split of the corpus, X the
    ``(N, context)`` windows of every position (val/test: 8000 evenly spaced ones)."""
    if task.startswith("digits"):
        from svmuon.experiments.digits_training import load_data

        data = load_data()
        data["info"] = {"source": "sklearn.datasets.load_digits", "train": len(data["train"][1])}
        return data
    tokens, info = text_corpus(chars)
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


# --------------------------------------------------------------------------------------------- model

class Net(torch.nn.Module):
    """MLP ``sizes[0] -> sizes[1] -> ... -> sizes[-1]`` (ReLU after each hidden layer); the hidden matrices (all
    but the output layer) plain ``Linear`` (``arm=None``) or :class:`FixedEntropyLinear`; ``embed``: an
    embedding of ``context`` tokens in front."""

    def __init__(self, sizes: tuple[int, ...], seed: int, arm: str | None = None, delta: float = 0.0,
                 power: float = 1, context: int = 0, embed: int = 0, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)
        pairs = list(zip(sizes[:-2], sizes[1:-1]))  # (n_in, n_out) of each hidden matrix
        self.embedding = torch.nn.Embedding(97, embed, dtype=dtype) if embed else None
        if arm is None:
            self.hidden = torch.nn.ModuleList([torch.nn.Linear(a, b, dtype=dtype) for a, b in pairs])
        else:
            learn = arm == "level_set"
            self.hidden = torch.nn.ModuleList([FixedEntropyLinear(a, b, delta, power, learn, gen, dtype)
                                               for a, b in pairs])
        self.out = torch.nn.Linear(sizes[-2], sizes[-1], dtype=dtype)

    def weights(self) -> list[torch.Tensor]:
        return [m.weight() if isinstance(m, FixedEntropyLinear) else m.weight for m in self.hidden]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embedding is not None:
            x = self.embedding(x).flatten(1)
        for layer in self.hidden:
            x = torch.relu(layer(x))
        return self.out(x)


def make_optimizers(net: Net, method: str, lr: float) -> list[torch.optim.Optimizer]:
    """The optimizers of one arm: ManifoldMuon on U, V + Adam (constrained arms), Muon + AdamW, or AdamW."""
    if method == "adamw":
        return [torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=0.01)]
    hidden = [m.weight for m in net.hidden] if method == "muon" else [p for m in net.hidden for p in (m.U, m.V)]
    ids = {id(p) for p in hidden}
    rest = [p for p in net.parameters() if id(p) not in ids]
    if method == "muon":
        from svmuon.optim.muon import Muon

        return [Muon(hidden, lr=lr, weight_decay=0.01, momentum=0.95, adjust_lr_fn="match_rms_adamw",
                     compute_dtype=torch.float32), torch.optim.AdamW(rest, lr=OTHER_LR, weight_decay=0.01)]
    from svmuon.optim.manifold_muon import ManifoldMuon
    from svmuon.orthogonal.stiefel import Stiefel

    return [ManifoldMuon(hidden, lr=lr, momentum=0.9, manifold=Stiefel(rank_rtol=1e-2)),
            torch.optim.Adam(rest, lr=OTHER_LR)]


# ------------------------------------------------------------------------------------------ training

def _evaluate(net: Net, X: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    with torch.no_grad():
        logits = net(X)
        return float(torch.nn.functional.cross_entropy(logits, y)), float((logits.argmax(1) == y).float().mean())


def layer_entropies(net: Net, power: float) -> list[float]:
    """Singular-value entropy (nats, normalisation power ``power``) of each hidden matrix, from its SVD."""
    from svmuon.spectral.entropy import singular_value_entropy

    with torch.no_grad():
        return [float(singular_value_entropy(W.detach().double(), power=power)) for W in net.weights()]


def train(task: str, data: dict[str, Any], method: str, lr: float, seed: int, *, delta: float = 0.0,
          power: float = 1, epochs: int | None = None, steps_per_epoch: int | None = None,
          dtype: torch.dtype = torch.float32, progress: bool = False) -> dict[str, Any]:
    """One run; ``method`` is an arm (``shape``, ``level_set``, ``orthogonal``) or a baseline."""
    cfg = TASKS[task]
    epochs = cfg["epochs"] if epochs is None else epochs
    arm = {"shape": "shape", "level_set": "level_set", "orthogonal": "shape"}.get(method)
    net = Net(cfg["sizes"], seed, arm, delta if method != "orthogonal" else 0.0, power,
              context=cfg.get("context", 0), embed=cfg.get("embed", 0), dtype=dtype)
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
                      "val_loss": _evaluate(net, Xv, data["val"][1])[0]})
        if arm:
            H = layer_entropies(net, power)
            worst_gap = max(worst_gap, max(abs(x - m.h) for x, m in zip(H, net.hidden)))
            worst_defect = max(worst_defect, max(_defect(m) for m in net.hidden))
    test_loss, test_acc = _evaluate(net, Xt, data["test"][1])
    val_loss, val_acc = _evaluate(net, Xv, data["val"][1])
    out = {"task": task, "method": method, "delta": 0.0 if method == "orthogonal" else delta, "power": power,
           "seed": seed, "lr": lr, "test_loss": test_loss, "test_acc": test_acc, "val_loss": val_loss,
           "val_acc": val_acc, "curve": curve, "seconds": time.perf_counter() - t0,
           "entropy_p1": layer_entropies(net, 1), "entropy_p2": layer_entropies(net, 2),
           "k": [min(m.weight().shape) if arm else min(m.weight.shape) for m in net.hidden]}
    if arm:
        out |= {"max_entropy_error": worst_gap, "max_stiefel_defect": worst_defect,
                "scale": [float(m.log_scale.detach().exp()) for m in net.hidden]}
    return out


def _defect(m: FixedEntropyLinear) -> float:
    """The larger Stiefel defect ``‖QᵀQ - I‖_max`` of the layer's ``U`` and ``V``."""
    from svmuon.orthogonal.stiefel import Stiefel

    return max(float(Stiefel().defect(Q.detach())) for Q in (m.U, m.V))


# ----------------------------------------------------------------------------------------------- plan

def plan(seeds: list[int], deltas: tuple[float, ...], powers: list[float], square_seeds: int) -> list[dict[str, Any]]:
    """Every run of one task after tuning: (method, δ, r, seed)."""
    runs = [dict(method=m, delta=0.0, power=1, seed=s) for m in ("orthogonal", "muon", "adamw") for s in seeds]
    for r in powers:
        for d in deltas:
            for m in ("shape", "level_set"):
                for s in (seeds if r == 1 else seeds[:square_seeds]):
                    runs.append(dict(method=m, delta=d, power=r, seed=s))
    return runs


def _key(r: dict[str, Any]) -> tuple:
    return (r["method"], round(float(r["delta"]), 6), float(r["power"]), int(r["seed"]))


def _environment() -> dict[str, Any]:
    import svmuon

    return {"date": date.today().isoformat(), "machine": platform.machine(), "processor": platform.processor(),
            "cpu_count": os.cpu_count(), "threads": torch.get_num_threads(), "python": platform.python_version(),
            "torch": torch.__version__, "numpy": np.__version__, "svmuon": svmuon.__version__}


def _save(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(doc, indent=1) + "\n")
        f.flush()
        os.fsync(f.fileno())  # the data reaches the disk before the rename: a crash leaves the old or new file
    tmp.replace(path)  # atomic: an interrupted run never leaves a half-written file


def _check_resumable(path: Path, doc: dict[str, Any], fresh: dict[str, Any]) -> None:
    """Refuse to resume a results file written by another experiment, task or configuration: its finished
    runs (keyed by method, δ, r, seed only) and its tuned learning rates would be mixed silently with the new
    ones (e.g. a 1-epoch ``--smoke`` file taken as finished full runs). Files from before the ``settings``
    record hold full runs with the default settings."""
    if doc is fresh:
        return
    same = lambda a, b: json.loads(json.dumps(a)) == json.loads(json.dumps(b))  # noqa: E731 (tuples vs lists)
    recorded = doc.get("settings", {"epochs": None, "steps_per_epoch": None, "tune": True, "chars": TEXT_CHARS})
    for field in ("experiment", "task", "config", "grids", "other_lr"):
        if not same(doc.get(field), fresh[field]):
            raise ValueError(f"{path} holds {field} = {doc.get(field)!r}, not {fresh[field]!r}: it is not a resumable "
                             f"result of this run; choose another --output-dir or move the file away")
    if not same(recorded, fresh["settings"]):
        raise ValueError(f"{path} was written with settings {recorded!r}, this run uses {fresh['settings']!r} "
                         f"(a --smoke file and a full sweep cannot share a file); choose another --output-dir")
    doc.setdefault("settings", fresh["settings"])


def run_task(task: str, path: Path, *, seeds: list[int], deltas: tuple[float, ...], powers: list[float],
             square_seeds: int, epochs: int | None = None, steps_per_epoch: int | None = None, tune: bool = True,
             chars: int = TEXT_CHARS, lr_check: tuple[float, ...] = ()) -> dict[str, Any]:
    """Tune (seed 0), then run the plan for one task, saving after every run; finished runs are skipped.

    ``lr_check``: offsets δ at which both fixed-entropy arms (r = 1) also run at every other rate of the
    manifold grid, all seeds (``doc["lr_check"]``): the rate was tuned at δ = 0, and this shows whether a
    point loses only for want of its own rate."""
    data = load_task(task, chars)
    settings = {"epochs": epochs, "steps_per_epoch": steps_per_epoch, "tune": tune, "chars": chars}
    fresh = {"experiment": NAME, "task": task, "config": TASKS[task], "grids": GRIDS, "other_lr": OTHER_LR,
             "settings": settings, "data": data["info"], "tuning": [], "runs": []}
    doc = json.loads(path.read_text()) if path.exists() else fresh
    _check_resumable(path, doc, fresh)
    doc["environment"] = _environment()
    kw = dict(epochs=epochs, steps_per_epoch=steps_per_epoch)
    if "lr" not in doc:
        lrs = {}
        for group, methods in (("manifold", ["orthogonal"]), ("muon", ["muon"]), ("adamw", ["adamw"])):
            grid = GRIDS[group] if tune else GRIDS[group][1:2]
            for lr in tqdm(grid, desc=f"{task} tuning {group}", leave=False):
                r = train(task, data, methods[0], lr, 0, **kw)
                doc["tuning"].append({k: r[k] for k in ("method", "lr", "val_loss", "val_acc", "seconds")})
            best = min((t for t in doc["tuning"] if t["method"] == methods[0]),  # a diverged (NaN) run never wins
                       key=lambda t: (math.isnan(t["val_loss"]), t["val_loss"]))
            lrs[group] = best["lr"]
        doc["lr"] = lrs
        _save(path, doc)
    done = {_key(r) for r in doc["runs"]}
    todo = []
    for r in plan(seeds, deltas, powers, square_seeds):  # repeated --seeds/--deltas/--powers: each point once
        if _key(r) not in done:
            done.add(_key(r))
            todo.append(r)
    for spec in tqdm(todo, desc=f"{task} sweep"):
        group = spec["method"] if spec["method"] in ("muon", "adamw") else "manifold"
        doc["runs"].append(train(task, data, lr=doc["lr"][group], **spec, **kw))
        doc["environment"] = _environment()
        _save(path, doc)
    checked = {(r["method"], round(float(r["delta"]), 6), int(r["seed"]), float(r["lr"]))
               for r in doc.get("lr_check", [])}
    extra = [dict(method=m, delta=d, seed=s, lr=lr) for d in lr_check for m in ("shape", "level_set")
             for lr in GRIDS["manifold"] if lr != doc["lr"]["manifold"] for s in seeds]
    extra = [e for e in extra if (e["method"], round(e["delta"], 6), e["seed"], float(e["lr"])) not in checked]
    for spec in tqdm(extra, desc=f"{task} learning-rate check"):
        doc.setdefault("lr_check", []).append(train(task, data, power=1, **spec, **kw))
        _save(path, doc)
    return doc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m svmuon.experiments fixed-entropy", description=describe(__doc__))
    parser.add_argument("--tasks", nargs="+", default=["digits", "text"], choices=list(TASKS),
                        help="tasks (default: digits text; digits-wide is the width check, run with fewer δ)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds of every point (default 0 1 2)")
    parser.add_argument("--deltas", type=float, nargs="+", default=list(DELTAS),
                        help="offsets δ = log k - h of the fixed-entropy arms (default: %(default)s; δ = 0 always runs)")
    parser.add_argument("--powers", type=float, nargs="+", default=[1, 2], help="normalisation powers r (default 1 2)")
    parser.add_argument("--square-seeds", type=int, default=2, help="seeds of the r != 1 runs (default 2)")
    parser.add_argument("--output-dir", type=Path, default=None,
                        help="folder of fixed-entropy-<task>.json (default experiments/results)")
    parser.add_argument("--smoke", action="store_true",
                        help="seconds-long check: 1 epoch of 20 steps, one seed, δ = 0.42, no tuning; writes to "
                             "--output-dir (required with --smoke)")
    parser.add_argument("--lr-check", type=float, nargs="*", default=[0.42],
                        help="δ values where both arms also run at the other rates of the grid (default 0.42)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1: one process per core)")
    args = parser.parse_args(argv)
    for task in args.tasks:  # fail before hours of tuning, not at the first run of a bad δ
        sizes = TASKS[task]["sizes"]
        k = min(min(a, b) for a, b in zip(sizes[:-2], sizes[1:-1]))
        bad = [d for d in args.deltas if not 0 <= d < math.log(k)]
        if bad:
            parser.error(f"--deltas must lie in [0, log k) = [0, {math.log(k):.4g}) for task {task}, got {bad}")
    torch.set_num_threads(args.threads)
    if args.smoke:
        if args.output_dir is None:
            parser.error("--smoke needs --output-dir (it must not overwrite the recorded results)")
        for task in args.tasks:
            doc = run_task(task, args.output_dir / f"{NAME}-{task}.json", seeds=args.seeds[:1], deltas=(0.42,),
                           powers=[1], square_seeds=0, epochs=1, steps_per_epoch=20, tune=False, chars=20_000)
            print(task, "runs", len(doc["runs"]))
        return 0
    from svmuon._paths import results_dir

    folder = args.output_dir or results_dir("experiments")
    for task in args.tasks:
        doc = run_task(task, folder / f"{NAME}-{task}.json", seeds=args.seeds, deltas=tuple(args.deltas),
                       powers=args.powers, square_seeds=args.square_seeds, lr_check=tuple(args.lr_check))
        print(f"{task}: {len(doc['runs'])} runs in {folder / f'{NAME}-{task}.json'}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
