"""An entropy monitor for any training loop: per-layer singular-value entropy and effective rank every k steps.

::

    monitor = EntropyMonitor(model, every=50)          # or a mapping name -> tensor / callable
    for step, batch in enumerate(loader):
        ...; optimizer.step()
        monitor.step(step)                              # records at steps 0, 50, 100, ...
    monitor.frame()                                     # pandas DataFrame, one row per (step, matrix)
    monitor.to_csv("entropy.csv"); monitor.plot()

At a recording step the matrices are grouped by (shape, dtype, device) and each group goes through **one**
batched ``torch.linalg.svdvals``, on the matrices' own device; the entropies are computed there too and the
whole record comes back to the host in one transfer (one synchronisation per device). Between recording
steps :meth:`EntropyMonitor.step` only counts: no tensor is touched, nothing waits for the device.

For a matrix ``W`` of shape ``m × n``, ``k = min(m, n)``, each recorded row holds, for every Rényi order ``q``
and normalisation power ``P`` (``p_i = σ_i^P / Σσ_j^P``, book eqs. ``eq-normalisations`` and ``eq-renyi``;
singular values at or below ``max(m, n) · eps · σ_1`` count as zeros, as in
:func:`svmuon.spectral.entropy.singular_value_entropy`), with suffix ``s = "q{q}_p{P}"`` as in
:func:`svmuon.spectral.report.spectral_report`:

* ``H_s``: the entropy in nats; ``erank_s = exp(H_s)``, the effective rank (roy2007effective);
* ``gauss_s``: the large-n value ``log k + L_q(λ)`` for a Gaussian matrix of the same aspect ratio
  ``λ = k / max(m, n)`` (book eq. ``eq-gaussian-limit``, :func:`~svmuon.spectral.random_matrix.gaussian_entropy_limit`);
* with ``baseline_draws > 0`` also ``gauss_mc_s`` and ``gauss_mc_se_s``: the mean over that many Gaussian
  matrices of exactly this shape and its standard error
  (:func:`~svmuon.spectral.random_matrix.gaussian_entropy_samples`), computed once per shape; the
  finite-shape expectation differs from the limit by O(1/k) (bai2004clt).

A matrix whose entries are not all finite, or that is zero, has no entropy: its row has NaN values and
``status`` ``"non-finite"`` or ``"zero"`` (``"ok"`` otherwise), so a diverging run is recorded, not hidden
and not interrupted.

References: su2025entropy, liu2025moonlight, roy2007effective, renyi1961measures, marchenko1967distribution.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from svmuon._validation import check_int
from svmuon.spectral.entropy import _renyi
from svmuon.spectral.report import _check_exponents, _check_values, _gaussian, _tag

__all__ = ["EntropyMonitor", "gaussian_baseline", "plot_entropy_frame"]

_Source = Callable[[], torch.Tensor]


def _as_source(name: str, value: Any) -> tuple[_Source, tuple[int, int]]:
    """``(callable returning the matrix, its 2-D shape)``; TypeError/ValueError naming the entry."""
    get = value if callable(value) and not isinstance(value, torch.Tensor) else (lambda v=value: v)
    with torch.no_grad():
        W = get()
    if not isinstance(W, torch.Tensor):
        raise TypeError(f"matrices: entry {name!r} must be a torch.Tensor or a callable returning one, "
                        f"got {type(W).__name__}")
    if not W.is_floating_point() or W.is_complex():
        raise TypeError(f"matrices: entry {name!r} must have a real floating dtype, got {W.dtype}")
    if W.ndim < 2:
        raise ValueError(f"matrices: entry {name!r} must have at least 2 dimensions (a kernel of more is read "
                         f"as (out, in·…)), got shape {tuple(W.shape)}")
    m, n = W.shape[0], math.prod(W.shape[1:])
    if min(m, n) < 2:
        raise ValueError(f"matrices: entry {name!r} of shape {tuple(W.shape)} has min(m, n) = {min(m, n)} < 2; "
                         "its entropy is always 0")
    return get, (m, n)


def _collect(matrices: Any) -> dict[str, tuple[_Source, tuple[int, int]]]:
    """Validate ``matrices`` (module, mapping or pairs) into name -> (source, shape)."""
    if isinstance(matrices, torch.nn.Module):
        items = [(n, p) for n, p in matrices.named_parameters()
                 if p.is_floating_point() and p.ndim >= 2 and min(p.shape[0], math.prod(p.shape[1:])) >= 2]
        if not items:
            raise ValueError(f"matrices: module {type(matrices).__name__} has no floating parameter with >= 2 "
                             "dimensions and min(m, n) >= 2")
    elif isinstance(matrices, Mapping):
        items = list(matrices.items())
    elif isinstance(matrices, Iterable) and not isinstance(matrices, (str, bytes, torch.Tensor)):
        items = list(matrices)
        if not all(isinstance(i, tuple) and len(i) == 2 for i in items):
            raise TypeError("matrices: an iterable must hold (name, tensor-or-callable) pairs")
    else:
        raise TypeError("matrices must be a torch.nn.Module, a mapping name -> tensor (or callable returning "
                        f"one), or an iterable of such pairs; got {type(matrices).__name__}")
    if not items:
        raise ValueError("matrices must hold at least one matrix")
    out = {}
    for name, value in items:
        if not isinstance(name, str):
            raise TypeError(f"matrices: names must be strings, got {name!r}")
        if name in out:
            raise ValueError(f"matrices: the name {name!r} appears twice")
        out[name] = _as_source(name, value)
    return out


def _entropies(W: torch.Tensor, qs: tuple[float, ...], powers: tuple[float, ...]) -> torch.Tensor:
    """``(B, 2 + len(powers)·len(qs))``: status code (0 ok, 1 zero, 2 non-finite), k, then H per (P, q).

    ``W``: ``(B, m, n)``, all in the working dtype; no host synchronisation."""
    finite = torch.isfinite(W).all(dim=(-2, -1))
    W = torch.where(finite[:, None, None], W, torch.zeros((), dtype=W.dtype, device=W.device))
    _, e = torch.frexp(W.abs().amax(dim=(-2, -1), keepdim=True))
    sigma = torch.linalg.svdvals(torch.ldexp(W, -e))  # an exact power-of-two scaling: no overflow, same p
    top = sigma[:, :1]
    zero = top[:, 0] == 0
    ratio = sigma / torch.where(top > 0, top, torch.ones_like(top))
    rtol = max(W.shape[-2:]) * torch.finfo(W.dtype).eps  # the threshold of singular_value_entropy's default
    ratio = torch.where(ratio > rtol, ratio, torch.zeros_like(ratio))
    ratio[:, 0] = 1.0  # a zero matrix gets a dummy distribution; its row is masked below
    cols = [torch.where(finite, torch.where(zero, 1.0, 0.0), 2.0).to(W.dtype)]
    cols.append(torch.full_like(cols[0], sigma.shape[-1]))
    for P in powers:
        w = ratio**P
        p = w / w.sum(dim=-1, keepdim=True)
        cols += [_renyi(p, q) for q in qs]
    return torch.stack(cols, dim=-1)


def gaussian_baseline(m: int, n: int, *, q: Any = (1, 2), power: Any = (1, 2), draws: int = 0,
                      seed: int = 0) -> dict[str, float]:
    """The random-matrix reference values of an ``m × n`` matrix, the baseline columns of :class:`EntropyMonitor`.

    Args:
        m, n: the shape (integers >= 1, min(m, n) >= 2). q, power: Rényi orders and normalisation powers, as
            in :class:`EntropyMonitor`. draws: Gaussian matrices for the Monte Carlo estimate at this exact
            shape (0: none). seed: seed of the draws (the same seed and shape give the same values).

    Returns:
        ``{"gauss_s": log k + L_q(λ)}`` for every suffix ``s = "q{q}_p{P}"``, the large-n value of book eq.
        ``eq-gaussian-limit`` (nats), and with ``draws > 0`` also ``"gauss_mc_s"``, the mean of
        ``H_q`` over ``draws`` standard Gaussian ``m × n`` matrices, and ``"gauss_mc_se_s"``, its standard
        error (NaN for one draw).

    Raises:
        TypeError, ValueError: non-integer or too small sizes, ``draws < 0``, bad ``q``/``power``.
    """
    m, n = check_int(m, "m"), check_int(n, "n")
    if min(m, n) < 2:
        raise ValueError(f"min(m, n) must be >= 2 (a matrix with one singular value has entropy 0), got {m}×{n}")
    qs, powers = _check_values(q, "q", positive=False), _check_values(power, "power", positive=True)
    _check_exponents(qs, powers)
    draws, seed = check_int(draws, "draws", minimum=0), check_int(seed, "seed", minimum=0)
    k = min(m, n)
    out = {f"gauss_q{_tag(q)}_p{_tag(P)}": math.log(k) + _gaussian(k / max(m, n), q, P) for P in powers for q in qs}
    if draws:
        from svmuon.spectral.random_matrix import gaussian_entropy_samples

        gen = torch.Generator().manual_seed(seed + 7919 * m + n)
        h = gaussian_entropy_samples(m, n, draws=draws, q=qs, power=powers, generator=gen,
                                     dtype=torch.float64)  # (len(q), len(power), draws), each H - log k
        for j, P in enumerate(powers):
            for i, q in enumerate(qs):
                s = f"q{_tag(q)}_p{_tag(P)}"
                out[f"gauss_mc_{s}"] = math.log(k) + float(h[i, j].mean())
                out[f"gauss_mc_se_{s}"] = float(h[i, j].std(ddof=1)) / math.sqrt(draws) if draws > 1 else math.nan
    return out


class EntropyMonitor:
    """Records the singular-value entropy and effective rank of a model's matrices every ``every`` steps.

    Args:
        matrices: a ``torch.nn.Module`` (every floating parameter with >= 2 dimensions and min(m, n) >= 2; a
            kernel ``(out, in, …)`` is read as ``(out, in·…)``), a mapping name -> tensor, or name -> callable
            returning the matrix (e.g. a factored layer's ``weight`` method), or an iterable of such pairs.
        every: record at the steps divisible by ``every`` (an integer >= 1).
        q: Rényi order(s) in [0, ∞) (1: Shannon; finite), default (1, 2). power: normalisation power(s) > 0, default
            (1, 2) (p ∝ σ and p ∝ σ²). Each without repeats; ``q·power <= 1000`` (the Gaussian reference).
        baseline_draws: Gaussian matrices per shape for the Monte Carlo baseline at the exact shape (0, the
            default: only the large-n limit). seed: seed of those draws.

    Raises:
        TypeError: ``matrices`` of another kind, a name that is not a string, an entry that is not a real
            floating tensor (or a callable returning one); ``every``/``baseline_draws``/``seed`` not integers;
            ``q``/``power`` not numbers.
        ValueError: no matrix, a repeated name, an entry with fewer than 2 dimensions or min(m, n) < 2,
            ``every < 1``, ``baseline_draws < 0``, ``q``/``power`` out of range or repeated.

    Device and dtype come from each matrix: the SVD runs where the matrix lives, float16/bfloat16 in float32,
    float64 in float64, else float32. See the module docstring for the columns of :meth:`frame`.
    """

    def __init__(self, matrices: Any, *, every: int = 50, q: Any = (1, 2), power: Any = (1, 2),
                 baseline_draws: int = 0, seed: int = 0) -> None:
        self.every = check_int(every, "every")
        self.qs = _check_values(q, "q", positive=False)
        self.powers = _check_values(power, "power", positive=True)
        _check_exponents(self.qs, self.powers)
        self.baseline_draws = check_int(baseline_draws, "baseline_draws", minimum=0)
        self.seed = check_int(seed, "seed", minimum=0)
        self._sources = _collect(matrices)
        self._calls = 0
        self._records: list[pd.DataFrame] = []
        self.seconds = 0.0  # wall time spent recording (host side, including the one transfer)
        self._baselines = {shape: self._baseline(*shape) for shape in {s for _, s in self._sources.values()}}

    def _suffixes(self) -> list[str]:
        return [f"q{_tag(q)}_p{_tag(P)}" for P in self.powers for q in self.qs]

    def _baseline(self, m: int, n: int) -> dict[str, float]:
        return gaussian_baseline(m, n, q=self.qs, power=self.powers, draws=self.baseline_draws, seed=self.seed)

    def step(self, step: int | None = None) -> bool:
        """Call once per training step; records when ``step`` (default: the number of earlier calls) is a
        multiple of ``every``. Returns whether it recorded. Between records it touches no tensor."""
        if step is None:
            step = self._calls
        elif isinstance(step, bool) or not isinstance(step, numbers.Integral):
            raise TypeError(f"step must be an integer >= 0 or None, got {type(step).__name__}")
        elif step < 0:
            raise ValueError(f"step must be an integer >= 0 or None, got {step}")
        self._calls += 1
        if step % self.every:
            return False
        self.record(int(step))
        return True

    def record(self, step: int) -> None:
        """Record every matrix now, labelled ``step``: one batched SVD per (shape, dtype, device)."""
        t0 = time.perf_counter()
        groups: dict[tuple, list[tuple[str, torch.Tensor]]] = {}
        with torch.no_grad():
            for name, (get, shape) in self._sources.items():
                W = get().detach()
                if W.ndim < 2 or (W.shape[0], math.prod(W.shape[1:])) != shape:
                    raise ValueError(f"matrices: entry {name!r} changed shape since the monitor was made: "
                                     f"{tuple(W.shape)}, was {shape}")
                work = W.dtype if W.dtype in (torch.float32, torch.float64) else torch.float32
                groups.setdefault((shape, work, W.device), []).append((name, W.reshape(shape).to(work)))
            results = {}
            for (shape, _, device), members in groups.items():
                values = _entropies(torch.stack([W for _, W in members]), self.qs, self.powers)
                results.setdefault(device, []).append((shape, [n for n, _ in members], values))
            rows = []
            for device, parts in results.items():  # one transfer per device
                host = torch.cat([v.to(torch.float64) for _, _, v in parts]).cpu().numpy()
                offset = 0
                for shape, names, values in parts:
                    rows += [self._row(step, name, shape, host[offset + i]) for i, name in enumerate(names)]
                    offset += len(names)
        self._records.append(pd.DataFrame(rows))
        self.seconds += time.perf_counter() - t0

    def _row(self, step: int, name: str, shape: tuple[int, int], v: np.ndarray) -> dict[str, Any]:
        status = ("ok", "zero", "non-finite")[int(v[0])]
        k = int(v[1])
        row: dict[str, Any] = {"step": step, "name": name, "m": shape[0], "n": shape[1], "k": k,
                               "log_k": math.log(k), "status": status}
        for s, h in zip(self._suffixes(), v[2:]):
            h = float(h) if status == "ok" else math.nan
            row[f"H_{s}"], row[f"erank_{s}"] = h, math.exp(h)
        row.update(self._baselines[shape])
        return row

    def frame(self) -> pd.DataFrame:
        """All records so far, one row per (step, matrix), in recording order (columns: module docstring)."""
        if not self._records:
            cols = ["step", "name", "m", "n", "k", "log_k", "status"]
            return pd.DataFrame(columns=cols + [f"{c}_{s}" for s in self._suffixes() for c in ("H", "erank")])
        return pd.concat(self._records, ignore_index=True)

    def to_csv(self, path: str | Path) -> Path:
        """Write :meth:`frame` to ``path`` (parent folders created) and return the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.frame().to_csv(path, index=False)
        return path

    def plot(self, *, q: float = 1, power: float = 1, by: Callable[[str], str] | None = None, ax: Any = None) -> Any:
        """``H - log k`` against the step, one line per matrix (or per group ``by(name)``, the group mean),
        with the Gaussian large-n value of each shape as a grey dashed line. Returns the matplotlib ``Axes``.

        Raises:
            ValueError: nothing recorded yet, or ``(q, power)`` not among the monitored pairs.
        """
        return plot_entropy_frame(self.frame(), q=q, power=power, by=by, ax=ax)


def plot_entropy_frame(df: pd.DataFrame, *, q: float = 1, power: float = 1, by: Callable[[str], str] | None = None,
                       ax: Any = None) -> Any:
    """The plot of :meth:`EntropyMonitor.plot` from a frame (e.g. one read back from its CSV)."""
    import matplotlib.pyplot as plt

    s = f"q{_tag(float(q))}_p{_tag(float(power))}"
    if df.empty:
        raise ValueError("nothing recorded yet: call step() or record() first")
    if f"H_{s}" not in df:
        raise ValueError(f"q={q!r}, power={power!r} was not monitored (no column H_{s})")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 3.6), layout="constrained")
    d = df.assign(gap=df[f"H_{s}"] - df["log_k"], ref=df[f"gauss_{s}"] - df["log_k"],
                  group=df["name"].map(by) if by is not None else df["name"])
    for label, g in d.groupby("group", sort=False):
        ax.plot(*zip(*g.groupby("step")["gap"].mean().items()), marker=".", label=str(label))
    refs: dict[float, list[str]] = {}  # one dashed line per value (m × n and n × m share one)
    for ref, m, n in d.drop_duplicates(["m", "n"])[["ref", "m", "n"]].itertuples(index=False):
        refs.setdefault(round(float(ref), 9), []).append(f"{m}×{n}")
    for ref, shapes in refs.items():
        ax.axhline(ref, color="0.4", ls="--", lw=0.8)
        ax.annotate("Gaussian " + ", ".join(shapes), (1.0, ref), xycoords=("axes fraction", "data"),
                    xytext=(-4, 3), textcoords="offset points", ha="right", fontsize=8, color="0.3")
    power_tex = "" if float(power) == 1 else f"^{{{_tag(float(power))}}}"
    ax.set_xlabel("step")
    ax.set_ylabel(f"$H_{{{_tag(float(q))}}} - \\log k$ (nats), $p\\propto\\sigma{power_tex}$")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)  # off the curves
    return ax
