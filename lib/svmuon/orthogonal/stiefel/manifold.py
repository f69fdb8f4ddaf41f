"""The Stiefel manifold ``St(m, n) = {W ∈ R^{m×n} : WᵀW = I_n}`` (m >= n) as a ``svmuon.orthogonal.base.Manifold``.

The book writes ``St(m, n)`` with m >= n rows and columns; the source articles (su2025stiefel) write it
``St(n, m)``. A wide matrix (m < n) is a point when its *rows* are orthonormal (``WWᵀ = I_m``) and is handled
as its transpose everywhere (``transpose_wide=True``, the default), so one manifold object serves the tall
and the wide weights of a network.

* tangent space at ``W``: ``{Δ : WᵀΔ + ΔᵀW = 0}``, projection ``P_W(Z) = Z - W[WᵀZ]_sym``;
* steepest direction under the spectral norm: by the solver of the options (:mod:`svmuon.orthogonal.stiefel`;
  default ``"completion"``); for m = n the orthogonal group's closed form ``W msign([WᵀG]_skew)``;
* retraction: the polar retraction ``R_W(Ξ) = (W + Ξ)((W + Ξ)ᵀ(W + Ξ))^{-1/2}``, the nearest point to ``W + Ξ``:
  for tangent ``Ξ = -ηΦ`` the Gram matrix is ``I + η²ΦᵀΦ`` (thm-stiefel-retraction), whose inverse square root
  Newton–Schulz iterations from the identity reach in a few steps for ``η < 0.9`` (an eigendecomposition
  beyond); the iterations run against the Gram matrix of the actual ``W - ηΦ``, so a tangent residual or a
  drifted ``W`` costs no accuracy;
* nearest point: the polar factor (differentiable, with a backward that is finite at repeated singular values).

References:
    edelman1998geometry, absil2008optimization, su2025stiefel, bernstein2025stiefel, higham2008functions.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from svmuon.orthogonal.base import (Direction, Manifold, _orthogonalizer, as_matrix, check_eps, check_pair,
                                   eps_damping)
from svmuon.orthogonal.stiefel.dispatch import solve
from svmuon.orthogonal.stiefel.options import StiefelOptions
from svmuon.orthogonal.stiefel.reduction import WORK_DTYPE, _sym, _tangent_part
from svmuon.orthogonal.stiefel.retraction import polar_retraction

__all__ = ["Stiefel"]

_UNSET: Any = object()


class Stiefel(Manifold):
    """The Stiefel manifold ``St(m, n) = {W ∈ R^{m×n} : WᵀW = I_n}``, m >= n, batched ``(..., m, n)``.

    Holds the solver options (a frozen :class:`~svmuon.orthogonal.stiefel.options.StiefelOptions`, ``.options``),
    no optimizer state and no msign route (the optimizer passes its own; the public methods take an optional
    ``orthogonalize``). Every method keeps type (tensor/NumPy), dtype and device. Wide matrices are handled
    transposed.

    Args:
        solver: ``"completion"`` (default), ``"newton"`` (exact), ``"fixed_point"``, ``"fixed_point_reduced"``,
            ``"dual_ascent"``, ``"amortized"`` (one dual step per training step, warm); and ``tol``, ``max_iter``,
            ``smoothing``, ``max_cg``, ``rank_rtol``, ``alpha``, ``transpose_wide``, ``route``, ``work_dtype``: see
            ``StiefelOptions``, which holds every default.
        method: the old spelling of ``solver`` (a ``DeprecationWarning``; ``method`` is the msign route elsewhere).

    Raises:
        ValueError, TypeError: bad options (``StiefelOptions``); msign options (``msign_method``, ``ns_steps``, ...),
            which belong to the optimizer.

    References:
        su2025stiefel, bernstein2025stiefel, su2025orthogonal, absil2008optimization, edelman1998geometry.
    """

    def __init__(self, *, method: Any = _UNSET, **options: Any) -> None:
        msign = {"msign_method", "ns_steps", "ns_coefficients", "compute_dtype"} & set(options)
        if msign:
            super().__init__(**{k: options[k] for k in msign})  # raises, naming them
        if method is not _UNSET:
            warnings.warn("Stiefel(method=...) is deprecated: use solver=... (method is the msign route elsewhere "
                          "in svmuon)", DeprecationWarning, stacklevel=2)
            options.setdefault("solver", method)
        self.options = StiefelOptions(**options)
        self.state_keys = () if self.options.solver == "completion" else ("Y", "warm")

    def __repr__(self) -> str:
        defaults = StiefelOptions()
        changed = [f"{k}={getattr(self.options, k)!r}" for k in defaults.__dataclass_fields__
                   if getattr(self.options, k) != getattr(defaults, k)]
        return f"Stiefel({', '.join(changed)})"

    def __getattr__(self, name: str) -> Any:  # the options read as attributes: Stiefel().solver, .tol, ...
        options = self.__dict__.get("options")
        if options is not None and name in StiefelOptions.__dataclass_fields__:
            return getattr(options, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # -- points ---------------------------------------------------------------------------------------------
    def _shape_error(self, shape: tuple[int, ...]) -> str | None:
        m, n = shape[-2:]
        if m < n and not self.options.transpose_wide:
            return (f"a point of St(m, n) must be tall or square (..., m, n) with m >= n, got {m} x {n} "
                    "(a wide matrix with orthonormal rows is accepted with Stiefel(transpose_wide=True), "
                    "or pass its transpose)")
        return None

    def dtype_error(self, dtype: torch.dtype) -> str | None:
        if self.options.work_dtype == torch.float32 and dtype == torch.float64:
            return ("Stiefel(work_dtype=torch.float32) solves float32 points and gradients only (a float64 "
                    "gradient's small tangent part would be lost to float32 rounding); use float32 parameters or "
                    "the default work_dtype")
        return None

    def transposed(self, shape: tuple[int, ...]) -> bool:
        """True for a wide shape (``m < n``): its kernels see the tall transpose."""
        return shape[-2] < shape[-1]

    def defect(self, W: Any) -> torch.Tensor:
        """``‖WᵀW - I‖_max`` per matrix (``‖WWᵀ - I‖_max`` for a wide one), shape ``(...)``, in float64.

        Raises:
            TypeError: non-float ``W``. ValueError: empty, non-finite ``W``, or wide with ``transpose_wide=False``.
        """
        return super().defect(W)

    def project(self, W: Any) -> Any:
        """Nearest point in Frobenius norm: the orthonormal polar factor ``UVᵀ`` of a thin SVD ``W = UΣVᵀ``
        (higham1986polar); wide ``W``: orthonormal rows. Differentiable, with a backward that stays finite at
        repeated singular values (the identity, any point: ``svmuon.orthogonal._polar_grad``). For a
        rank-deficient ``W`` (``0`` included) one of the nearest points (the null directions are completed by the
        SVD's vectors), with a finite backward that holds the completion fixed (the projection has no derivative
        there).

        Raises:
            TypeError: non-float ``W``. ValueError: empty or non-finite ``W``, or wide with ``transpose_wide=False``.
        """
        from svmuon.orthogonal._polar_grad import polar_factor_svd

        Wt, was_numpy = as_matrix(W, "W")
        self._require_shape(Wt, "W")
        work = Wt if Wt.dtype in (torch.float32, torch.float64) else Wt.float()
        # complete: zero singular values replaced by one too (a rank-deficient W gets one of its nearest points,
        # its null directions completed by the SVD's vectors), with a backward that stays finite there
        Q = self._canonical(polar_factor_svd(self._canonical(work), 0.0, complete=True), tuple(Wt.shape))
        out = Q.to(Wt.dtype)
        return out.numpy() if was_numpy else out

    # -- tangent vectors and directions ---------------------------------------------------------------------
    def steepest_direction(self, W: Any, G: Any, *, orthogonalize: Any = None, eps: float | None = None,
                           **options: Any) -> Any:
        """Unit steepest-ascent direction ``Φ``: maximiser of ``tr(GᵀΦ)`` over tangent ``Φ`` with ``‖Φ‖₂ <= 1``
        (eq-stiefel-problem), by this manifold's solver. Descend along ``-Φ``. For m = n: ``W msign([WᵀG]_skew)``.

        Args:
            W: point ``(..., m, n)`` (wide: handled transposed). G: gradient, same matrix shape, batch
                broadcastable; ``Φ`` has its type and dtype.
            orthogonalize: ``X -> msign(X)`` for the square case and the msign-based solvers (default: exact).
            eps: a tangent part ``‖P_W(G)‖_F`` below ``eps ‖G‖_F`` is rounding noise of the projection at this
                precision, not a direction: ``Φ`` is multiplied by ``‖P_W(G)‖_F / (eps ‖G‖_F)`` there (the
                optimizer's eps rule), so ``G = W(S + Sᵀ)`` gives ``Φ ≈ 0`` as ``G = 0`` does. Default ``√eps`` of
                the dtype; 0 disables.
            options: override this manifold's solver options for this call (``solver``, ``tol``, ``max_iter``...;
                ``transpose_wide`` both ways: ``True`` accepts a wide ``W`` on a ``transpose_wide=False`` manifold).

        Returns:
            ``Φ`` in the broadcast shape: tangent and ``‖Φ‖₂ <= 1`` to the rounding of its dtype, whatever the solver
            reached (its output is projected onto the tangent space and divided by ``‖Φ‖₂`` where that exceeds 1; use
            :func:`~svmuon.orthogonal.stiefel.api.stiefel_direction` for iterations, residuals and the gap).

        Raises:
            TypeError: non-float inputs, ``eps`` not a real number. ValueError: shape mismatch, non-finite entries,
                ``W`` not a point (``‖WᵀW - I‖_max > √eps`` of its dtype), wide ``W`` with ``transpose_wide=False``,
                bad options, ``eps`` negative or not finite.
        """
        from svmuon.orthogonal.msign import power_of_two_scale

        opts = self.options.override(**options)
        if opts.transpose_wide != self.options.transpose_wide:  # this call's rule for wide points, either way
            other = Stiefel(**{k: getattr(opts, k) for k in StiefelOptions.__dataclass_fields__})
            return other.steepest_direction(W, G, orthogonalize=orthogonalize, eps=eps)
        Wt, _ = as_matrix(W, "W")
        Gt, was_numpy = as_matrix(G, "G")
        self._require_shape(Wt, "W")
        check_pair(Wt, "W", Gt, "G")
        self._require_point(Wt)
        if Gt.dtype not in (torch.float32, torch.float64):
            raise TypeError(f"G must be float32 or float64, got {Gt.dtype}")
        eps = check_eps(eps, Gt.dtype)
        shape = torch.broadcast_shapes(Wt.shape, Gt.shape)
        Wc = self._canonical(Wt.to(Gt.dtype).expand(shape).reshape(-1, *shape[-2:]), tuple(shape))
        Gc = self._canonical(Gt.expand(shape).reshape(-1, *shape[-2:]), tuple(shape))
        Gc = Gc / power_of_two_scale(Gc)  # exact; Φ does not depend on the size of G, and no product overflows
        sol = solve(Wc, Gc, opts, orthogonalize=_orthogonalizer(orthogonalize))
        damping = eps_damping(sol.tangent_norm.to(Gc.dtype), torch.linalg.matrix_norm(Gc), eps)
        # the contract, whatever the solver reached: tangent (to rounding) and in the unit ball
        Phi = self.tangent(Wc, sol.Phi.to(Gc.dtype))
        top = torch.linalg.eigvalsh(_sym((Phi.mT @ Phi).to(WORK_DTYPE))).amax(dim=-1).clamp_min(1.0)
        Phi = Phi * (damping / torch.sqrt(top).to(Gc.dtype))[:, None, None]
        Phi = self._canonical(Phi, tuple(shape)).reshape(shape)
        return Phi.numpy() if was_numpy else Phi

    def retract_along(self, W: Any, Phi: Any, eta: float) -> Any:
        """Polar retraction ``R_W(-ηΦ)``: the nearest point of St(m, n) to ``W - ηΦ`` (thm-stiefel-retraction).

        For tangent ``Φ`` with ``‖Φ‖₂ <= 1`` (any singular values in [0, 1], as a Stiefel direction has) this is
        ``(W - ηΦ)(I + η²ΦᵀΦ)^{-1/2}``, computed by Newton–Schulz iterations against the exact Gram matrix (an
        eigendecomposition for ``η >= 0.9``); for a partial isometry it is the source's closed form
        ``(W - ηΦ)(I - P + P/√(1+η²))``. A ``Φ`` that is not tangent (the result off the manifold by more than
        ``√eps/4``) falls back to ``retract(W, -ηΦ)``, the same definition by SVD.

        Args:
            W: point ``(..., m, n)`` (wide: orthonormal rows). Phi: same matrix shape, batch broadcastable to
                ``W``'s. eta: step length >= 0.

        Returns:
            The new point: the type, shape and dtype of ``W``.

        Raises:
            TypeError: non-float matrices, ``eta`` not a real number.
            ValueError: bad shapes, non-finite entries, ``W`` not a point (``‖WᵀW - I‖_max > √eps`` of its
                dtype), a bad ``eta``, or a ``W - ηΦ`` without a unique nearest point.

        References:
            su2025stiefel, absil2008optimization, higham2008functions.
        """
        return super().retract_along(W, Phi, eta)

    # -- the optimizer protocol (svmuon.orthogonal.base), canonical (tall) batches -------------------------------
    def init_state(self, W: torch.Tensor) -> dict[str, torch.Tensor]:
        if not self.state_keys:
            return {}
        n = W.shape[-1]
        return {"Y": torch.zeros(W.shape[0], n, n, dtype=W.dtype, device=W.device),
                "warm": torch.zeros(W.shape[0], dtype=W.dtype, device=W.device)}

    def tangent(self, W: torch.Tensor, Z: torch.Tensor) -> torch.Tensor:
        return _tangent_part(W, Z)

    def direction(self, W: torch.Tensor, U: torch.Tensor, orthogonalize: Any, state: dict) -> Direction:
        """The steepest direction for the batch ``(k, m, n)``; ``step`` is ``Φ``. The iterative solvers warm-start
        from ``state["Y"]`` (the reduced multiplier of the previous step's update per unit ``‖P_W(U)‖_F``, where
        ``state["warm"]`` is 1: it depends on the tangent part of ``U`` only, and is positively homogeneous in it;
        the normal part of ``U``, the current gradient's alone, does not scale it). A non-finite ``U`` is
        solved as 0 (the optimizer's finiteness check reads ``U`` itself and refuses the step); a factorisation
        that does not converge (LAPACK) gives a NaN direction. Nothing raises, but
        float64 inputs with ``work_dtype=torch.float32`` (a TypeError, before anything is changed)."""
        # a non-finite U is solved as 0 (an eigendecomposition of NaN may not return); the optimizer checks U itself
        U = torch.nan_to_num(U.to(W.dtype), nan=0.0, posinf=0.0, neginf=0.0)
        warm = self._warm(state)
        try:
            sol = solve(W, U, self.options, Y0=None if warm is None else warm[0], warm=None if warm is None else warm[1],
                        orthogonalize=orthogonalize, exact_residual=False, unit_start=True)
        except torch.linalg.LinAlgError:
            nan = torch.full((W.shape[0],), float("nan"), dtype=W.dtype, device=W.device)
            return Direction(torch.full_like(W, float("nan")), nan, {k: v for k, v in state.items()}, {})
        Phi = sol.Phi.to(W.dtype)
        if self.options.solver != "completion":  # an iterate stopped early (amortized: always) is not tangent,
            Phi = _tangent_part(W, Phi)  # and the retraction's series assumes it is: project (2 products)
        tangent_norm = sol.tangent_norm.to(W.dtype)
        info = {"iterations": torch.full((W.shape[0],), float(sol.iterations), dtype=W.dtype, device=W.device)}
        if sol.gap is not None:
            info["gap"] = sol.gap.to(W.dtype)
        if self.options.solver != "completion":
            info["residual"] = sol.residual.to(W.dtype)
        new_state = {}
        if self.state_keys:
            unit = torch.where(sol.tangent_norm > 0, sol.tangent_norm, torch.ones_like(sol.tangent_norm))
            new_state = {"Y": (sol.Y / unit[:, None, None]).to(W.dtype),
                         "warm": torch.ones(W.shape[0], dtype=W.dtype, device=W.device)}
        start = None if sol.defect is None else sol.defect.to(W.dtype)  # the float64 completion formed WᵀW
        return Direction(Phi, tangent_norm, new_state, info, start)

    def _warm(self, state: dict) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The warm start ``(Y per unit tangent norm, warm)``: none that is not finite or absurdly large (no
        multiplier of a unit-norm problem is above 1e100)."""
        if not state or "Y" not in state:
            return None
        Y = state["Y"].to(WORK_DTYPE)
        ok = torch.isfinite(Y).flatten(1).all(dim=1) & (Y.abs().amax(dim=(-2, -1)) <= 1e100)
        return torch.where(ok[:, None, None], Y, torch.zeros_like(Y)), ok & (state["warm"] > 0)

    def retract_direction(self, W: torch.Tensor, step: torch.Tensor, eta: torch.Tensor,
                          eta_max: float | None = None) -> torch.Tensor:
        """Polar retraction of ``-ηΦ`` (``step = Φ``) for any ``Φ`` (:func:`~svmuon.orthogonal.stiefel.retraction.polar_retraction`)."""
        return polar_retraction(W, step, eta, eta_max)

    def stabilize(self, W: torch.Tensor, correct: bool | int) -> tuple[torch.Tensor, torch.Tensor]:
        """The defect ``max|WᵀW - I|`` of the retracted point (one Gram matrix); no correction: the polar retraction
        is computed from the Gram matrix of the actual ``W - ηΦ``, so it returns a point orthonormal to rounding
        whatever drift ``W`` had, and drift cannot accumulate (``polar_every`` has nothing to add here)."""
        return super().stabilize(W, 0)  # the defect alone: no Björck step

    def start_defect(self, W: torch.Tensor) -> torch.Tensor:
        """``max|WᵀW - I|`` of the point before the step (one Gram matrix): the polar retraction returns a point
        from any ``W``, so a ``W`` scaled or overwritten since the last step shows here only (refused, as on
        O(n), instead of silently re-projected)."""
        return self.stabilize(W, False)[1]
