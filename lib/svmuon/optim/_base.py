"""The torch.optim shell shared by Muon and ManifoldMuon: collect lists, plan every group, verify once, commit.

Subclasses define ``_check_options(group)`` (raise for bad hyperparameters), ``_check_group(group, index)``
(the options, then the parameters; called for every param group, including ones added later),
``_check_state(p, state, label)`` (raise for a malformed per-parameter state entry; called by
``load_state_dict``) and ``_plan_group(plan, group, labels)`` (collect the group's tensors and add its
updates to the plan through :mod:`svmuon.optim.functional`). Everything else -- the
closure, the single host synchronisation, atomicity across groups, ``nan_policy``, ``skipped_steps`` in
the state dict, named parameters in error messages, the orthogonaliser resolved once per option set --
lives here, and so does a ``load_state_dict`` that checks what it loads (options and state entries) and
leaves the optimizer unchanged if anything is refused.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable, Iterable

import numpy as np
import torch
from torch.optim.optimizer import _to_scalar

from svmuon._validation import check_device
from svmuon.optim._batching import check_disjoint, shares_entries
from svmuon.optim.plan import StepPlan, raise_for

NAN_POLICIES = ("raise", "skip")


def check_hyper(name: str, value: Any, *, upper: float = math.inf, tensor_ok: bool = False) -> float:
    """``value`` as a float in ``[0, upper)``; ``TypeError``/``ValueError`` naming ``name`` otherwise.

    With ``tensor_ok`` a one-element tensor is accepted too (``lr``, as torch.optim allows), and read once.
    """
    if tensor_ok and isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"Tensor lr must be 1-element: {name} has shape {tuple(value.shape)}")
        if not value.is_floating_point():
            raise TypeError(f"{name} must be a floating tensor, got dtype {value.dtype}")
        value = float(value.detach())  # a one-element lr may require grad (torch allows it): no warning
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if math.isnan(value) or not (0.0 <= value < upper):
        raise ValueError(f"{name} must lie in [0, {upper}), got {value}")
    return value


def check_decay(lr: Any, weight_decay: float, dtypes: Iterable[torch.dtype]) -> None:
    """``ValueError`` naming ``lr`` and ``weight_decay`` unless ``1 - lr·weight_decay`` (both checked by
    :func:`check_hyper`; a tensor ``lr`` is read) is finite in every dtype of ``dtypes``: the step multiplies each
    parameter by it in the parameter's dtype, where torch refuses a factor it cannot represent (RuntimeError)."""
    lr = float(lr.detach()) if isinstance(lr, torch.Tensor) else float(lr)
    decay = 1.0 - lr * weight_decay  # Python floats: an overflow gives -inf, never an exception
    for dtype in dict.fromkeys(dtypes):
        top = torch.finfo(dtype).max
        if not abs(decay) <= top:
            raise ValueError(f"lr = {lr:g} and weight_decay = {weight_decay:g} make the decoupled decay factor "
                             f"1 - lr·weight_decay = {decay:.3g}, beyond the range of {dtype} (|x| <= {top:.3g}) "
                             "that multiplies the parameters; lower lr or weight_decay")


def check_bool(name: str, value: Any) -> None:
    """``TypeError`` naming ``name`` unless ``value`` is a bool (a string such as ``"no"`` would read as True)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")


def check_param(p: Any, label: str, optimizer: str) -> None:
    """A parameter must be a non-empty real floating tensor, not a meta one (before any shape rule of the optimizer)."""
    if not isinstance(p, torch.Tensor):
        raise TypeError(f"{optimizer}: {label} must be a torch.Tensor, got {type(p).__name__}")
    if p.is_complex() or not p.is_floating_point():
        why = f" ({optimizer} does not support complex parameters)" if p.is_complex() else ""
        raise TypeError(f"{optimizer}: {label} must have a real floating dtype, got {p.dtype}{why}")
    if p.numel() == 0:
        raise ValueError(f"{optimizer}: {label} is empty (shape {tuple(p.shape)})")
    check_device(p, f"{optimizer}: {label}")  # a step would fail inside torch on its first read
    if shares_entries(p):
        raise ValueError(f"{optimizer}: {label} has entries that share memory (stride {p.stride()}: an expand()ed "
                         "tensor?), which a step cannot write in place; pass a contiguous copy (.clone())")


class Label(str):
    """A parameter's name in error messages (a str), knowing the index of its param group."""

    group: int


class Labels:
    """Names of some of a group's parameters (``positions`` in the group) for error messages, built only
    when one is needed: the name given to the optimizer (named parameters) and the position."""

    def __init__(self, group_index: int, group: dict[str, Any], positions: list[int]) -> None:
        self.group_index, self.group, self.positions = group_index, group, positions

    def __len__(self) -> int:
        return len(self.positions)

    def __getitem__(self, i: int) -> Label:
        k = self.positions[i]
        names = self.group.get("param_names")
        where = f"param_groups[{self.group_index}]['params'][{k}], shape {tuple(self.group['params'][k].shape)}"
        label = Label(f"parameter {names[k]!r} ({where})" if names else f"parameter {where}")
        label.group = self.group_index
        return label


class MatrixOptimizer(torch.optim.Optimizer):
    """Base of :class:`~svmuon.optim.muon.Muon` and :class:`~svmuon.optim.manifold_muon.ManifoldMuon` (see the module docstring).

    Attributes:
        skipped_steps: steps skipped under ``nan_policy="skip"``; saved by ``state_dict()`` (key
            ``"skipped_steps"``) and restored by ``load_state_dict()``.
    """

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any]) -> None:
        self.skipped_steps = 0
        self._orthogonalizers: dict[tuple, Any] = {}
        self._option_names = tuple(defaults)  # before torch adds its own keys (e.g. "differentiable") to defaults
        super().__init__(params, defaults)

    # -- groups ----------------------------------------------------------------------------------------------
    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group (torch.optim semantics, named parameters included), then check its options and
        parameters; a group that fails the check is not added. NumPy scalar options are stored as Python
        numbers (so that the state dict loads with ``torch.load(weights_only=True)``), and ``ns_coefficients``
        given as an array or tensor of ``(a, b, c)`` triples as nested lists (the rule of
        :func:`~svmuon.orthogonal.coefficients.resolve_coefficients`, msign's)."""
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        try:
            _plain_options(group)
            self._check_group(group, len(self.param_groups) - 1)
        except Exception:
            self.param_groups.pop()
            raise

    def _check_group(self, group: dict[str, Any], index: int) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _check_options(self, group: dict[str, Any]) -> None:  # pragma: no cover - abstract
        """Raise ``TypeError``/``ValueError`` for a bad hyperparameter of ``group``."""
        raise NotImplementedError

    def _check_state(self, p: torch.Tensor, state: dict[str, Any], label: str) -> None:  # pragma: no cover
        """Raise ``ValueError`` naming ``label`` for a malformed state entry of parameter ``p`` (at load)."""
        raise NotImplementedError

    #: group options a state dict may lack, filled from the defaults at load (e.g. those torch.optim.Muon lacks)
    _optional_options: tuple[str, ...] = ()

    def _orthogonalizer(self, method: str, ns_steps: Any, ns_coefficients: Any, compute_dtype: Any) -> Any:
        """The :class:`~svmuon.orthogonal.msign.Orthogonalizer` of these options, built (and checked) once."""
        from svmuon.orthogonal.msign import Orthogonalizer

        coeffs = ns_coefficients if isinstance(ns_coefficients, (str, type(None))) else _freeze(ns_coefficients)
        key = (method, ns_steps, coeffs, compute_dtype)
        orth = self._orthogonalizers.get(key)
        if orth is None:
            orth = Orthogonalizer(method, ns_steps=ns_steps, ns_coefficients=ns_coefficients,
                                  compute_dtype=compute_dtype)
            self._orthogonalizers[key] = orth
        return orth

    # -- step ------------------------------------------------------------------------------------------------
    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One step on every parameter with a gradient (parameters without one are untouched).

        Every update is computed first; one host synchronisation then checks them all; only then is
        anything written. A non-finite update raises :class:`~svmuon.optim.plan.NonFiniteUpdateError`
        naming the parameter (or, with ``nan_policy="skip"`` for its group, skips the whole step and
        counts it in ``skipped_steps``); a point that left its manifold raises
        :class:`~svmuon.optim.plan.OffManifoldError`. Either way no parameter, buffer or counter
        changes.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        plan = StepPlan(type(self).__name__)
        for index, group in enumerate(self.param_groups):
            positions = [k for k, p in enumerate(group["params"]) if p.grad is not None]
            if positions:
                labels = Labels(index, group, positions)
                self._recheck(group, index, labels)
                if isinstance(group["lr"], torch.Tensor):
                    plan.check_hyper(f"param_groups[{index}]['lr']", group["lr"])
                self._plan_group(plan, group, labels)
        failures = plan.failures()
        skip = {i for i, g in enumerate(self.param_groups) if g.get("nan_policy", "raise") == "skip"}
        if failures and all(kind == "nonfinite" and label.group in skip for kind, label, *_ in failures):
            self.skipped_steps += 1
            return loss
        # a NaN that skip would have skipped is not the reason the step is refused: report the other first
        skippable = lambda f: f[0] == "nonfinite" and getattr(f[1], "group", None) in skip  # noqa: E731
        raise_for(type(self).__name__, sorted(failures, key=skippable))
        plan.commit()
        return loss

    def _recheck(self, group: dict[str, Any], index: int, labels: Labels) -> None:
        """Before a step, on host metadata only (no synchronisation): options set in ``param_groups`` after
        construction (by hand, a scheduler, a sweep) pass the constructor's checks again whenever they changed
        (``_check_options``; the lr has its own check), and every parameter's gradient has its shape and dtype
        (``p.data = ...`` with an old gradient left behind). Raises ``ValueError`` / ``TypeError`` naming the
        group or parameter; nothing has been changed then. An array or tensor of ``ns_coefficients`` set by hand
        is read once and, once checked, stored as lists (the constructor's form), so later steps do not read it."""
        opts = {k: v for k, v in group.items() if k not in ("params", "lr")}
        checked = self.__dict__.setdefault("_checked_options", {})  # not pickled: rebuilt on the first step
        try:
            _plain_options(opts)  # the constructor's forms, on a copy: the group changes only once checked
            key = tuple((k, _freeze(v)) for k, v in opts.items())
            if checked.get(index) != key:
                self._check_options({**group, **opts, "lr": 0.0})  # not the lr: a tensor's value is not read here
                checked[index] = key
        except (ValueError, TypeError) as e:
            raise type(e)(f"{type(self).__name__}: param_groups[{index}] (set after construction): {e}") from e
        if "ns_coefficients" in opts:  # an array or tensor set by hand, stored as lists: not read again
            group["ns_coefficients"] = opts["ns_coefficients"]
        for j, k in enumerate(labels.positions):
            p = group["params"][k]
            if p.grad.shape != p.shape or p.grad.dtype != p.dtype:
                raise ValueError(f"{type(self).__name__}: {labels[j]} ({p.dtype}) has a gradient of shape "
                                 f"{tuple(p.grad.shape)} {p.grad.dtype}: was the parameter replaced after backward? "
                                 "Compute its gradient again (or set p.grad = None)")

    def _plan_group(self, plan: StepPlan, group: dict[str, Any], labels: Labels) -> None:  # pragma: no cover
        """Add the updates of the parameters at ``labels.positions`` (those with a gradient) to ``plan``."""
        raise NotImplementedError

    @staticmethod
    def _lr(group: dict[str, Any]) -> Any:
        """The group's learning rate as the step uses it; a plain number set after construction (by hand or by a
        scheduler) is checked again (a host float: no synchronisation); a tensor is not read here: ``step`` folds
        its check into the step's one synchronisation (:meth:`~svmuon.optim.plan.StepPlan.check_hyper`)."""
        lr = group["lr"]
        if not isinstance(lr, torch.Tensor):
            check_hyper("param_groups[...]['lr'] (set after construction)", lr)
        return _to_scalar(lr)

    # -- copying and state dicts -----------------------------------------------------------------------------
    #: attributes beyond torch.optim's (defaults, state, param_groups) that copies and pickles keep
    _extra_attributes: tuple[str, ...] = ("skipped_steps", "_option_names")

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.update({name: getattr(self, name) for name in self._extra_attributes})
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.__dict__.setdefault("skipped_steps", 0)
        self.__dict__.setdefault("_option_names", tuple(k for k in self.defaults if k != "differentiable"))
        self._orthogonalizers = {}  # rebuilt on first use

    def state_dict(self) -> dict[str, Any]:
        """torch.optim's state dict plus ``"skipped_steps"`` (an int)."""
        sd = super().state_dict()
        sd["skipped_steps"] = self.skipped_steps
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch.optim's ``load_state_dict`` (state cast to each parameter's dtype and device), and
        ``skipped_steps`` (0 if the dict has none, e.g. one saved by torch.optim.Muon).

        What is loaded is checked as the constructor checks its arguments: every group's options (those in
        ``_optional_options`` keep this optimizer's defaults, i.e. its constructor arguments, when absent,
        e.g. ``compute_dtype`` and ``nan_policy`` for a torch.optim.Muon state dict; any other missing
        option means a state dict of another optimizer) and every parameter's state entry (shapes,
        counters). A refused state dict raises ``ValueError``/``TypeError`` naming the group or parameter
        and leaves the optimizer as it was (load post-hooks registered by the user may already have run).
        NumPy scalar options are stored as Python numbers, as in :meth:`add_param_group`.
        """
        name = type(self).__name__
        if not isinstance(state_dict, dict):
            raise TypeError(f"{name}.load_state_dict: expected the dict returned by state_dict(), got "
                            f"{type(state_dict).__name__}")
        missing = [key for key in ("state", "param_groups") if key not in state_dict]
        if missing:
            raise ValueError(f"{name}.load_state_dict: the state dict lacks {missing} (an optimizer state dict has "
                             f"'state' and 'param_groups'; got the keys {sorted(map(str, state_dict))}): truncated, "
                             "or not an optimizer's state dict?")
        skipped = state_dict.get("skipped_steps", 0)
        if isinstance(skipped, bool) or not isinstance(skipped, numbers.Integral) or skipped < 0:
            raise ValueError(f"{name}.load_state_dict: skipped_steps must be an integer >= 0, got {skipped!r}")
        old_state, old_groups = self.state, self.param_groups
        super().load_state_dict(state_dict)
        try:
            for index, group in enumerate(self.param_groups):
                missing = sorted(k for k in self._option_names if k not in group and k not in self._optional_options)
                if missing:
                    raise ValueError(f"{name}.load_state_dict: param_groups[{index}] lacks the options {missing} of "
                                     f"{name}: is this the state dict of another optimizer?")
                for key in self._optional_options:
                    group.setdefault(key, self.defaults[key])
                try:
                    _plain_options(group)
                    self._check_options(group)
                except (TypeError, ValueError) as err:
                    raise type(err)(f"{name}.load_state_dict: param_groups[{index}]: {err}") from None
                labels = Labels(index, group, list(range(len(group["params"]))))
                for i, p in enumerate(group["params"]):
                    if p in self.state:
                        where = f"{name}.load_state_dict: the state of {labels[i]}"
                        if not isinstance(self.state[p], dict):  # torch casts what it is given
                            raise ValueError(f"{where} must be a dict, got {type(self.state[p]).__name__}")
                        self._check_state(p, self.state[p], where)
            try:
                check_disjoint(self._written())
            except ValueError as err:
                raise ValueError(f"{name}.load_state_dict: {err}") from None
        except Exception:
            self.state, self.param_groups = old_state, old_groups
            raise
        self.skipped_steps = int(skipped)

    def _written(self) -> list[tuple[torch.Tensor, str, str]]:
        """Every tensor a step writes in place, labelled: the parameters (kind ``"param"``), their state's tensors
        and those of its ``solver`` dict (loaded tensors that alias one another or a parameter are refused: torch's
        cast keeps an alias)."""
        out, seen = [], set()
        for index, group in enumerate(self.param_groups):
            labels = Labels(index, group, list(range(len(group["params"]))))
            for i, p in enumerate(group["params"]):
                if id(p) in seen:  # a parameter listed twice (torch warns): one state, checked once
                    continue
                seen.add(id(p))
                out.append((p, labels[i], "param"))
                for key, value in self.state.get(p, {}).items():
                    inner = value.items() if key == "solver" and isinstance(value, dict) else [(None, value)]
                    for sub, v in inner:
                        where = f"['{key}']" + ("" if sub is None else f"['{sub}']")
                        out.append((v, f"the state{where} of {labels[i]}", "state"))
        return out

    def _check_replaced(self, grad: torch.Tensor, buf: torch.Tensor, labels: Labels, j: int) -> None:
        """At a step: a parameter whose shape or dtype changed since its momentum buffer was made (``p.data =
        ...``; the buffer is ``zeros_like(p.grad)``) is refused with its name (metadata only, no host sync)."""
        if buf.shape != grad.shape or buf.dtype != grad.dtype:
            raise ValueError(f"{type(self).__name__}: {labels[j]} has changed shape or dtype since its optimizer "
                             f"state was created (momentum buffer {tuple(buf.shape)} {buf.dtype}, gradient "
                             f"{tuple(grad.shape)} {grad.dtype}); create a new optimizer for it, or load a matching "
                             "state dict")

    @staticmethod
    def _check_buffer(p: torch.Tensor, state: dict[str, Any], key: str, label: str) -> None:
        """``state[key]`` must be a tensor of ``p``'s shape (its dtype and device were cast by torch)."""
        buf = state[key]
        if not isinstance(buf, torch.Tensor) or tuple(buf.shape) != tuple(p.shape):
            got = f"shape {tuple(buf.shape)}" if isinstance(buf, torch.Tensor) else type(buf).__name__
            raise ValueError(f"{label}: {key} must be a tensor of the parameter's shape {tuple(p.shape)}, got {got}")
        if shares_entries(buf):
            raise ValueError(f"{label}: {key} has entries that share memory (stride {buf.stride()}), which a step "
                             "cannot write in place; load a contiguous copy")


def _plain_options(group: dict[str, Any]) -> None:
    """NumPy option values as Python ones (``torch.load(weights_only=True)`` refuses NumPy), and
    ``ns_coefficients`` in the resolver's plain form (:func:`~svmuon.orthogonal.coefficients.plain_coefficients`:
    an array or tensor of triples as lists, so that a step's re-check reads no tensor)."""
    from svmuon.orthogonal.coefficients import plain_coefficients

    for key, value in group.items():
        if key == "ns_coefficients":
            group[key] = plain_coefficients(value)
        elif isinstance(value, np.generic):
            group[key] = value.item()
        elif isinstance(value, np.ndarray):
            group[key] = value.tolist()


def _freeze(x: Any) -> Any:
    """A hashable key of an option value (nested lists, tuples, arrays and tensors become nested tuples)."""
    if isinstance(x, (np.ndarray, torch.Tensor)):
        x = x.tolist()
    if isinstance(x, (list, tuple)):
        return tuple(_freeze(v) for v in x)
    if isinstance(x, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in x.items()))
    return type(x), x  # True == 1 == 1.0: a bool or float set over an int is checked again
