"""The atomic step: proposed new values, checked together with one host synchronisation, then written.

:mod:`svmuon.optim.functional` fills a :class:`StepPlan` with every new value of a step (out of place) and
one boolean per parameter; :meth:`StepPlan.failures` reads all of them at once, and only if none failed
does :meth:`StepPlan.commit` copy the new values into place. The two errors name the refused parameter and
say that nothing was changed.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Sequence

import torch

__all__ = ["StepPlan", "NonFiniteUpdateError", "OffManifoldError"]


class NonFiniteUpdateError(ValueError):
    """An optimizer step would write NaN or Inf into a parameter or its state; nothing was changed."""


class OffManifoldError(ValueError):
    """A parameter would be off its manifold after a step (it was changed outside the optimizer, or the step itself
    lost accuracy); nothing was changed."""


class StepPlan:
    """The proposed new values of one optimizer step, verified with one host synchronisation, then committed.

    Built by :func:`~svmuon.optim.functional.muon_updates` and
    :func:`~svmuon.optim.functional.manifold_muon_updates` (several calls may add to one plan).
    Holds ``(target, value)`` pairs to copy, one boolean tensor per batch of parameters (finite update,
    still on the manifold), and the labels that name the parameters in an error.
    """

    def __init__(self, optimizer: str = "optimizer") -> None:
        self.optimizer = optimizer
        self._writes: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._on_commit: list[Callable[[], None]] = []
        self._batches: list[dict[str, Any]] = []
        self._hypers: list[tuple[str, torch.Tensor, torch.Tensor]] = []

    def write(self, target: torch.Tensor, value: torch.Tensor) -> None:
        """Copy ``value`` into ``target`` at commit."""
        self._writes.append((target, value))

    def on_commit(self, fn: Callable[[], None]) -> None:
        """Run ``fn()`` at commit (host-side bookkeeping: step counters, new state entries)."""
        self._on_commit.append(fn)

    def add_batch(self, labels: Sequence[Any], checked: Sequence[torch.Tensor], *,
                  on_manifold: torch.Tensor | None = None, defect: torch.Tensor | None = None,
                  tolerance: torch.Tensor | None = None,
                  defect_before: Callable[[], torch.Tensor] | None = None,
                  drift: torch.Tensor | None = None, drift_max: float | None = None,
                  drift_prev: torch.Tensor | None = None, carried_max: float | None = None) -> None:
        """Record ``k`` parameters whose new values are finite iff every tensor of ``checked`` (each
        ``(k, ...)``) is, and (on a manifold) their ``(k,)`` check with the defects and tolerances behind it
        (``(k,)`` or ``(k, b)`` for ``b`` matrices each, broadcastable; an error reports a parameter's worst matrix).

        The fast flag is the finiteness of each matrix's *sum* (one pass; NaN and ±Inf propagate through
        a sum): it can only err towards a false alarm, when a sum of finite entries overflows, and an
        alarm is re-checked entry by entry before anything is refused.

        ``drift`` (``(k,)``, uncorrected steps only): the defect the step leaves for the next one to carry; a
        parameter is refused where it exceeds ``drift_max`` (no Björck step keeps it in check, and a checkpoint
        cannot hold more: ``functional.DRIFT_MAX``); kept apart from ``on_manifold``, so that an error names the cause.
        ``drift_prev`` (``(k,)``): the drift each parameter carried into the step, refused outside
        ``[0, carried_max]`` (NaN included; a bad argument or state, named before anything it caused).
        """
        sums = [T.sum(dim=tuple(range(1, T.ndim))) for T in checked]
        if len({T.dtype for T in sums}) == 1:  # one isfinite for all of them
            fast = torch.isfinite(torch.stack(sums)).all(dim=0)
        else:
            fast = torch.stack([torch.isfinite(T) for T in sums]).all(dim=0)
        drift_ok = None if drift is None else drift <= drift_max  # NaN fails; a NaN defect is named first
        carried_ok = None if drift_prev is None else carried_drift_ok(drift_prev, carried_max)
        self._batches.append(dict(labels=list(labels), fast=fast, checked=list(checked), on_manifold=on_manifold,
                                  defect=defect, tolerance=tolerance, defect_before=defect_before, drift=drift,
                                  drift_ok=drift_ok, drift_max=drift_max, drift_prev=drift_prev,
                                  carried_ok=carried_ok, carried_max=carried_max))

    def check_hyper(self, name: str, value: torch.Tensor) -> None:
        """Refuse the step unless the one-element tensor ``value`` (a tensor ``lr``, which a scheduler may have
        changed since construction) is finite and >= 0; its flag is read with the others (no extra host
        synchronisation). The error names ``name``; a tensor of more than one element or not of a floating dtype
        is refused at once (metadata, no synchronisation) with a ``ValueError`` / ``TypeError``."""
        if value.numel() != 1:
            raise ValueError(f"{name} must be a one-element tensor, got shape {tuple(value.shape)}")
        if not value.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {value.dtype}")
        v = value.detach().reshape(())
        self._hypers.append((name, v, torch.isfinite(v) & (v >= 0)))

    def failures(self) -> list[tuple[str, Any, float | None, float | None, float | None]]:
        """``[(kind, label, defect, tolerance, defect_before)]`` of every refused parameter (``kind``:
        ``"nonfinite"``, ``"off_manifold"``, ``"drift"`` (``defect``: the drift, ``tolerance``: its ceiling),
        ``"carried_drift"`` (a drift carried into the step outside ``[0, ceiling]``), ``"hyper"`` (a bad tensor
        hyperparameter of :meth:`check_hyper`) or ``"unexplained"``; hyperparameters first, then carried drifts
        (the causes of the others), drift refusals last). Reads every flag at once: one host synchronisation per device
        (usually one)."""
        by_device: dict[torch.device, list[torch.Tensor]] = defaultdict(list)
        for _, _, ok in self._hypers:
            by_device[ok.device].append(ok.reshape(1))
        for b in self._batches:
            ok = b["fast"]
            for flag in (b["on_manifold"], b["drift_ok"], b["carried_ok"]):
                ok = ok if flag is None else ok & flag
            by_device[ok.device].append(ok)
        if all(bool(torch.cat(flags).all()) for flags in by_device.values()):  # the one synchronisation
            return []
        out = [("hyper", name, float(v), None, None) for name, v, ok in self._hypers if not bool(ok)]
        for b in self._batches:  # an error path: more synchronisations are fine here
            finite = torch.stack([torch.isfinite(T).flatten(1).all(dim=1) for T in b["checked"]]).all(dim=0).tolist()
            manifold = b["on_manifold"].tolist() if b["on_manifold"] is not None else [True] * len(finite)
            before = None
            drift_ok = b["drift_ok"].tolist() if b["drift_ok"] is not None else [True] * len(finite)
            carried_ok = b["carried_ok"].tolist() if b["carried_ok"] is not None else [True] * len(finite)
            for i, label in enumerate(b["labels"]):
                if not carried_ok[i]:
                    out.append(("carried_drift", label, float(b["drift_prev"][i]), b["carried_max"], None))
                elif not finite[i]:
                    out.append(("nonfinite", label, None, None, None))
                elif not manifold[i]:
                    if before is None and b["defect_before"] is not None:
                        before = b["defect_before"]().reshape(len(finite), -1).amax(dim=1).tolist()
                    defect, tol = _worst(b["defect"][i], b["tolerance"][i])
                    out.append(("off_manifold", label, defect, tol, None if before is None else before[i]))
                elif not drift_ok[i]:
                    out.append(("drift", label, float(b["drift"][i]), b["drift_max"], None))
        if not out:  # a flag failed with no cause found: never commit on it (a flag of an unexpected shape)
            out.append(("unexplained", None, None, None, None))
        # a bad carried drift first (it is the cause of what follows from it); a drift refusal last: an outside
        # change or a NaN elsewhere is the likelier cause to report first
        return sorted(out, key=lambda f: _ORDER.get(f[0], 1))

    def verify(self) -> None:
        """Raise for the first refused parameter (``raise_for``): :class:`NonFiniteUpdateError`,
        :class:`OffManifoldError`, ``ValueError`` for a bad tensor hyperparameter or carried drift, ``RuntimeError``
        for a failed flag whose cause was not found; nothing if every check passed."""
        raise_for(self.optimizer, self.failures())

    def commit(self) -> None:
        """Copy every new value into place and run the bookkeeping callbacks (under ``no_grad``: an in-place
        write into a leaf that requires grad, an ``nn.Parameter`` outside an optimizer, is not recorded)."""
        with torch.no_grad():
            for target, value in self._writes:
                target.copy_(value)
        for fn in self._on_commit:
            fn()


_ORDER = {"hyper": -1, "carried_drift": 0, "drift": 2}


def carried_drift_ok(drift: torch.Tensor, ceiling: float) -> torch.Tensor:
    """Elementwise: ``drift`` in ``[0, ceiling]`` (NaN fails), as a tensor, not read: clamping changes nothing
    there (NaN != NaN); two small ops, on the step's hot path and at load."""
    return drift.clamp(0.0, ceiling) == drift


def _worst(defect: torch.Tensor, tolerance: torch.Tensor) -> tuple[float, float]:
    """The defect and tolerance of a parameter's worst matrix (the largest excess; NaN first), as floats."""
    defect, tolerance = defect.reshape(-1), torch.broadcast_to(tolerance.reshape(-1), defect.reshape(-1).shape)
    excess = torch.nan_to_num(defect - tolerance, nan=float("inf"))
    j = int(excess.argmax())
    return float(defect[j]), float(tolerance[j])


def _others(failures: list[tuple]) -> str:
    """``" (2 more parameters were refused too)"``: the other refused parameters (each once, whatever its causes)
    and hyperparameters, beside the first failure's."""
    first = failures[0][1]
    params = {str(f[1]) for f in failures[1:] if f[0] != "hyper" and f[1] != first}
    hypers = sum(f[0] == "hyper" for f in failures[1:])
    parts = [f"{n} more {what}{'s were' if n > 1 else ' was'} refused too"
             for n, what in ((len(params), "parameter"), (hypers, "hyperparameter")) if n]
    return f" ({'; '.join(parts)})" if parts else ""


def raise_for(optimizer: str, failures: list[tuple[str, Any, float | None, float | None, float | None]]) -> None:
    """Raise the error that describes the first of ``failures`` (nothing if it is empty); every message ends by
    saying that nothing was changed and how many other parameters were refused."""
    if not failures:
        return
    kind, label, defect, tol, before = failures[0]
    unchanged = f"; no parameter or optimizer state was changed{_others(failures)}"
    if kind == "hyper":
        raise ValueError(f"{optimizer}: {label} must be a finite number >= 0, got {defect!r} (a tensor lr is checked at "
                         f"every step, with the step's one synchronisation){unchanged}")
    if kind == "carried_drift":
        raise ValueError(
            f"{optimizer}: the drift carried for {label} must be in [0, {tol:g}] (the defect max|WᵀW - I| left by its "
            f"last uncorrected step: drifts[i] in the functional API, optimizer.state[W]['drift'] in the optimizer), "
            f"got {defect!r}{unchanged}")
    if kind == "unexplained":
        raise RuntimeError(f"{optimizer}: a check of the step failed with no cause found (a flag of an unexpected "
                           f"shape?){unchanged}")
    if kind == "nonfinite":
        raise NonFiniteUpdateError(
            f"{optimizer}: the update of {label} is not finite (NaN or Inf): a NaN/Inf gradient, a momentum "
            f"that overflowed, a NaN/Inf state loaded from a checkpoint, or a factorisation that did not "
            f"converge{unchanged}")
    if kind == "drift":
        raise OffManifoldError(
            f"{optimizer}: uncorrected steps have let {label} drift off its manifold: max|WᵀW - I| = {defect:.3g} after "
            f"the step, above {tol:g}, the most an uncorrected run may carry (the point check adds it to its tolerance) "
            "and a checkpoint may hold. No Björck step corrected the drift in time (polar_every=0, a polar_every too "
            "large for this lr, or correct=False in the functional API): lower polar_every (1 corrects every step), or "
            "project the point back, e.g. W.data.copy_(manifold.project(W)), and zero its drift "
            f"(optimizer.state[W]['drift'].zero_()){unchanged}")
    if before is not None and before <= tol:
        raise OffManifoldError(
            f"{optimizer}: the step would leave {label} off its manifold: max|WᵀW - I| = {defect:.3g} after the step, "
            f"above its tolerance {tol:.3g}, from a point on it (max|WᵀW - I| = {before:.3g} before). The step "
            "itself lost accuracy: a step length far beyond the manifold's scale in a low precision, or a manifold "
            f"whose retraction does not fit its direction. Lower lr, or use float64{unchanged}")
    # the point before the step is the evidence where it is known (a manifold whose retraction heals any point, the
    # Stiefel one, returns one on the manifold from it); else the point after it
    where = (f"max|WᵀW - I| = {before:.3g} before the step" if before is not None
             else f"max|WᵀW - I| = {defect:.3g} after the step")
    raise OffManifoldError(
        f"{optimizer}: {label} is no longer on its manifold: {where}, above "
        f"its tolerance {tol:.3g}; it was changed outside the optimizer (scaled or overwritten?). "
        f"Project it back, e.g. W.data.copy_(manifold.project(W)){unchanged}")
