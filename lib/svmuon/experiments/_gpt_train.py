"""Data, optimizer arms and one training run of the ``gpt`` experiment (:mod:`svmuon.experiments.gpt`)."""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from tqdm import tqdm  # plain tqdm: tqdm.auto warns in a notebook without ipywidgets

from svmuon.experiments._gpt_model import ATTENTION, GPT, KINDS, MLP, GPTConfig, kind_of, plain_linear
from svmuon.experiments.fixed_entropy_model import FixedEntropyLinear

ARMS = ("adamw", "muon", "stiefel", "stiefel-attention", "fixed-entropy", "fixed-entropy-unit")
#: the fixed-entropy arms and the initial scale of their layers: ``plain``, the Frobenius norm of the plain
#: Gaussian layer it replaces (``‖W‖_F² = std² n_in n_out``); ``unit``, that of a Stiefel matrix (``‖W‖_F² = k``:
#: every singular value 1 at δ = 0, where the Stiefel arm starts)
FIXED_ARMS = {"fixed-entropy": "plain", "fixed-entropy-unit": "unit"}
SCOPES = {"all": KINDS, "attention": ATTENTION, "mlp": MLP}  # which hidden matrices a fixed-entropy run fixes
OTHER_LR = 3e-3  # AdamW on the embeddings and gains (and z, scale) in every arm but plain AdamW
WEIGHT_DECAY = 0.1  # decoupled, on >= 2-D tensors (matrices, embeddings) for AdamW and Muon; none on manifolds
BETAS = (0.9, 0.95)
MOMENTUM = 0.95  # Muon and ManifoldMuon (Nesterov)


@dataclass(frozen=True)
class Size:
    """One configuration of the experiment: model, batch, steps, evaluation and corpus."""

    model: GPTConfig
    batch: int
    steps: int
    warmup: int
    eval_every: int
    monitor_every: int
    val_windows: int  # validation windows of the learning curve (each predicts `context` tokens)
    final_windows: int  # windows of the final validation and test losses
    chars: int
    recursive: bool = False  # the whole standard library (GPU size), not its top-level modules only
    device: str = "cpu"
    amp: bool = False  # bf16 autocast of the forward pass (CUDA size)

    def record(self) -> dict[str, Any]:
        return asdict(self)


SIZES = {
    # chosen by measurement (the chapter's table): ~0.2 s a step single-threaded on a quiet core
    "cpu": Size(GPTConfig(context=64, d_model=128, n_layer=3, n_head=4), batch=32, steps=1000, warmup=50,
                eval_every=50, monitor_every=50, val_windows=128, final_windows=1024, chars=2_500_000),
    # the prepared GPU comparison: GPT-2-like shapes, the whole standard library, bf16 autocast
    "gpu": Size(GPTConfig(context=256, d_model=384, n_layer=6, n_head=6), batch=64, steps=5000, warmup=250,
                eval_every=250, monitor_every=250, val_windows=256, final_windows=2048, chars=30_000_000,
                recursive=True, device="cuda", amp=True),
    # every code path in seconds
    "smoke": Size(GPTConfig(context=16, d_model=16, n_layer=1, n_head=2), batch=4, steps=6, warmup=2,
                  eval_every=3, monitor_every=3, val_windows=4, final_windows=8, chars=20_000),
}


# ---------------------------------------------------------------------------------------------- data

def load_data(size: Size) -> dict[str, Any]:
    """The corpus as ``{"train"|"val"|"test": 1-D token tensors, "info": description}``: a contiguous
    80/10/10 split of :func:`svmuon.experiments.fixed_entropy.text_corpus` (97 symbols)."""
    from svmuon.experiments.runs import text_corpus

    tokens, info = text_corpus(size.chars, recursive=size.recursive)
    t = torch.from_numpy(tokens)
    n = len(t)
    cuts = {"train": (0, int(0.8 * n)), "val": (int(0.8 * n), int(0.9 * n)), "test": (int(0.9 * n), n)}
    info = dict(info, vocab=97, vocabulary="'\\n' -> 0, ' '..'~' -> 1..95, anything else -> 96",
                split={k: [a, b] for k, (a, b) in cuts.items()})
    return {"info": info, **{k: t[a:b] for k, (a, b) in cuts.items()}}


def windows(tokens: torch.Tensor, count: int, context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` evenly spaced windows ``(X, Y)`` of shape ``(count, context)``, ``Y`` shifted by one."""
    starts = torch.linspace(0, len(tokens) - context - 2, count).long()
    idx = starts[:, None] + torch.arange(context + 1)
    w = tokens[idx]
    return w[:, :-1], w[:, 1:]


def random_batch(tokens: torch.Tensor, batch: int, context: int, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    starts = torch.randint(0, len(tokens) - context - 1, (batch,), generator=gen)
    w = tokens[starts[:, None] + torch.arange(context + 1)]
    return w[:, :-1], w[:, 1:]


# ------------------------------------------------------------------------------------------ the arms

def _adamw(params: list[torch.Tensor], lr: float) -> torch.optim.Optimizer:
    decay = [p for p in params if p.ndim >= 2]
    rest = [p for p in params if p.ndim < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": rest, "weight_decay": 0.0}],
                             lr=lr, betas=BETAS)


def _muon(params: list[torch.Tensor], lr: float) -> torch.optim.Optimizer:
    from svmuon.optim.muon import Muon

    return Muon(params, lr=lr, weight_decay=WEIGHT_DECAY, momentum=MOMENTUM, nesterov=True,
                adjust_lr_fn="match_rms_adamw")


def _stiefel(params: list[torch.Tensor], lr: float) -> torch.optim.Optimizer:
    from svmuon.optim.manifold_muon import ManifoldMuon
    from svmuon.orthogonal.stiefel import Stiefel

    return ManifoldMuon(params, lr=lr, momentum=MOMENTUM, manifold=Stiefel())


class _DenseFixedEntropyLinear(FixedEntropyLinear):
    """The fixed-entropy layer applied as ``x Wᵀ``, ``W = U diag(σ) Vᵀ`` formed once per call (with
    ``B·T = 2048`` rows a batch, one product with W is cheaper than the parent's two thin ones), with σ
    taken from :func:`_batched_spectra` during a forward pass of the model."""

    cached_sigma: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sigma = self.sigma() if self.cached_sigma is None else self.cached_sigma
        return F.linear(x, (self.U * sigma) @ self.V.T)


def _batched_spectra(model: torch.nn.Module, *_: Any) -> None:
    """Forward pre-hook: the spectra of all fixed-entropy layers of one size k in one tempered-softmax call
    (its 40 fixed Newton steps cost the same for one row or many), the same values as each ``sigma()``."""
    from svmuon.spectral.level_set import _tempered_softmax

    groups: dict[tuple[int, float], list[_DenseFixedEntropyLinear]] = {}
    for m in model.modules():
        if isinstance(m, _DenseFixedEntropyLinear):
            groups.setdefault((m.k, m.power), []).append(m)
    for (_, r), layers in groups.items():
        z = torch.stack([m.z.to(torch.float64) for m in layers])
        p = _tempered_softmax(z, torch.stack([m.h_t for m in layers]))
        for m, row in zip(layers, p):
            m.cached_sigma = m.log_scale.exp() * row.to(m.U.dtype) ** (1.0 / r)


def _clear_spectra(model: torch.nn.Module, *_: Any) -> None:
    for m in model.modules():
        if isinstance(m, _DenseFixedEntropyLinear):
            m.cached_sigma = None


def build(arm: str, cfg: GPTConfig, seed: int, lr: float, *, delta: float = 0.0, scope: str = "all",
          muon_lr: float | None = None) -> tuple[GPT, dict[str, torch.optim.Optimizer]]:
    """The model of one run and its optimizers by role (``hidden``, ``mlp``, ``rest``), on the CPU.

    ``lr`` is the arm's tuned rate: AdamW's (everything), Muon's (hidden matrices), ManifoldMuon's (the Stiefel
    matrices, or the U and V factors of the fixed-entropy layers). ``muon_lr``: Muon's tuned rate, for the
    hidden matrices that ``stiefel-attention`` and a partial fixed-entropy scope train with Muon."""
    from svmuon.orthogonal.stiefel import Stiefel

    fixed = set(SCOPES[scope]) if arm in FIXED_ARMS else set()
    gen = torch.Generator().manual_seed(seed + 2000)

    def make_linear(n_in: int, n_out: int, kind: str, std: float) -> torch.nn.Module:
        if kind in fixed:  # entropy log k - δ (p ∝ σ), learned spectrum, the initial scale of FIXED_ARMS
            gain = std**2 * n_in if FIXED_ARMS[arm] == "plain" else min(n_in, n_out) / n_out
            return _DenseFixedEntropyLinear(n_in, n_out, delta, 1, True, gen, bias=False, gain=gain)
        return plain_linear(n_in, n_out, kind, std)

    model = GPT(cfg, seed, make_linear)
    if fixed:
        model.register_forward_pre_hook(_batched_spectra)
        model.register_forward_hook(_clear_spectra)
    hidden = model.hidden()
    on_stiefel = {"stiefel": KINDS, "stiefel-attention": ATTENTION}.get(arm, ())
    with torch.no_grad():
        for name, layer in hidden.items():
            if kind_of(name) in on_stiefel:  # start on the manifold: the polar factor of the Gaussian init
                layer.weight.copy_(Stiefel().project(layer.weight))
    if arm == "adamw":
        return model, {"rest": _adamw(list(model.parameters()), lr)}
    if arm == "muon":
        mats = [layer.weight for layer in hidden.values()]
        groups = {"hidden": _muon(mats, lr)}
    elif arm in ("stiefel", "stiefel-attention"):
        mats = [hidden[n].weight for n in hidden if kind_of(n) in on_stiefel]
        groups = {"hidden": _stiefel(mats, lr)}
        others = [hidden[n].weight for n in hidden if kind_of(n) not in on_stiefel]
        if others:
            groups["mlp"] = _muon(others, _need(muon_lr, arm))
            mats = mats + others
    elif arm in FIXED_ARMS:
        mats = [p for n, m in hidden.items() if kind_of(n) in fixed for p in (m.U, m.V)]
        groups = {"hidden": _stiefel(mats, lr)}
        others = [m.weight for n, m in hidden.items() if kind_of(n) not in fixed]
        if others:
            groups["mlp"] = _muon(others, _need(muon_lr, f"fixed-entropy with scope {scope!r}"))
            mats = mats + others
    else:
        raise ValueError(f"arm must be one of {ARMS}, got {arm!r}")
    ids = {id(p) for p in mats}
    groups["rest"] = _adamw([p for p in model.parameters() if id(p) not in ids], OTHER_LR)
    return model, groups


def _need(muon_lr: float | None, what: str) -> float:
    if muon_lr is None:
        raise ValueError(f"{what} trains some hidden matrices with Muon and needs Muon's tuned rate (muon_lr)")
    return muon_lr


# -------------------------------------------------------------------------------------------- a run

def lr_factor(step: int, size: Size) -> float:
    """Linear warm-up over ``warmup`` steps, then a cosine from 1 down to 0.1 at the last step."""
    warm = min(1.0, (step + 1) / size.warmup)
    return warm * (0.1 + 0.45 * (1 + math.cos(math.pi * step / max(1, size.steps - 1))))


def _loss(model: GPT, X: torch.Tensor, Y: torch.Tensor, amp: bool) -> torch.Tensor:
    with torch.autocast(X.device.type, dtype=torch.bfloat16, enabled=amp):
        logits = model(X)
    return F.cross_entropy(logits.float().flatten(0, 1), Y.flatten())


def evaluate(model: GPT, X: torch.Tensor, Y: torch.Tensor, amp: bool, chunk: int = 64) -> float:
    """Mean next-token cross-entropy (nats) over the windows ``X, Y``."""
    model.eval()
    with torch.no_grad():
        total = sum(float(_loss(model, x, y, amp)) * len(x) for x, y in zip(X.split(chunk), Y.split(chunk)))
    model.train()
    return total / len(X)


class _Clock:
    """Wall time of named sections; on CUDA each section is bracketed by a synchronisation."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.seconds: dict[str, float] = {}

    def __call__(self, name: str, fn: Any) -> Any:
        if self.cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn()
        if self.cuda:
            torch.cuda.synchronize()
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0
        return out


def _step(model: GPT, opts: dict[str, torch.optim.Optimizer], base: dict[str, list], X: torch.Tensor,
          Y: torch.Tensor, factor: float, amp: bool, clock: _Clock) -> tuple[torch.Tensor, bool]:
    """One training step at ``factor`` times the base rates: ``(loss, diverged)``, each optimizer timed alone."""
    from svmuon.optim.plan import NonFiniteUpdateError

    for role, o in opts.items():
        for g, b in zip(o.param_groups, base[role]):
            g["lr"] = b * factor
        o.zero_grad(set_to_none=True)

    def forward_backward() -> torch.Tensor:
        loss = _loss(model, X, Y, amp)
        loss.backward()
        return loss.detach()

    loss = clock("forward_backward", forward_backward)
    try:
        for role, o in opts.items():
            clock(f"optimizer_{role}", o.step)
    except NonFiniteUpdateError:  # nothing was written; the run stops here as diverged
        return loss, True
    return loss, False


def train(arm: str, data: dict[str, Any], size: Size, lr: float, seed: int, *, delta: float = 0.0,
          scope: str = "all", muon_lr: float | None = None, progress: bool = False) -> dict[str, Any]:
    """One run: ``size.steps`` AdamW/Muon/ManifoldMuon steps; the learning curve against steps and training
    seconds, the time of the forward-backward pass and of each optimizer, the monitored entropies, the final
    validation and test losses (``None`` for a run that diverged)."""
    from svmuon.spectral.monitor import EntropyMonitor

    device = torch.device(size.device)
    model, opts = build(arm, size.model, seed, lr, delta=delta, scope=scope, muon_lr=muon_lr)
    model.to(device)  # in place: the optimizers hold the same parameter objects
    base = {role: [g["lr"] for g in o.param_groups] for role, o in opts.items()}
    T = size.model.context
    Xv, Yv = (t.to(device) for t in windows(data["val"], size.val_windows, T))
    monitor = EntropyMonitor(model.matrices(), every=size.monitor_every)
    gen = torch.Generator().manual_seed(seed + 1000)  # the same batches for every arm at a seed
    clock, curve, run_loss = _Clock(device), [], []
    monitor.record(0)
    curve.append({"step": 0, "time_s": 0.0, "val_loss": evaluate(model, Xv, Yv, size.amp), "train_loss": None})
    label = f"{arm} lr={lr:g} s={seed}" + (f" δ={delta:g} {scope}" if arm in FIXED_ARMS else "")
    for step in tqdm(range(size.steps), desc=label, leave=False, disable=not progress):
        X, Y = (t.to(device) for t in random_batch(data["train"], size.batch, T, gen))
        loss, diverged = _step(model, opts, base, X, Y, lr_factor(step, size), size.amp, clock)
        run_loss.append(loss)
        done = step + 1
        if not monitor.step(done) and done == size.steps:
            monitor.record(done)  # the end of the run, off the every-k grid
        if diverged or done % size.eval_every == 0 or done == size.steps:
            train_loss = float(torch.stack(run_loss).mean())
            run_loss = []
            diverged = diverged or not math.isfinite(train_loss)
            val = None if diverged else evaluate(model, Xv, Yv, size.amp)
            diverged = diverged or not math.isfinite(val)
            curve.append({"step": done, "time_s": sum(clock.seconds.values()), "val_loss": val,
                          "train_loss": train_loss if math.isfinite(train_loss) else None})
            if diverged:
                break
    return _summary(model, opts, data, size, clock, curve, monitor, diverged, arm=arm, lr=lr, seed=seed,
                    delta=delta, scope=scope, muon_lr=muon_lr)


def _summary(model: GPT, opts: dict, data: dict, size: Size, clock: _Clock, curve: list, monitor: Any,
             diverged: bool, **spec: Any) -> dict[str, Any]:
    device = next(model.parameters()).device
    out: dict[str, Any] = dict(spec, steps=curve[-1]["step"], diverged=diverged, curve=_columns(curve))
    if not diverged:
        for split in ("val", "test"):
            X, Y = (t.to(device) for t in windows(data[split], size.final_windows, size.model.context))
            out[f"{split}_loss"] = evaluate(model, X, Y, size.amp)
    else:
        out["val_loss"] = out["test_loss"] = None
    train_s = sum(clock.seconds.values())
    opt_s = sum(v for k, v in clock.seconds.items() if k.startswith("optimizer"))
    out["time"] = dict(clock.seconds, train_s=train_s, monitor_s=monitor.seconds,
                       optimizer_share=opt_s / train_s if train_s else None)
    frame = monitor.frame()
    keep = ["step", "name", "status"] + [c for c in frame if c.startswith("H_")]
    out["entropy"] = {c: [_round(v) for v in frame[c].tolist()] for c in keep}
    fixed = [(n, m) for n, m in model.hidden().items() if hasattr(m, "h")]
    if fixed:
        h = {n: m.h for n, m in fixed}
        rows = frame[frame["name"].isin(h)]
        out["max_entropy_error"] = float((rows["H_q1_p1"] - rows["name"].map(h)).abs().max())
    stiefel = [p for o in opts.values() if hasattr(o, "manifold") for g in o.param_groups for p in g["params"]]
    if stiefel:
        out["max_stiefel_defect"] = max(float(o.manifold.defect(p.detach()).max()) for o in opts.values()
                                        if hasattr(o, "manifold") for g in o.param_groups for p in g["params"])
    return out


def _round(v: Any) -> Any:
    if isinstance(v, float):
        return None if not math.isfinite(v) else float(f"{v:.7g}")
    return v


def _columns(rows: list[dict[str, Any]]) -> dict[str, list]:
    return {k: [_round(r[k]) for r in rows] for k in rows[0]}


def gaussian_baselines(cfg: GPTConfig, draws: int, seed: int = 0) -> dict[str, dict[str, float]]:
    """Per layer type: the large-n Gaussian value and the Monte Carlo mean (± s.e.) at the exact shape."""
    from svmuon.spectral.monitor import gaussian_baseline

    return {kind: dict(gaussian_baseline(m, n, draws=draws, seed=seed), m=m, n=n)
            for kind, (m, n) in cfg.shapes().items()}
