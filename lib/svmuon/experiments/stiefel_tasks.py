"""The real tasks of the Stiefel experiment and benchmark: a network with two rectangular orthonormal hidden
matrices, its data, and the optimizers of every method compared.

The network (:class:`StiefelMLP`)::

    h₁ = relu(W₁x + b₁),  h₂ = relu(W₂h₁ + b₂),  logits = Vh₂ + c,

``W₁`` tall (orthonormal columns) and ``W₂`` wide (orthonormal rows), both kept on their Stiefel manifolds; for
text, ``x`` is the flattened embedding of the context characters. Two tasks (:data:`TASKS`):

* ``digits``: scikit-learn's 8×8 digits (alpaydin1998digits, pedregosa2011scikit), sizes 64 → 128 → 32 → 10,
  minibatches of 64, an epoch a pass over the 1077 training images (the recorded ``stiefel-digits`` runs);
* ``text``: next-character prediction on the Python standard library's own sources (the ``fixed-entropy`` text
  task, :func:`svmuon.experiments.fixed_entropy.load_task`): 8 characters of context, embedding 8, sizes
  64 → 256 → 64 → 97, minibatches of 128 drawn with replacement, ``steps_per_epoch`` of them per epoch.

The methods (:data:`GRIDS`, learning-rate grids of the constrained pair; everything else is trained by Adam at
:data:`OTHER_LR`): ``stiefel_muon`` (``ManifoldMuon(Stiefel())``, the completion solver), ``stiefel_muon_exact``
(``Stiefel(solver="newton")``), ``stiefel_muon_rank`` (Newton with ``rank_rtol=1e-2``),
``stiefel_muon_amortized`` (su2025dual: ``Stiefel(solver="dual_ascent", max_iter=1)``, one dual step per training
step from the multiplier carried over from the previous one), ``stiefel_muon_float32`` (the completion in float32,
``Stiefel(work_dtype=torch.float32)``), all with momentum 0.9; geoopt's RiemannianSGD
(momentum 0.9) and RiemannianAdam (kochurov2020geoopt, becigneul2019riemannian); torch's orthogonal
parametrization with Adam (lezcano2019cheap); unconstrained Adam.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["TASKS", "GRIDS", "OTHER_LR", "STIEFEL_SOLVERS", "StiefelMLP", "load_task", "epoch_batches", "build",
           "constrained_weights"]

TASKS: dict[str, dict[str, Any]] = {
    "digits": dict(sizes=(64, 128, 32, 10), batch_size=64, epochs=30, steps_per_epoch=None),
    # 600 steps in 10 epochs of 60 (10 points of the loss-against-time curve): sized so that the whole
    # experiment (both tasks, every method, a grid of 3, 3 seeds) stays near 20 minutes single-threaded (the
    # exact solver on the digits is most of it; see the experiment's docstring)
    "text": dict(sizes=(64, 256, 64, 97), context=8, embed=8, batch_size=128, epochs=10, steps_per_epoch=60),
}
GRIDS = {
    "stiefel_muon": [0.02, 0.05, 0.1],
    "stiefel_muon_exact": [0.02, 0.05, 0.1],
    "stiefel_muon_rank": [0.02, 0.05, 0.1],
    "stiefel_muon_amortized": [0.02, 0.05, 0.1],
    "stiefel_muon_float32": [0.02, 0.05, 0.1],
    "geoopt_rsgd": [0.03, 0.1, 0.3],
    "geoopt_radam": [1e-3, 3e-3, 1e-2],
    "param_orthogonal": [1e-3, 3e-3, 1e-2],
    "adam": [1e-3, 3e-3, 1e-2],
}
OTHER_LR = 3e-3
#: the ``Stiefel`` options of each ``stiefel_muon*`` method
STIEFEL_SOLVERS: dict[str, dict[str, Any]] = {
    "stiefel_muon": {},
    "stiefel_muon_exact": {"solver": "newton"},
    "stiefel_muon_rank": {"solver": "newton", "rank_rtol": 1e-2},
    "stiefel_muon_amortized": {"solver": "dual_ascent", "max_iter": 1},
    "stiefel_muon_float32": {"work_dtype": torch.float32},
}
VOCABULARY = 97  # svmuon.experiments.runs.text_corpus: '\n', ' '..'~', other


def _orthonormal(rows: int, cols: int, gen: torch.Generator) -> torch.Tensor:
    """A random matrix with orthonormal columns (tall) or rows (wide).

    Drawn in float32, not with ``Stiefel().random`` (which draws in float64): the recorded
    ``stiefel-digits.json`` was trained from these points."""
    tall = rows >= cols
    Q, R = torch.linalg.qr(torch.randn(max(rows, cols), min(rows, cols), generator=gen))
    Q = Q * torch.sign(torch.diagonal(R))
    return Q if tall else Q.T.contiguous()


class StiefelMLP(torch.nn.Module):
    """``relu(W₁x + b₁) -> relu(W₂h₁ + b₂) -> Vh₂ + c`` with ``W₁`` ``h₁ × d`` (tall) and ``W₂`` ``h₂ × h₁`` (wide).

    Args:
        seed: seeds the generator of every initial value (the same draws for every method).
        sizes: ``(d, h₁, h₂, classes)`` with ``h₁ >= d`` and ``h₁ >= h₂`` (default: the digits task's).
        embed: with ``embed > 0`` the input is ``d / embed`` token ids, each embedded in ``embed`` dimensions (drawn
            after every other value, so a network without it draws exactly what it drew before).
    """

    def __init__(self, seed: int, sizes: tuple[int, ...] = TASKS["digits"]["sizes"], embed: int = 0) -> None:
        super().__init__()
        d, h1, h2, k = sizes
        if not (h1 >= d and h1 >= h2) or (embed and d % embed):
            raise ValueError(f"sizes must have h1 >= d and h1 >= h2 (and d a multiple of embed), got {sizes}, "
                             f"embed {embed}")
        gen = torch.Generator().manual_seed(seed)
        self.W1 = torch.nn.Parameter(_orthonormal(h1, d, gen))
        self.W2 = torch.nn.Parameter(_orthonormal(h2, h1, gen))
        self.b1 = torch.nn.Parameter(torch.zeros(h1))
        self.b2 = torch.nn.Parameter(torch.zeros(h2))
        self.out = torch.nn.Linear(h2, k)
        torch.nn.init.normal_(self.out.weight, std=h2**-0.5, generator=gen)
        torch.nn.init.zeros_(self.out.bias)
        self.embedding = None
        if embed:
            self.embedding = torch.nn.Embedding(VOCABULARY, embed)
            torch.nn.init.normal_(self.embedding.weight, generator=gen)

    def weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.W1, self.W2

    def rest(self) -> list[torch.Tensor]:
        """The parameters outside the constrained pair (trained by Adam in every method)."""
        extra = [] if self.embedding is None else list(self.embedding.parameters())
        return [self.b1, self.b2, *self.out.parameters(), *extra]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embedding is not None:
            x = self.embedding(x).flatten(1)
        W1, W2 = self.weights()
        h = torch.relu(x @ W1.T + self.b1)
        h = torch.relu(h @ W2.T + self.b2)
        return self.out(h)


def load_task(task: str, chars: int | None = None) -> dict[str, Any]:
    """``{"train" | "val" | "test": (X, y), "info": ...}`` of ``task`` (``digits`` or ``text``; ``chars``: the
    text corpus' length, default that of the fixed-entropy experiment)."""
    if task == "digits":
        from svmuon.experiments.runs import load_digits

        data: dict[str, Any] = load_digits()
        data["info"] = {"source": "sklearn.datasets.load_digits", "train": len(data["train"][1])}
        return data
    if task == "text":
        from svmuon.experiments.fixed_entropy import TEXT_CHARS
        from svmuon.experiments.fixed_entropy import load_task as load_fixed_entropy

        return load_fixed_entropy("text", TEXT_CHARS if chars is None else chars)
    raise ValueError(f"task must be one of {list(TASKS)}, got {task!r}")


def epoch_batches(config: dict[str, Any], n: int, gen: torch.Generator,
                  steps_per_epoch: int | None = None) -> list[torch.Tensor]:
    """The minibatches of one epoch (index tensors into the ``n`` training examples): a permutation split into
    ``batch_size`` pieces, or (``steps_per_epoch`` set, in ``config`` or given) that many batches drawn with
    replacement."""
    steps = steps_per_epoch or config.get("steps_per_epoch")
    if steps is None:
        return list(torch.randperm(n, generator=gen).split(config["batch_size"]))
    return list(torch.randint(n, (steps, config["batch_size"]), generator=gen).unbind(0))


def _parametrized(model: StiefelMLP, lr: float) -> torch.optim.Optimizer:
    """Replace the pair by torch's orthogonal parametrization (a pre-image of the same start) and return Adam on it."""
    W1, W2 = model.W1.detach().clone(), model.W2.detach().clone()
    lin1 = torch.nn.Linear(W1.shape[1], W1.shape[0], bias=False)
    lin2 = torch.nn.Linear(W2.shape[1], W2.shape[0], bias=False)
    for lin, W0 in ((lin1, W1), (lin2, W2)):
        torch.nn.utils.parametrizations.orthogonal(lin)
        with torch.no_grad():
            lin.weight = W0  # the parametrization finds a pre-image of W0
    del model.W1, model.W2
    model.lin1, model.lin2 = lin1, lin2
    model.weights = lambda: (model.lin1.weight, model.lin2.weight)  # type: ignore[method-assign]
    return torch.optim.Adam(list(lin1.parameters()) + list(lin2.parameters()), lr=lr)


def _geoopt(model: StiefelMLP, method: str, lr: float) -> torch.optim.Optimizer:
    import geoopt

    W1, W2 = model.W1.detach().clone(), model.W2.detach().clone()
    del model.W1, model.W2
    model.G1 = geoopt.ManifoldParameter(W1, manifold=geoopt.Stiefel())
    model.G2 = geoopt.ManifoldParameter(W2.T.contiguous(), manifold=geoopt.Stiefel())  # geoopt needs tall points
    model.weights = lambda: (model.G1, model.G2.T)  # type: ignore[method-assign]
    params = [model.G1, model.G2]
    if method == "geoopt_rsgd":
        return geoopt.optim.RiemannianSGD(params, lr=lr, momentum=0.9)
    return geoopt.optim.RiemannianAdam(params, lr=lr)


def build(method: str, model: StiefelMLP, lr: float) -> tuple[torch.optim.Optimizer, torch.optim.Optimizer]:
    """``(optimizer of the constrained pair, Adam on the rest)`` for ``method`` (a key of :data:`GRIDS`); the
    geoopt and parametrization methods replace the pair's parameters in ``model`` (same values)."""
    rest = torch.optim.Adam(model.rest(), lr=OTHER_LR)
    if method in STIEFEL_SOLVERS:
        from svmuon.optim.manifold_muon import ManifoldMuon
        from svmuon.orthogonal.stiefel import Stiefel

        manifold = Stiefel(**STIEFEL_SOLVERS[method])
        return ManifoldMuon([model.W1, model.W2], lr=lr, momentum=0.9, manifold=manifold), rest
    if method.startswith("geoopt"):
        return _geoopt(model, method, lr), rest
    if method == "param_orthogonal":
        return _parametrized(model, lr), rest
    if method == "adam":
        return torch.optim.Adam([model.W1, model.W2], lr=lr), rest
    raise ValueError(f"method must be one of {list(GRIDS)}, got {method!r}")


def constrained_weights(model: StiefelMLP) -> tuple[torch.Tensor, torch.Tensor]:
    """The pair ``(W₁, W₂)`` as the forward pass sees it (whatever parametrization a method put in place)."""
    return model.weights()
