"""ManifoldMuon: Muon whose matrices stay on a manifold ``WᵀW = I`` (su2025orthogonal); OrthogonalMuon.

A thin :class:`torch.optim.Optimizer` shell over :func:`svmuon.optim.functional.manifold_muon_updates` (its
unchecked core: the optimizer's own state was checked when it was made or loaded);
all geometry comes from the manifold object (:class:`svmuon.orthogonal.base.Manifold`), so a new manifold
(Stiefel) or retraction never touches this file. For each parameter ``W`` with Euclidean gradient ``g``
one step is

1. momentum kept in the tangent space (projection transport), with ``torch.optim.Muon``'s conventions
   otherwise: ``B₁ = mu B + (1 - mu) g``, the new buffer ``P_W(B₁)``, and ``U = (1 - mu) g + mu B₁`` with
   Nesterov, else ``U = B₁`` (``U``'s tangent part is the same with ``B₁`` or ``P_W(B₁)``);
2. the manifold's steepest direction for ``U`` (on O(n): ``O = [msign([WᵀU]_skew)]_skew``,
   eq-orth-direction), with the orthogonaliser resolved once per option set;
3. the polar retraction along it with step length ``η = lr · min(1, ‖P_W(U)‖_F / (eps ‖U‖_F))`` (on O(n)
   ``W <- W(I - ηO)(I - OᵀO + OᵀO/√(1+η²))``, eq-orth-retraction), so ``lr`` is the spectral-norm length
   of the step and a tangent part at rounding level takes none (the eps rule);
4. the point check and drift control, from one Gram matrix ``WᵀW`` of the new point (and, on a manifold whose
   retraction returns a point from any ``W``, the Stiefel one, one of the point before the step:
   ``manifold.start_defect``): its defect must be
   at most ``2 (atol + drift) + slack`` (else the point was scaled or overwritten since the last step and
   the step is refused), and every ``polar_every`` steps one Björck step ``W <- W(3I - WᵀW)/2`` follows (more for
   a long step, below).

Why the buffer is tangent (thm-tangent-momentum in the chapter "Muon on the orthogonal group"). The tangent
space ``{WΩ : Ω skew}`` moves with ``W``; the projection transport (absil2008optimization, §8.1.3) re-projects
the buffer at every step, so the normal part of a gradient never enters it, and a term constant on the manifold
(weight decay ``c‖W‖²`` on ``WᵀW = I``) changes no step. An ambient buffer (``torch.optim.Muon``'s, projected
only when used) keeps the normal parts of old gradients; once ``W`` has moved part of them is tangent
(``P_{W_t} P_{W_{t-1}} ≠ P_{W_t}``), and msign turns that leak into a full-length step: with weight decay it
converges to the wrong point (the chapter measures it on O(8) and St(12, 5)). The price is one projection per
step (two products); a buffer saved by ``torch.optim.Muon`` still loads and is projected at the next step.

Why the drift control, and why every step by default (measured, see the chapter's drift table and
``experiments/results/orthogonal-drift.json``). With an exact msign, ``OᵀO`` is a projector and the
retraction is orthogonal up to rounding, but rounding accumulates: without correction float32 ends at
``‖WᵀW - I‖_max`` between 4e-6 and 1.7e-5 after 10,000 steps (n = 4, 5, a few seeds), i.e. at or above
the 1e-5 target. A Newton–Schulz ``O`` whose singular values ``σ`` are not all 0 or 1 (Keller Jordan's
quintic: :data:`~svmuon.orthogonal.coefficients.KELLER_JORDAN_BAND` ``[0.4705, 1.2024]``; a Polar Express
spectrum with a pair below its design range; bf16 on CUDA) scales an eigen-direction of the step by
``√(1 + σ²(σ²-1)(s-1)²)``, ``s = 1/√(1+η²)``: a drift of at most ``0.644 (s-1)² ≈ 0.644 η⁴/4`` per step with
the quintic (``0.644 = max σ²|σ²-1|`` over its band), ``2e-2`` after 10,000 steps at η = 0.1. One Björck
step maps an error ``ε`` to ``≈ 3ε²/4``, so a per-step correction holds every schedule at rounding level,
for two n×n matmuls against 15–30 in the Newton–Schulz msign itself; a step long enough that one would leave more
than rounding (``3ε²/4 > 16u`` for the bound ``ε`` at ``lr``: with Keller Jordan's band from ``lr = 0.03`` in
float64, above about ``0.3`` in float32) gets as many as bring it there, two products each (``_manifold_step._corrections``; with a tensor ``lr``,
which is not read on the host, one). ``polar_every=0`` switches it off, up to a drift of
``functional.DRIFT_MAX = 0.1``, beyond which a step is refused (``OffManifoldError``, naming the cause;
the drift widens the point check's tolerance, so near the ceiling an outside change of up to about
``2 · drift`` passes unseen)
(float64 with an exact msign does not need it: ~3e-14 after 10,000 steps); the Gram matrix of the point
check is then one extra product per step.

Hard targets (tests/test_manifold_muon.py): ``‖WᵀW - I‖_max <= 1e-5`` after 10,000 steps in float32 and
``<= 1e-12`` in float64, for even and odd n, with ``msign_method="svd"`` and with the converging
Newton–Schulz schedules (``"polar_express"``, ``"cubic"``), and with ``"keller_jordan"`` thanks to the
correction.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Iterable

import torch

from svmuon._validation import check_int
from svmuon.optim._base import NAN_POLICIES, Labels, MatrixOptimizer, check_bool, check_hyper, check_param
from svmuon.optim.distributed import whole
from svmuon.optim.functional import CARRIED_DRIFT_MAX, DRIFT_MAX, StepPlan, _manifold_muon_plan
from svmuon.optim.plan import carried_drift_ok

__all__ = ["ManifoldMuon", "OrthogonalMuon"]

# The ceiling of ``atol``: a start point off the manifold by 1e-2 or more (‖WᵀW - I‖_max) is not on it in any useful
# sense.
_TOLERANCE_MAX = 1e-2
# The ceiling of a loaded ``drift``, which the step's check adds to atol (``defect <= 2 (atol + drift) + slack``,
# _manifold_step._point_check; a corrupted 0.4 let a 0.6-scaled point pass) is functional.DRIFT_MAX, the most an
# uncorrected step may leave, compared as the step compares it (a tensor against the float: 0.1 in the drift's dtype),
# so every checkpoint a run writes loads.


class ManifoldMuon(MatrixOptimizer):
    """Muon on a manifold ``{W : WᵀW = I}``: every parameter stays on it (see the module docstring).

    Args:
        params: iterable of tensors of shape ``(..., m, n)`` (float32 or float64, each matrix on the
            manifold, e.g. from ``manifold.project``), of ``(name, tensor)`` pairs, or of param-group dicts.
        lr: spectral-norm step length η >= 0 (float or one-element tensor).
        manifold: a :class:`~svmuon.orthogonal.base.Manifold` (default ``Orthogonal()``, the group O(n)).
        momentum: ``mu`` in [0, 1). nesterov: Nesterov momentum (as ``torch.optim.Muon``).
        msign_method: ``"newton_schulz"`` (default) or ``"svd"`` (exact, float64-ready).
        ns_steps: Newton–Schulz steps (``None``: the schedule's default, 10 for Polar Express).
        ns_coefficients: ``"polar_express"`` (default), ``"cubic"``, ``"keller_jordan"`` or triples (as for
            :class:`~svmuon.optim.muon.Muon`).
        compute_dtype: float16, bfloat16, float32 or float64 for the Newton–Schulz matmuls; ``None``:
            float32/float64 on CPU, bfloat16 on CUDA (the fast path: msign in bf16, ``W`` and the retraction
            in the parameter's dtype).
        polar_every: a Björck correction every this many steps (0: never; a step that would leave the point a drift
            above 0.1 from the manifold is then refused). Default 1 (module docstring).
        nan_policy: ``"raise"`` (default): a non-finite update raises
            :class:`~svmuon.optim.plan.NonFiniteUpdateError`; ``"skip"``: the whole step is skipped
            (counted in ``skipped_steps``). In both cases no parameter or state changes.
        atol: tolerance of the point checks: ``‖WᵀW - I‖_max <= atol`` at construction, and at every step
            ``<= 2 (atol + drift) + slack`` (module docstring). Default ``√eps`` of the parameter's dtype
            (3.5e-4 in float32, 1.5e-8 in float64). At least ``16 √m eps`` of each parameter's dtype
            (below, rounding alone would fail the check), wherever it is set: constructor, ``load_state_dict``
            or ``param_groups`` before a step.
        eps: the tangent part ``P_W(U)`` of an update ``U`` with ``‖P_W(U)‖_F < eps ‖U‖_F`` counts as
            rounding noise and shrinks the step to ``lr ‖P_W(U)‖_F / (eps ‖U‖_F)`` (the eps rule of
            :mod:`svmuon.optim.functional`); ``None`` (default): ``√eps`` of the parameter's dtype, above
            the ~1e-7 relative rounding of ``WᵀU`` in float32; 0 disables.

    Raises:
        ValueError: a parameter that is not a point (the message names the parameter and the manifold's
            ``project``), bad hyperparameters (e.g. an ``atol`` below the floor above, naming the group); at
            ``step()``, a non-finite update, a point that left the manifold, uncorrected steps that would leave a
            drift above ``functional.DRIFT_MAX``, a drift in the state that is not a 0-d floating tensor in
            ``[0, functional.CARRIED_DRIFT_MAX]`` (set by hand), an ``lr`` changed since
            construction to NaN, Inf or below 0 (a tensor one too, checked within the step's one
            synchronisation, whatever the ``nan_policy``), or a parameter whose shape or dtype changed since its
            state was created (nothing is changed then); at ``load_state_dict()``, bad options or state entries
            (e.g. a ``drift`` that is not 0-d, NaN, negative or above 0.1 (0.1 rounded up to float32, so that a
            float32 checkpoint at the ceiling loads into a float64 model), state tensors that share memory with
            one another or with a parameter, or too small an ``atol``), or a state dict of another optimizer
            (the optimizer is left as it was).
        TypeError: a parameter that is not float32/float64, a ``manifold`` that is not a
            :class:`~svmuon.orthogonal.base.Manifold` instance, a ``nesterov`` that is not a bool, a
            non-integer ``polar_every``/``ns_steps``, a ``compute_dtype`` outside the four above; sparse or
            complex gradients at ``step()``.

    References:
        su2025orthogonal, jordan2024muon, absil2008optimization, bjorck1971iterative, amsel2025polar.
    """

    _extra_attributes = ("skipped_steps", "_option_names", "manifold")

    def __init__(self, params: Iterable[Any], lr: float | torch.Tensor = 0.02, *, manifold: Any = None,
                 momentum: float = 0.95, nesterov: bool = True, msign_method: str = "newton_schulz",
                 ns_steps: int | None = None, ns_coefficients: Any = None, compute_dtype: torch.dtype | None = None,
                 polar_every: int = 1, nan_policy: str = "raise", atol: float | None = None,
                 eps: float | None = None) -> None:
        if manifold is None:
            from svmuon.orthogonal.manifolds import Orthogonal

            manifold = Orthogonal()
        from svmuon.orthogonal.base import Manifold

        if not isinstance(manifold, Manifold):
            raise TypeError(f"manifold must be a svmuon.orthogonal.base.Manifold instance (e.g. Orthogonal()), "
                            f"got {manifold!r}")
        self.manifold = manifold
        if isinstance(lr, torch.Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        defaults = dict(lr=lr, momentum=momentum, nesterov=nesterov, msign_method=msign_method,
                        ns_steps=ns_steps, ns_coefficients=ns_coefficients, compute_dtype=compute_dtype,
                        polar_every=polar_every, nan_policy=nan_policy, atol=atol, eps=eps)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any], index: int) -> None:
        name, labels = type(self).__name__, Labels(index, group, list(range(len(group["params"]))))
        for i, p in enumerate(group["params"]):  # dtypes and shapes first: the atol floor reads them
            self._check_kind(p, labels[i], name)
        try:
            self._check_options(group)
        except (TypeError, ValueError) as err:
            raise type(err)(f"{name}: param_groups[{index}]: {err}") from None
        for i, p in enumerate(group["params"]):
            self._check_start(p, labels[i], group["atol"], name)

    def _check_options(self, group: dict[str, Any]) -> None:
        check_hyper("lr", group["lr"], tensor_ok=True)
        check_hyper("momentum", group["momentum"], upper=1.0)
        check_bool("nesterov", group["nesterov"])
        check_int(group["polar_every"], "polar_every", minimum=0)
        if group["ns_steps"] is not None:
            check_int(group["ns_steps"], "ns_steps", minimum=1)  # as Muon: 0 steps is no msign at all
        if group["nan_policy"] not in NAN_POLICIES:
            raise ValueError(f"nan_policy must be one of {NAN_POLICIES}, got {group['nan_policy']!r}")
        if group["atol"] is not None:
            check_hyper("atol", group["atol"], upper=_TOLERANCE_MAX)
            self._check_atol_floor(group)
        if group["eps"] is not None:
            check_hyper("eps", group["eps"], upper=1.0)
        self._group_orthogonalizer(group)  # resolves (and so checks) the msign options once

    def _check_state(self, p: torch.Tensor, state: dict[str, Any], label: str) -> None:
        if "momentum_buffer" not in state:  # no step taken yet: the next step starts a fresh state
            return
        missing = sorted({"momentum_buffer", "drift", "step", "solver", "info"} - set(state))
        if missing:
            raise ValueError(f"{label} lacks {missing}: is this the state dict of another optimizer?")
        self._check_buffer(p, state, "momentum_buffer", label)
        drift, step = state["drift"], state["step"]
        if not (isinstance(drift, torch.Tensor) and drift.dim() == 0 and drift.is_floating_point()):
            raise ValueError(f"{label}: drift must be a 0-d floating-point tensor (the defect ‖WᵀW - I‖_max left by "
                             f"the last uncorrected step), got {drift!r}")
        if not bool(carried_drift_ok(drift, CARRIED_DRIFT_MAX)):  # the step's own test of a carried drift
            raise ValueError(f"{label}: drift must be in [0, {DRIFT_MAX:g}], got {float(drift)!r}: a point that far "
                             "off: project it (W.data.copy_(manifold.project(W))) and set this state's 'drift' to "
                             "torch.zeros(())")
        if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
            raise ValueError(f"{label}: step must be an integer >= 0, got {step!r}")
        if not isinstance(state["solver"], dict) or not isinstance(state["info"], dict):
            raise ValueError(f"{label}: solver and info must be dicts")
        keys = tuple(getattr(self.manifold, "state_keys", ()))
        if state["solver"]:
            m, n = p.shape[-2:]
            canon = (n, m) if self.manifold.transposed(tuple(p.shape)) else (m, n)
            fresh = self.manifold.init_state(torch.zeros((1, *canon), dtype=p.dtype, device=p.device))
            for key, value in state["solver"].items():
                shape = (*p.shape[:-2], *fresh[key].shape[1:]) if key in keys else None
                if shape is None or not isinstance(value, torch.Tensor) or tuple(value.shape) != shape:
                    raise ValueError(f"{label}: solver state {key!r} does not fit {self.manifold!r} (expected "
                                     f"names {list(keys)} with shape (*batch, *state) = {shape})")
                if not bool(torch.isfinite(value).all()):  # a warm start of NaN would fail every later step
                    raise ValueError(f"{label}: solver state {key!r} holds NaN or Inf")

    def _check_kind(self, p: torch.Tensor, label: str, name: str) -> None:
        check_param(p, label, name)
        if p.dtype not in (torch.float32, torch.float64):
            raise TypeError(f"{name}: {label} must be float32 or float64 (master weights), got {p.dtype}")
        error = self.manifold.shape_error(tuple(p.shape))
        if error is not None:
            raise ValueError(f"{name}: {label} is not a point of {type(self.manifold).__name__}: {error}{self._hint()}")
        error = self.manifold.dtype_error(p.dtype)
        if error is not None:
            raise TypeError(f"{name}: {label} has dtype {p.dtype}: {error}")

    @staticmethod
    def _check_atol_floor(group: dict[str, Any]) -> None:
        """An ``atol`` below one step's rounding would refuse every step; part of ``_check_options``, so that
        the constructor, ``load_state_dict`` and a step after a change of ``param_groups`` all apply it."""
        atol, params = group["atol"], group["params"]
        for i, p in enumerate(params):
            floor = 16 * math.sqrt(max(p.shape[-2:])) * torch.finfo(p.dtype).eps
            if atol < floor:
                names = group.get("param_names")
                label = f"parameter {names[i]!r} (params[{i}])" if names else f"params[{i}]"
                raise ValueError(f"atol = {atol!r} is below what one step's rounding leaves for {label}, shape "
                                 f"{tuple(p.shape)} ({p.dtype}): a step leaves max|WᵀW - I| of a few √m eps, so "
                                 f"the point check needs atol >= 16 √m eps = {floor:.3g} (None: √eps = "
                                 f"{torch.finfo(p.dtype).eps ** 0.5:.3g})")

    def _check_start(self, p: torch.Tensor, label: str, atol: float | None, name: str) -> None:
        W = whole(p.detach())
        if not bool(torch.isfinite(W).all()):
            raise ValueError(f"{name}: {label} holds NaN or Inf{self._hint()}")
        tol = (torch.finfo(p.dtype).eps ** 0.5) if atol is None else atol
        err = float(self.manifold.defect(W).max())
        if not err <= tol:
            raise ValueError(f"{name}: {label} is not on the manifold {type(self.manifold).__name__}: "
                             f"max|WᵀW - I| = {err:.3g} > atol = {tol:.3g}{self._hint()}")

    def _hint(self) -> str:
        return (f"; start from a point of the manifold, e.g. W.data.copy_(manifold.project(W)) "
                f"({type(self.manifold).__name__}.project: the nearest point)")

    def _group_orthogonalizer(self, group: dict[str, Any]) -> Any:
        method = group["msign_method"]
        if method not in ("svd", "newton_schulz"):
            raise ValueError(f"msign_method must be 'svd' or 'newton_schulz', got {method!r}")
        given = [k for k in ("ns_steps", "ns_coefficients", "compute_dtype") if group[k] is not None]
        if method == "svd" and given:
            raise ValueError(f"{', '.join(given)} apply to msign_method='newton_schulz' only; this group has "
                             "msign_method='svd'")
        coefficients = group["ns_coefficients"]
        if method == "newton_schulz" and coefficients is None:
            coefficients = "polar_express"  # converges: the drift table's best Newton–Schulz schedule
        return self._orthogonalizer(method, group["ns_steps"], coefficients, group["compute_dtype"])

    def _plan_group(self, plan: StepPlan, group: dict[str, Any], labels: Labels) -> None:
        params = [group["params"][k] for k in labels.positions]
        grads = [p.grad for p in params]
        if any(g.is_sparse or g.is_complex() for g in grads):
            raise TypeError(f"{type(self).__name__} does not support sparse or complex gradients")
        every = group["polar_every"]
        buffers, drifts, solver, infos, correct = [], [], [], [], []
        for j, p in enumerate(params):
            if "momentum_buffer" not in self.state.get(p, {}):  # new state is stored at commit only
                view = dict(momentum_buffer=torch.zeros_like(p.grad, memory_format=torch.preserve_format),
                            drift=torch.zeros((), dtype=p.dtype, device=p.device), step=0, solver={}, info={})
                plan.on_commit(lambda p=p, f=view: self.state[p].update(f))
            else:
                view = self.state[p]
                self._check_replaced(p.grad, view["momentum_buffer"], labels, j)
            step = view["step"] + 1
            plan.on_commit(lambda p=p, k=step: self.state[p].__setitem__("step", k))
            buffers.append(view["momentum_buffer"])
            drifts.append(view["drift"])
            solver.append(view["solver"])
            infos.append(view["info"])
            correct.append(every > 0 and step % every == 0)
        _manifold_muon_plan(params, grads, buffers, solver, lr=self._lr(group), manifold=self.manifold,
                            orthogonalize=self._group_orthogonalizer(group), momentum=group["momentum"],
                            nesterov=group["nesterov"], eps=group["eps"], correct=correct, atol=group["atol"],
                            drifts=drifts, infos=infos, labels=labels, plan=plan)


class OrthogonalMuon(ManifoldMuon):
    """Muon on the orthogonal group O(n): :class:`ManifoldMuon` with ``manifold=Orthogonal()``.

    Parameters have shape ``(..., n, n)`` and start orthogonal (e.g. from
    :meth:`svmuon.orthogonal.manifolds.Orthogonal.project`). Arguments, behaviour and errors as
    :class:`ManifoldMuon`, without ``manifold``.

    References:
        su2025orthogonal, jordan2024muon, absil2008optimization, bjorck1971iterative, amsel2025polar.
    """

    def __init__(self, params: Iterable[Any], lr: float | torch.Tensor = 0.02, **kwargs: Any) -> None:
        if "manifold" in kwargs:
            raise TypeError("OrthogonalMuon works on Orthogonal(); use ManifoldMuon(..., manifold=...) for others")
        from svmuon.orthogonal.manifolds import Orthogonal

        super().__init__(params, lr, manifold=Orthogonal(), **kwargs)
