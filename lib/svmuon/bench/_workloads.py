"""Gradient streams recorded from real training, regenerated on demand (nothing binary is stored).

:func:`record` trains the network of :mod:`svmuon.experiments.stiefel_tasks` for a few hundred steps, with its two
hidden matrices on their Stiefel manifolds (``ManifoldMuon(Stiefel(...))``, momentum 0.9, lr 0.05, the middle
of the ``stiefel_muon`` grid; biases, output layer and embedding by Adam at 3e-3), single thread and seeded, and
keeps

* every step's gradients of the two hidden matrices (parameter orientation), so that any optimizer can be
  replayed on the same gradients from the same start;
* at sampled steps (and the step before each, for warm starts) the problem the direction solver saw: the point
  ``W`` and the momentum update ``U`` of both matrices in the manifold's canonical (tall) orientation, stacked
  ``(2, m, n)``, and the direction ``Φ`` it returned (``Direction.step``), all float32 as in training.

Workloads (:data:`WORKLOADS`): ``digits`` (scikit-learn's digits, MLP 64 → 256 → 64 → 10, minibatches of 128, the
epochs' permutations one after the other) and ``text`` (next character on the Python standard library's sources,
8 characters of context embedded in 8 dimensions, MLP 64 → 256 → 64 → 97, minibatches of 128 drawn with
replacement): hidden matrices 256×64 (tall) and 64×256 (wide, seen as its 256×64 transpose). A stream of 270
steps takes about a second (digits) to three (text, most of it reading the corpus) with the default solver.
``text-wide``: the text task at a transformer MLP's shape, 256 → 1024 → 256 → 97 (the 8 characters embedded in 32
dimensions): hidden matrices 1024×256 and 256×1024, about 30 s a stream.

References: su2025stiefel, su2025dual, jordan2024muon, alpaydin1998digits.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

__all__ = ["WORKLOADS", "LR", "Instance", "Workload", "record", "sample_steps", "training_context"]

WORKLOADS: dict[str, dict[str, Any]] = {
    "digits": dict(task="digits", sizes=(64, 256, 64, 10), embed=0, batch_size=128, steps_per_epoch=None),
    "text": dict(task="text", sizes=(64, 256, 64, 97), embed=8, batch_size=128, steps_per_epoch=1),
    # a transformer MLP's shape: d = 256 widened 4x (hidden matrices 1024x256 and 256x1024), the same 8 characters
    # of context embedded in 32 dimensions; not among the two workloads, recorded on its own
    "text-wide": dict(task="text", sizes=(256, 1024, 256, 97), embed=32, batch_size=128, steps_per_epoch=1),
}
LR = 0.05  # the middle of the stiefel_muon grid (svmuon.experiments.stiefel_tasks.GRIDS)


@dataclass
class Instance:
    """One direction problem met in training: canonical ``(2, m, n)`` float32 tensors."""

    step: int
    W: torch.Tensor
    U: torch.Tensor
    Phi: torch.Tensor  # the direction the optimizer's solver returned
    previous: tuple[torch.Tensor, torch.Tensor] | None = None  # (W, U) of the step before


@dataclass
class Workload:
    """A recorded stream (:func:`record`)."""

    name: str
    config: dict[str, Any]
    solver: dict[str, Any]
    lr: float
    seed: int
    start: tuple[torch.Tensor, torch.Tensor]  # the hidden pair before the first step
    grads: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    instances: list[Instance] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0  # wall-clock time of the recording (data loading included)
    data: Any = field(default=None, repr=False)  # the task's data it was trained on (to record another stream)

    def describe(self) -> dict[str, Any]:
        """What the JSON records about the stream."""
        return {"task": self.config["task"], "sizes": list(self.config["sizes"]), "embed": self.config["embed"],
                "batch_size": self.config["batch_size"], "solver": self.solver, "lr": self.lr, "momentum": 0.9,
                "seed": self.seed, "steps": len(self.grads), "sampled_steps": [i.step for i in self.instances],
                "shapes": [list(g.shape) for g in self.grads[0]] if self.grads else [],
                "loss_first": self.losses[0] if self.losses else None,
                "loss_last": self.losses[-1] if self.losses else None, "record_seconds": self.seconds}


def training_context(workload: Workload) -> Callable[[int], None] | None:
    """What training runs between two optimizer steps, for the replays to run before each timed step: ``k ->`` the
    forward and backward pass of the workload's network (at its start, so at ``k = 0`` it computes the stream's
    first gradients) on the ``k``-th recorded minibatch (cycled), gradients discarded. ``None`` for a workload
    without data (the tests' synthetic streams). A step's time depends on what ran just before it (the caches), so
    every optimizer's step is timed right after the same work a training loop would have done."""
    if workload.data is None:
        return None
    from svmuon.experiments.stiefel_tasks import StiefelMLP

    config = workload.config
    X, y = workload.data["train"]
    batches = _batches(config, len(y), max(1, len(workload.grads)), torch.Generator().manual_seed(workload.seed + 1000))
    model = StiefelMLP(workload.seed, config["sizes"], config["embed"])

    def context(k: int) -> None:
        idx = batches[k % len(batches)]
        model.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(X[idx]), y[idx]).backward()

    context.model = model  # type: ignore[attr-defined]  (for the tests: its gradients are training's first ones)
    return context


def sample_steps(steps: int, samples: int) -> list[int]:
    """``samples`` steps spread evenly over a stream of ``steps`` (the last one included, none before step 1, so
    each has a previous step), without repeats."""
    if samples <= 0 or steps < 2:
        return []
    picks = [max(1, round((i + 1) * (steps - 1) / samples)) for i in range(samples)]
    return sorted(set(picks))


def _recording_stiefel(options: dict[str, Any]):
    """A :class:`~svmuon.orthogonal.stiefel.Stiefel` whose direction kernel keeps its inputs and output when asked
    (the optimizer calls it once per step for the pair: both matrices have the canonical shape 256×64)."""
    from svmuon.orthogonal.stiefel import Stiefel

    class Recording(Stiefel):
        keep = False  # set by the caller before a step whose problem it wants
        kept: tuple | None = None

        def direction(self, W, U, orthogonalize, state):  # noqa: ANN001, ANN202 (the protocol's signature)
            d = super().direction(W, U, orthogonalize, state)
            if self.keep:
                self.kept = (W.clone(), U.clone(), d.step.clone())
            return d

    return Recording(**options)


def _batches(config: dict[str, Any], n: int, steps: int, gen: torch.Generator) -> list[torch.Tensor]:
    from svmuon.experiments.stiefel_tasks import epoch_batches

    out: list[torch.Tensor] = []
    while len(out) < steps:
        out += epoch_batches(config, n, gen)
    return out[:steps]


def record(name: str, *, steps: int = 270, samples: int = 6, seed: int = 0, solver: dict[str, Any] | None = None,
           lr: float = LR, data: dict[str, Any] | None = None) -> Workload:
    """Train workload ``name`` for ``steps`` steps and keep its gradient stream and sampled instances.

    Args:
        name: a key of :data:`WORKLOADS`. steps: optimizer steps (>= 1). samples: instances kept (spread by
            :func:`sample_steps`). seed: the network's and the minibatches' seed. solver: ``Stiefel`` options of the
            training optimizer (default ``{}``: the completion). lr: its learning rate.
        data: the task's data (``svmuon.experiments.stiefel_tasks.load_task``), if already loaded.

    Returns:
        The :class:`Workload`. Deterministic: the same arguments give the same tensors, bit for bit, at a fixed
        thread count.

    Raises:
        ValueError: an unknown workload, ``steps < 1``, ``samples < 0``.
    """
    from svmuon.experiments.stiefel_tasks import OTHER_LR, StiefelMLP, load_task
    from svmuon.optim.manifold_muon import ManifoldMuon

    if name not in WORKLOADS:
        raise ValueError(f"workload must be one of {list(WORKLOADS)}, got {name!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 0:
        raise ValueError(f"samples must be an integer >= 0, got {samples!r}")
    t0 = time.perf_counter()
    config, solver = WORKLOADS[name], dict(solver or {})
    data = load_task(config["task"]) if data is None else data
    torch.manual_seed(seed)
    model = StiefelMLP(seed, config["sizes"], config["embed"])
    manifold = _recording_stiefel(solver)
    opt = ManifoldMuon([model.W1, model.W2], lr=lr, momentum=0.9, manifold=manifold)
    rest = torch.optim.Adam(model.rest(), lr=OTHER_LR)
    out = Workload(name, dict(config), solver, lr, seed, (model.W1.detach().clone(), model.W2.detach().clone()),
                   data=data)
    X, y = data["train"]
    picks = set(sample_steps(steps, samples))
    kept: dict[int, tuple] = {}
    for k, idx in enumerate(_batches(config, len(y), steps, torch.Generator().manual_seed(seed + 1000))):
        opt.zero_grad()
        rest.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(X[idx]), y[idx])
        loss.backward()
        out.grads.append((model.W1.grad.detach().clone(), model.W2.grad.detach().clone()))
        manifold.keep = k in picks or (k + 1) in picks
        opt.step()
        rest.step()
        if manifold.keep:
            kept[k] = manifold.kept
        out.losses.append(float(loss.detach()))
    for k in sorted(picks):
        W, U, Phi = kept[k]
        out.instances.append(Instance(k, W, U, Phi, kept[k - 1][:2]))
    out.seconds = time.perf_counter() - t0
    return out
